"""The dynamo front end crashing on a graph (a bug) must not end in exit 0 with OUT wrong at other sizes:
under symbolic sizes the unsearched graph is refused like a frozen region (exit 4, --allow-partial writes it
with a warning); a static graph is still patched (its leftovers), with a note naming the failure."""
from __future__ import annotations

import pytest
from helpers import make_leftover
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.frontends import dynamo


def _with_average_pool(h, w):
    """x -> leftover adaptive_avg_pool2d -> y, and x -> AveragePool k2 -> z (what a dynamo region may be)."""
    model = make_leftover("avg", [1, 3, h, w], [4, 4])
    g = model.graph
    g.node.append(helper.make_node("AveragePool", ["x"], ["z"], kernel_shape=[2, 2], strides=[2, 2], name="ap"))
    g.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, "Hz", "Wz"]))
    return model


@pytest.fixture
def crashing_front_end(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("injected")

    monkeypatch.setattr(dynamo, "_find", boom)


def test_symbolic_graph_is_refused(crashing_front_end):
    with pytest.raises(UnsupportedNodeError, match="dynamo front end failed"):
        onnxpoolfix.patch(_with_average_pool("H", "W"), check=False)


def test_allow_partial_writes_it_with_the_failure_named(crashing_front_end):
    result = onnxpoolfix.patch(_with_average_pool("H", "W"), check=False, allow_partial=True)
    assert result.report.partial
    assert any("injected" in line for line in result.report.partial)


def test_static_graph_is_patched_with_a_note(crashing_front_end):
    result = onnxpoolfix.patch(_with_average_pool(12, 12), check=False)
    assert not result.report.partial
    assert any("injected" in str(n) for n in result.report.notes)
    assert "adaptive_avg_pool2d" not in {n.op_type for n in result.model.graph.node}

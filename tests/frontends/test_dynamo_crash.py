"""The dynamo front end crashing on a graph is a bug, and it surfaces as one: the API raises it, the CLI exits 1
("internal error", a hint to report it) and writes nothing. It is never skipped while the rest of the model is
written with exit 0 (an unsearched region could stay frozen at the traced size, and a static graph's leftovers
patched without it would hide the bug)."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from helpers import make_leftover
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.frontends.dynamo import front_end as dynamo


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

    monkeypatch.setattr(dynamo, "find_decomposed_pools", boom)


@pytest.mark.parametrize("hw", [("H", "W"), (12, 12)], ids=["symbolic", "static"])
def test_the_api_raises_the_bug(crashing_front_end, hw):
    with pytest.raises(RuntimeError, match="injected"):
        onnxpoolfix.patch(_with_average_pool(*hw), check=False)
    with pytest.raises(RuntimeError, match="injected"):  # --allow-partial does not hide a bug either
        onnxpoolfix.patch(_with_average_pool(*hw), check=False, allow_partial=True)


@pytest.mark.parametrize("hw", [("H", "W"), (12, 12)], ids=["symbolic", "static"])
def test_the_cli_exits_1_and_writes_nothing(crashing_front_end, hw, tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_with_average_pool(*hw), src)
    r = CliRunner().invoke(main, [str(src), str(out), "--no-check", "-q"])
    assert r.exit_code == 1, r.output
    assert "internal error: RuntimeError: injected" in r.stderr and "bug" in r.stderr
    assert not out.exists()

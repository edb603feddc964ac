"""torch 2.14's dynamo exports of adaptive max pooling (fixtures/dynamo/make_torch214_fixtures.py, made with
torch 2.14.1): a MaxPool frozen at the traced size 20x28, with and without indices (the indices through the
exporter's kernel-1 MaxPool, Slice and Sub), and a global one as ReduceMax + ArgMax. OUT is compared with torch
itself (this environment's, eagerly: values and indices) at sizes the file was not traced at."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")

DYNAMO = Path(__file__).resolve().parents[2] / "fixtures" / "dynamo"
SIZES = [(20, 28), (17, 23), (5, 7), (9, 40), (3, 2), (64, 31)]  # the traced one, then odd and non-square


def _against_torch(model: onnx.ModelProto, size, indices: bool) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for hw in SIZES:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        x[0, 1, 0, 0] = x[0, 1].max()  # a tie: torch keeps the first maximum's index
        got = sess.run(None, {"x": x})
        want = torch.nn.functional.adaptive_max_pool2d(torch.from_numpy(x), size, return_indices=True)
        assert got[0].shape == tuple(want[0].shape) and np.array_equal(got[0], want[0].numpy()), hw
        if indices:
            assert np.array_equal(got[1], want[1].numpy()), hw


def test_the_frozen_max_pool_with_indices_is_wrong_as_exported():
    model = onnx.load(DYNAMO / "max_5x7_indices_torch214.onnx")
    with pytest.raises(AssertionError):
        _against_torch(model, (5, 7), indices=True)


@pytest.mark.parametrize("name,indices", [("max_5x7_indices_torch214", True), ("max_5x7_torch214", False)])
def test_with_the_traced_shape_values_and_indices_are_exact_at_every_size(name, indices, tmp_path):
    out = tmp_path / "o.onnx"
    r = CliRunner().invoke(main, [str(DYNAMO / f"{name}.onnx"), str(out), "--traced-shape", "x:1,3,20,28"])
    assert r.exit_code == 0, r.output
    model = onnx.load(out)
    assert not {n.op_type for n in model.graph.node} & {"MaxPool", "Slice"}  # the frozen pool and its arithmetic
    _against_torch(model, (5, 7), indices)


@pytest.mark.parametrize("name", ["max_5x7_indices_torch214", "max_5x7_torch214"])
def test_without_the_traced_shape_it_is_refused_naming_it(name, tmp_path):
    out = tmp_path / "o.onnx"
    r = CliRunner().invoke(main, [str(DYNAMO / f"{name}.onnx"), str(out)])
    assert r.exit_code == 4 and not out.exists()
    assert "--traced-shape" in r.stderr and "cannot tell" not in r.stderr, r.stderr


def test_indices_read_other_than_through_the_exporters_arithmetic_are_refused():
    """The chain is read exactly: a Slice that takes two elements is no plane's first index."""
    model = onnx.load(DYNAMO / "max_5x7_indices_torch214.onnx")
    sl = next(n for n in model.graph.node if n.op_type == "Slice")
    ends = next(t for t in model.graph.initializer if t.name == sl.input[2])
    ends.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(ends) * 0 + 2, ends.name))
    with pytest.raises(UnsupportedNodeError) as e:
        patch(model, traced_shapes={"x": [1, 3, 20, 28]})
    assert "index arithmetic" in str(e.value.hint)


def test_the_global_max_pool_with_indices_is_right_as_exported_and_left_alone():
    model = onnx.load(DYNAMO / "max_1_indices_torch214.onnx")
    _against_torch(model, 1, indices=True)  # ReduceMax + ArgMax hold at every size
    result = patch(model)
    assert result.report.nodes == []
    _against_torch(result.model, 1, indices=True)


def test_two_pools_sharing_the_exporters_index_arithmetic_are_both_exact(tmp_path):
    """Two adaptive max pools of one tensor, both with indices, their sizes on the source line: the exporter
    shares one kernel-1 MaxPool and Slice between the two Subs. Both replaced with no option, exact."""
    result = patch(onnx.load(DYNAMO / "max_two_indices_torch214.onnx"))
    assert [n.lowering for n in result.report.nodes] == ["dynamic", "dynamic"]
    assert not {n.op_type for n in result.model.graph.node} & {"MaxPool", "Slice"}
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for hw in SIZES:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        got = sess.run(None, {"x": x})
        want = [t.numpy() for size in ((5, 7), (10, 14))
                for t in torch.nn.functional.adaptive_max_pool2d(torch.from_numpy(x), size, return_indices=True)]
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), hw

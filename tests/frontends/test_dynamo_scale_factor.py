"""Dynamo exports of ``F.interpolate(x, scale_factor=..., mode="area")`` under symbolic H/W (issue 23, item
1): the graph computes the output size (``trunc = Cast(Shape(x)[2] * 0.625)``), so the region is lowered with
the ``dynamic`` lowering reading that size at run time, and OUT is exact at every size. Where the exporter
wrote a frozen AveragePool with no size computation (scale 0.5 at an even traced size), it stays refused. A
scale a double cannot hold (0.6) is refused: the file's float32 does not say which double torch held, and at
some length the doubles beside 0.6 floor otherwise (tests/graph/test_size_precision.py).
Real torch 2.13 ``torch.onnx.export(..., dynamo=True)`` exports, made once per module."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from export_cache import dynamo_export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import UnsupportedNodeError

SIZES = [(10, 14), (17, 9), (33, 20), (5, 7), (4, 4), (64, 3 * 17)]


class Area(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale, mode="area")


class ConvArea(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.d = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.d(F.interpolate(torch.relu(self.c(x)), scale_factor=0.625, mode="area"))


def _export(module, hw):
    torch.manual_seed(0)
    module = module.eval()
    d = torch.export.Dim
    return module, dynamo_export(module, (torch.randn(1, 3, *hw),), input_names=["x"],
                                 dynamic_shapes={"x": {2: d("H", min=4, max=512), 3: d("W", min=4, max=512)}})


@pytest.fixture(scope="module")
def exports():
    return {"area": _export(Area(0.625), (10, 14)), "conv": _export(ConvArea(), (10, 14)),
            "half": _export(Area(0.5), (12, 12)), "decimal": _export(Area(0.6), (10, 14))}


def _run(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _torch(module, x):
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("name", ["area", "conv"])
def test_scale_factor_region_is_lowered_on_the_size_the_graph_computes_and_exact_at_every_size(exports, name):
    module, model = exports[name]
    result = patch(model)
    nodes = result.report.nodes
    assert [(n.encoding, n.lowering) for n in nodes] == [("dynamo", "dynamic")]
    assert not result.report.to_dict()["suspects"]
    out = result.model.graph.output[0].type.tensor_type.shape.dim
    assert all(not d.HasField("dim_value") for d in out[2:])  # the output size still follows the input
    rng = np.random.default_rng(3)
    for hw in SIZES:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        want, got = _torch(module, x), _run(result.model, x)
        assert got.shape == want.shape, hw
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(hw))


def test_a_scale_a_double_cannot_hold_is_refused(exports):
    _, model = exports["decimal"]
    with pytest.raises(UnsupportedNodeError, match="float32, torch in double"):
        patch(model)


def test_the_cli_writes_it_with_exit_0(exports, tmp_path):
    _, model = exports["area"]
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    r = CliRunner().invoke(main, [str(src), str(dst)])
    assert r.exit_code == 0, r.output
    assert dst.exists()


def test_a_frozen_average_pool_without_a_size_computation_is_still_refused(exports, tmp_path):
    """Scale 0.5 traced at 12x12: a plain AveragePool k2 s2, no size tensor in the graph: exit 4."""
    _, model = exports["half"]
    assert [n.op_type for n in model.graph.node] == ["AveragePool"]
    with pytest.raises(UnsupportedNodeError, match="frozen at its traced size"):
        patch(model)
    partial = patch(model, allow_partial=True)
    assert ["scale_factor" in s["why"] for s in partial.report.to_dict()["suspects"]] == [True]
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    r = CliRunner().invoke(main, [str(src), str(dst)])
    # no size given to the tool makes it exact (it is right only where the kernel divides): the hint names the
    # way that does, never --traced-shape
    hint = r.output.strip().splitlines()[-1]
    assert r.exit_code == 4 and "onnxpoolfix.export" in hint and "--traced-shape" not in hint and not dst.exists()


def test_a_size_tensor_taken_for_the_wrong_axis_is_refused_not_written(exports, monkeypatch):
    """The proof checks the result's length against the size tensor at every size: a hint pointing H at W's
    size (right only where both are equal) must end in a refusal, never in an exit 0 (the promise)."""
    from onnxpoolfix.frontends.dynamo import dataflow as dynamo_graph
    from onnxpoolfix.frontends.dynamo import search as dynamo_search

    def swapped(g, region, result, a, info):
        return dynamo_search.range_limit(g, region, result, a ^ 1, info)

    monkeypatch.setattr(dynamo_graph, "range_limit", swapped)
    _, model = exports["area"]
    with pytest.raises(UnsupportedNodeError, match="frozen at its traced size"):
        patch(model)

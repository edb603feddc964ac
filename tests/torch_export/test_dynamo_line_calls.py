"""Frozen dynamo pools (uniform windows at the traced size, symbolic H/W) on a source line that shows several
calls (review56). ``F.upsample`` is torch's alias of ``F.interpolate``: its ``mode="area"`` call is an area resize
as written, not a plain call (it was neither, so the other call on its line lent the frozen node its size: exit 0
and OUT wrong at every size, the traced one included). A line's decomposed pools count among the pools it made:
a hidden pool (a property of the module that pools: the exporter records the frames named ``forward`` alone, so its
nodes carry the caller's line) beside a decomposed call read as that call's size (exit 0, OUT wrong everywhere).
Non-ASCII text before a call that ends the line (``tag = "größe"; y = F.adaptive_avg_pool2d(x, (4, 6))``) read the
call as continued on the next line (``ast``'s offsets are UTF-8 bytes, the line's length was characters): refused.
A model defined by ``exec()`` has no source text in its trace: still refused, now saying so (its frame's header was
named as "its source line", which "calls something"). Each patched file is compared with torch itself at other sizes."""
from __future__ import annotations

from pathlib import Path

import pytest
from dynamo_exports import assert_matches_torch, export_live, skip_where_another_torch_cannot_export

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch


class UpsampleAlone(nn.Module):  # frozen AveragePool k2 at 12x12: its size is on the line
    def forward(self, x):
        return F.upsample(x, size=(6, 6), mode="area")


class UpsampleBesideDecomposed(nn.Module):  # the 5x5 pool is decomposed at 12x12; its windows (k2) fit 5 at 10
    def forward(self, x):
        a, b = F.upsample(x, size=(6, 6), mode="area"), F.adaptive_avg_pool2d(x, 5)
        return a, b


class PropertyBesideDecomposed(nn.Module):  # the property's pool (k3) and the 6-pool (k2) fit 6 and 9 at 18x18
    @property
    def pooled(self):
        return F.adaptive_avg_pool2d(self._x, 4)

    def forward(self, x):
        self._x = x
        p, a, b = self.pooled, F.adaptive_avg_pool2d(x, 6), F.adaptive_avg_pool2d(x, 9)
        return p.flatten(1), a.flatten(1), b.flatten(1)


class NonAsciiBefore(nn.Module):  # frozen AveragePool k(3, 2) at 12x12
    def forward(self, x):
        tag = "größe"; y = F.adaptive_avg_pool2d(x, (4, 6))  # noqa: E702
        return y + len(tag)


HW = (12, 12)
OTHER = [(24, 24), (37, 53), (8, 20), (48, 36)]


def _export(module, path: Path):
    dims = {2: torch.export.Dim("H", min=4, max=256), 3: torch.export.Dim("W", min=4, max=256)}
    try:
        return export_live(module.eval(), torch.randn(1, 3, *HW), path, dims)
    except Exception as error:  # torch 2.9.1 cannot export the property's module (a TorchExportError)
        skip_where_another_torch_cannot_export(torch, error)
        raise


def _matches(model, module) -> None:
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for hw in [HW, *OTHER]:
        x = torch.randn(1, 3, *hw)
        with torch.no_grad():
            want = module(x)
        for got, w in zip(sess.run(None, {"x": x.numpy()}), want):
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5)


def test_upsample_area_is_read_as_written(tmp_path: Path):
    m = UpsampleAlone().eval()
    model = _export(m, tmp_path / "in.onnx")
    assert any(n.op_type == "AveragePool" for n in model.graph.node)  # the premise: frozen at the traced size
    for traced in (None, {"x": [1, 3, *HW]}):
        out = onnxpoolfix.patch(model, traced_shapes=traced).model
        assert_matches_torch(out, m, [(1, 3, *s) for s in [HW, *OTHER]], rtol=1e-5, atol=1e-5)


def test_upsample_beside_a_decomposed_call(tmp_path: Path):
    m = UpsampleBesideDecomposed().eval()
    model = _export(m, tmp_path / "in.onnx")
    with pytest.raises(UnsupportedNodeError):  # 6 (traced 12) or 5 (traced 10): the traced size decides
        onnxpoolfix.patch(model)
    _matches(onnxpoolfix.patch(model, traced_shapes={"x": [1, 3, *HW]}).model, m)


def test_hidden_pool_beside_a_decomposed_call(tmp_path: Path):
    model = _export(PropertyBesideDecomposed(), tmp_path / "in.onnx")
    assert sum(n.op_type == "AveragePool" for n in model.graph.node) == 2  # the premise: the 9-pool decomposed
    with pytest.raises(UnsupportedNodeError):  # which of its nodes is which, the line cannot say
        onnxpoolfix.patch(model)


def test_non_ascii_text_before_the_call(tmp_path: Path):
    m = NonAsciiBefore().eval()
    model = _export(m, tmp_path / "in.onnx")
    assert any(n.op_type == "AveragePool" for n in model.graph.node)  # the premise: frozen at the traced size
    assert_matches_torch(onnxpoolfix.patch(model).model, m, [(1, 3, *s) for s in [HW, *OTHER]], rtol=1e-5, atol=1e-5)


_CELL = """
import torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def forward(self, x):
        a, b = F.adaptive_avg_pool2d(x, 6), F.adaptive_avg_pool2d(x, 3)
        return a, b
"""


def test_exec_model_without_source_text(tmp_path: Path):
    namespace: dict = {}
    exec(compile(_CELL, "<cell-1>", "exec"), namespace)  # no file, no linecache entry: the trace has no line
    model = _export(namespace["M"](), tmp_path / "in.onnx")
    for traced in (None, {"x": [1, 3, *HW]}):
        with pytest.raises(UnsupportedNodeError) as refused:  # which call made which node, nothing says
            onnxpoolfix.patch(model, traced_shapes=traced)
        assert "no source text" in refused.value.hint, refused.value.hint

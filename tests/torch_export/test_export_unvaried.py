"""onnxpoolfix.export says when the comparison with torch never moved a symbolic dim (review62): transformers'
MobileViT rounds its map to a multiple of its patch with ``int(math.ceil(h / p) * p)``, the comparison found no
other height or width to run torch at, and "matched torch at 5 input size(s)" listed five batches at the traced
H/W while the file, declaring 32*h x 32*w, crashed at every other size. The report now warns (``unvaried-sizes``)
with the symbols and the input dims declared with them; an export whose H/W did move has no such warning."""
from __future__ import annotations

import math

import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from torch.export import Dim  # noqa: E402

F = torch.nn.functional
pytestmark = pytest.mark.torch


class Rounded(torch.nn.Module):
    """MobileViT's size rounding before a conv and an adaptive pool."""

    def __init__(self, rounds: bool):
        super().__init__()
        self.rounds, self.c = rounds, torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if self.rounds:
            h, w = x.shape[-2:]
            nh, nw = int(math.ceil(h / 2) * 2), int(math.ceil(w / 2) * 2)
            if nh != h or nw != w:
                x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
        return F.adaptive_avg_pool2d(self.c(x), (5, 7))


def _export(module, tmp_path):
    torch.manual_seed(0)
    shapes = {"x": {0: Dim.DYNAMIC, 2: Dim("h", min=2, max=64) * 32, 3: Dim("w", min=2, max=64) * 32}}
    return onnxpoolfix.export(module.eval(), (torch.randn(2, 3, 64, 96),), str(tmp_path / "out.onnx"),
                              dynamic_shapes=shapes)


def _warned(report) -> list:
    return [n for n in report.notes if getattr(n, "code", None) == "unvaried-sizes"]


def test_an_export_whose_h_w_never_moved_says_so(tmp_path):
    report = _export(Rounded(True), tmp_path)
    (warning,) = _warned(report)
    assert warning.severity == "warning" and len(warning.data["symbols"]) == 2
    assert "x dim 2" in str(warning) and "x dim 3" in str(warning)
    (matched,) = [str(n) for n in report.notes if getattr(n, "code", None) == "matched-torch"]
    assert all(part.endswith("x64x96") for part in matched.rsplit("): ", 1)[1].split("; "))  # H/W never moved


def test_an_export_whose_h_w_moved_has_no_such_warning(tmp_path):
    report = _export(Rounded(False), tmp_path)
    assert not _warned(report)
    (matched,) = [str(n) for n in report.notes if getattr(n, "code", None) == "matched-torch"]
    assert any(not part.endswith("x64x96") for part in matched.rsplit("): ", 1)[1].split("; "))

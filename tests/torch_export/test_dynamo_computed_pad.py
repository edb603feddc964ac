"""A pool of a tensor padded by amounts computed from the input's size (Swin pads to its window, timm's csatv2
too): onnx's inference cannot size the pooled tensor at the traced size (its dims are Mod expressions), so the
region was never tried there and a plain dynamo export was refused with the right --traced-shape. The part of
the model computing it now runs at that size to read it; OUT matches torch where the pad is zero and where not."""
from __future__ import annotations

from pathlib import Path

import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch
F = torch.nn.functional


class PaddedToFour(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        h, w = x.shape[-2:]
        y = F.pad(self.conv(x), (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4))
        return F.adaptive_avg_pool2d(y, (3, 3))


def test_a_pool_after_a_computed_pad_is_patched_and_exact(tmp_path: Path):
    m = PaddedToFour().eval()
    dims = {2: torch.export.Dim("h", min=2, max=512), 3: torch.export.Dim("w", min=2, max=512)}
    model = export_live(m, torch.randn(1, 3, 12, 16), tmp_path / "in.onnx", dims)
    out = onnxpoolfix.patch(model, traced_shapes={"x": [1, 3, 12, 16]}).model
    assert_matches_torch(out, m, [(1, 3, 12, 16), (1, 3, 13, 17), (1, 3, 30, 9), (1, 3, 5, 7)])

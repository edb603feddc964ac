"""A CRNN/EasyOCR recognizer's head exported by dynamo under symbolic H/W: features permuted to (B, W', C, H'),
AdaptiveAvgPool2d((None, 1)), squeeze(3). torch writes the pool frozen at the traced H' and declares the
Squeeze's output with the pool's rank, which its input contradicts: onnx's full check refused the file (exit 3)
though it is the frozen pool onnxpoolfix exists to repair. Declarations are taken as stale everywhere; the input
check now judges the file without them, and OUT matches torch away from the traced size."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch


class RecognizerHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, stride=(8, 4), padding=1), torch.nn.ReLU())
        self.pool = torch.nn.AdaptiveAvgPool2d((None, 1))

    def forward(self, x):
        return self.pool(self.features(x).permute(0, 3, 1, 2)).squeeze(3)


def test_a_stale_declared_shape_is_no_invalid_input(tmp_path: Path):
    m = RecognizerHead().eval()
    dims = {2: torch.export.Dim("h", min=8, max=512), 3: torch.export.Dim("w", min=8, max=2048)}
    model = export_live(m, torch.randn(1, 1, 16, 111), tmp_path / "in.onnx", dims)
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13):  # the premise (2.9 declares it right)
        with pytest.raises(onnx.shape_inference.InferenceError, match="existing shape differ"):
            onnx.checker.check_model(model, full_check=True)
    out = onnxpoolfix.patch(model, traced_shapes={"x": [1, 1, 16, 111]}).model
    assert_matches_torch(out, m, [(1, 1, 16, 111), (1, 1, 32, 64), (1, 1, 24, 200)])

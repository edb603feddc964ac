"""A CRNN/EasyOCR recognizer's head exported by dynamo under symbolic H/W: features permuted to (B, W', C, H'),
AdaptiveAvgPool2d((None, 1)), squeeze(3). torch writes the pool frozen at the traced H' and declares the
Squeeze's output with the pool's rank, which its input contradicts: onnx's full check refused the file (exit 3)
though it is the frozen pool onnxpoolfix exists to repair. Declarations are taken as stale everywhere; the input
check now judges the file without them, and OUT matches torch away from the traced size."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

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
    m, path = RecognizerHead().eval(), tmp_path / "in.onnx"
    dims = {2: torch.export.Dim("h", min=8, max=512), 3: torch.export.Dim("w", min=8, max=2048)}
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(m, (torch.randn(1, 1, 16, 111),), str(path), dynamo=True, input_names=["x"],
                          dynamic_shapes=(dims,))
    with pytest.raises(onnx.shape_inference.InferenceError, match="existing shape differ"):  # the premise
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    out = onnxpoolfix.patch(onnx.load(str(path)), traced_shapes={"x": [1, 1, 16, 111]}).model
    sess = ort.InferenceSession(out.SerializeToString())
    for shape in ((1, 1, 16, 111), (1, 1, 32, 64), (1, 1, 24, 200)):
        x = torch.randn(*shape)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], m(x).detach().numpy(), rtol=1e-5, atol=1e-6)

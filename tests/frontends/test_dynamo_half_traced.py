"""review53 F1: a float16 model's pyramid (smp PSPNet's ``F.interpolate(x, size=(b, b), mode="area")`` bins), exported by
the dynamo exporter with symbolic H/W. The differential check compared the original's values (a plain run of its cut)
with OUT's fetched by the node check's session, a graph that also outputs the tensors it checks: where float16 values
flow, onnxruntime rounds them otherwise there, up to half a float16 step (2e-4 where 1e-4 is allowed). ``--traced-shape``
with the right size, the remedy the tool itself names, was refused ("a pool was misread"), at a size where the bins
divide (frozen pools) and one where they do not (decomposed, exit 0 without the flag). OUT's cut now runs as the
original's does: exit 0, OUT against torch's float16 model at sizes other than the traced one within float16's
rounding (the tolerance is unchanged)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional

import onnx
import onnxruntime as ort
from export_cache import dynamo_export

from onnxpoolfix.cli import main


class Bin(nn.Module):
    """smp PSPNet's PSPBlock as torch exports it (its pooling written as an area interpolation)."""

    def __init__(self, size: int):
        super().__init__()
        self.pool_size = size

    def forward(self, x):
        height, width = x.shape[2:]
        x = F.interpolate(x, size=(self.pool_size, self.pool_size), mode="area")
        return F.interpolate(x, size=(height, width), mode="bilinear", align_corners=True)


class HalfPyramid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bins = nn.ModuleList([Bin(b) for b in (1, 2, 3, 6)])

    def forward(self, x):
        f = self.conv(x)
        return torch.cat([b(f) for b in self.bins] + [f], 1)


@pytest.mark.parametrize("traced", [(24, 36), (18, 26)], ids=["frozen_pools", "decomposed"])
def test_a_float16_pyramid_with_its_traced_size_is_patched(traced, tmp_path):
    g = torch.Generator().manual_seed(0)
    module = HalfPyramid().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    module = module.half()
    h, w = torch.export.Dim("h", min=1, max=64), torch.export.Dim("w", min=1, max=64)
    model = dynamo_export(module, (torch.randn(1, 3, *traced, generator=g).half(),),
                          dynamic_shapes={"x": {2: 2 * h, 3: 2 * w}}, input_names=["x"])
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", f"x:1,3,{traced[0]},{traced[1]}"])
    assert r.exit_code == 0, r.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for hw in [traced, (16, 16), (40, 24), (68, 100), (8, 12)]:
        x = torch.randn(1, 3, *hw, generator=g).half()
        with torch.no_grad():
            want = module(x).float().numpy()
        got = session.run(None, {"x": x.numpy()})[0].astype(np.float32)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max(), hw  # float16's rounding, several steps

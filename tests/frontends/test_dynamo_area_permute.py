"""``F.interpolate(x.permute(0, 3, 1, 2), size=..., mode="area")`` on channels-last features under symbolic H/W:
torch fuses the permute into its decomposition's Transpose, as for ``F.adaptive_avg_pool2d`` (review40 F1), but
an area line names no pool rank, so the fused permute was not looked for and the region read as a pool of the
NHWC tensor: refused, "its leading (not pooled) dims change", with --traced-shape too (review50). The rank is
the area line's (all axes but the first two), the fused permute is found and proven as for the adaptive call.
Real torch 2.13 dynamo exports."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional

from export_cache import dynamo_export

from onnxpoolfix import patch


class AreaOfPermute(nn.Module):
    def forward(self, x):
        return F.interpolate(x.permute(0, 3, 1, 2), size=(3, 5), mode="area")


class AreaOfPermuteOnTheLineBefore(nn.Module):
    def forward(self, x):
        x = x.permute(0, 3, 1, 2)
        return F.interpolate(x, size=(3, 5), mode="area")


TRACED = (23, 13)
SIZES = [TRACED, (17, 7), (34, 29), (2, 2), (1, 16), (47, 6)]  # odd, non-square, upsampling, an axis 1 long


@pytest.mark.parametrize("make", [AreaOfPermute, AreaOfPermuteOnTheLineBefore])
@pytest.mark.parametrize("traced", [False, True])
def test_an_area_interpolation_of_a_permute_torch_fused_is_patched_exact(make, traced):
    module = make().eval()
    torch.manual_seed(0)
    dims = {"x": {1: torch.export.Dim("H", min=2, max=1024), 2: torch.export.Dim("W", min=2, max=1024)}}
    model = dynamo_export(module, (torch.randn(1, *TRACED, 3),), dynamic_shapes=dims, input_names=["x"])
    result = patch(model, traced_shapes={"x": [1, *TRACED, 3]} if traced else None)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for hw in SIZES:
        x = rng.standard_normal((1, *hw, 3)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        (got,) = sess.run(None, {"x": x})
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5, hw

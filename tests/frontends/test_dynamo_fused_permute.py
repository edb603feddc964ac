"""A pool of a permuted tensor under symbolic H/W (review40 F1): `F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), s)`
on channels-last features, `x.transpose(2, 3)`. torch's export fuses the permute into its decomposition's own
Transpose (the pooled axes moved first to index them), so no tensor of the file is the one pooled; the region
reads `x`, and the pool is of the fused Transpose's permute. Each file is patched, with and without
--traced-shape, and exact against torch at heights and widths other than the traced ones, NaN and inf kept in
their windows. A crop after the permute (`x.permute(...)[..., :40]`) is never pooled past: refused or exact."""
from __future__ import annotations

import numpy as np
import pytest
from export_cache import dynamo_export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class ChannelsLast(nn.Module):
    """A linear layer on channels-last features, then NCHW, pooled (the pool's output stays NCHW)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.linear(x).permute(0, 3, 1, 2), (3, 4))


class Transposed(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x.transpose(2, 3), (3, 5))


class PermutedBack(nn.Module):
    """NHWC in, NHWC out: the pool's result permuted back (the region ends before that Transpose)."""

    def forward(self, x):
        return F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), (5, 2)).permute(0, 2, 3, 1)


class CroppedAfterThePermute(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2)[..., :40], (3, 5))


#: module, the input's shape at (H, W), its symbolic axes
CASES = {"channels_last": (ChannelsLast, lambda h, w: (1, h, w, 4), (1, 2)),
         "transposed": (Transposed, lambda h, w: (1, 2, h, w), (2, 3)),
         "permuted_back": (PermutedBack, lambda h, w: (1, h, w, 3), (1, 2)),
         "cropped": (CroppedAfterThePermute, lambda h, w: (1, h, w, 3), (1, 2))}
TRACED = (37, 23)
SIZES = [TRACED, (40, 30), (7, 5), (3, 4), (64, 9), (100, 51)]  # odd, non-square, below the output size


def _export(name):
    make, shape, axes = CASES[name]
    torch.manual_seed(0)
    module = make().eval()
    dims = {"x": {a: torch.export.Dim(f"d{a}", min=2, max=1024) for a in axes}}
    return module, dynamo_export(module, (torch.randn(*shape(*TRACED)),), dynamic_shapes=dims, input_names=["x"])


def _errors(module, model, shape) -> list[float]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    errors = []
    for h, w in SIZES:
        x = rng.standard_normal(shape(h, w)).astype(np.float32)
        x.reshape(-1)[1], x.reshape(-1)[-1] = np.nan, np.inf  # one window each: torch keeps them there
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        try:
            got = sess.run(None, {"x": x})[0]
        except Exception:  # noqa: BLE001 - the file as exported crashing away from the traced size
            errors.append(float("inf"))
            continue
        if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)) \
                or not np.array_equal(np.isinf(got), np.isinf(want)):
            errors.append(float("inf"))
            continue
        finite = np.isfinite(want)
        errors.append(float(np.abs(got[finite] - want[finite]).max()))
    return errors


@pytest.mark.parametrize("name", ["channels_last", "transposed", "permuted_back"])
def test_a_pool_of_a_permute_torch_fused_is_patched_exact_at_other_sizes(name):
    module, model = _export(name)
    shape = CASES[name][1]
    assert max(_errors(module, model, shape)) > 1e-3  # the file as exported: frozen at the traced size
    for traced in (None, {"x": list(shape(*TRACED))}):
        result = patch(model, traced_shapes=traced)
        assert [n.op_type for n in result.model.graph.node].count("Transpose") >= 1
        assert max(_errors(module, result.model, shape)) < 1e-5


def test_a_crop_after_the_permute_is_never_pooled_past():
    module, model = _export("cropped")
    shape = CASES["cropped"][1]
    for traced in (None, {"x": list(shape(*TRACED))}):
        try:
            out = patch(model, traced_shapes=traced).model
        except UnsupportedNodeError as err:
            assert err.exit_code == 4
        else:
            assert max(_errors(module, out, shape)) < 1e-5

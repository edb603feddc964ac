"""review40 F6: adaptive pools of a tensor cropped to a multiple of a stride (``f[:, :, : h // 4 * 4]``, a PSP head
after a stride-2 stem; ``x[..., : T // 16 * 16]`` of audio frames), traced where the bins divide, so each pool is an
AveragePool frozen at the traced size. The crop's length is Shape arithmetic of the input (Div, Mul, then a Reshape
to the Slice's ``ends``), which the size folding did not follow through the Reshape: the pooled tensor's size at
the given traced size was unknown, and the file was refused even with it. Now each pool is read as the adaptive
pool of the cropped tensor, exact at sizes where the bins do not divide. Real dynamo exports, compared with torch."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch, export_symbolic_hw, older_torch  # noqa: E402
from export_cache import dynamo_export  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.errors import UnsupportedNodeError  # noqa: E402

pytestmark = pytest.mark.torch


class PyramidAfterACrop(nn.Module):
    """A stride-2 stem, the map cropped to a multiple of 4, pooled to each bin, upsampled back and joined."""

    def __init__(self, bins):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.ppm = nn.ModuleList([nn.AdaptiveAvgPool2d(b) for b in bins])
        self.head = nn.Conv2d(4 * (1 + len(bins)), 2, 1)

    def forward(self, x):
        f = torch.relu(self.stem(x))
        h, w = f.shape[2] // 4 * 4, f.shape[3] // 4 * 4
        f = f[:, :, :h, :w]
        outs = [f] + [F.interpolate(p(f), size=(h, w), mode="bilinear", align_corners=False) for p in self.ppm]
        return self.head(torch.cat(outs, 1))


class WholeFrames(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(10)

    def forward(self, x):
        return self.pool(x[..., : x.shape[-1] // 16 * 16])


def _refused_without_the_traced_size(model):
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model)
    assert err.value.exit_code == 4 and "traced_shapes=" in err.value.hint


@pytest.mark.parametrize("bins", [(2, 3, 6), (1, 2, 3, 6)], ids=["2_3_6", "1_2_3_6"])
def test_a_pyramid_after_a_crop_is_patched_exactly_at_sizes_where_the_bins_do_not_divide(bins):
    """The map 36x24 at 72x48: 2, 3 and 6 divide both. Bin 1 is a ReduceMean of the crop, exact as written: it
    was refused too, read through the crop as a region past an op of the model's own that did not fit."""
    if older_torch(torch):
        pytest.skip("an older torch exports these otherwise (docs/dynamo-files.md)")
    m = PyramidAfterACrop(bins).eval()
    model = export_symbolic_hw(m, (72, 48), low=16, high=512)
    assert sum(n.op_type == "AveragePool" for n in model.graph.node) == 3
    _refused_without_the_traced_size(model)
    out = patch(model, traced_shapes={"x": [1, 3, 72, 48]}).model
    assert not any(n.op_type == "AveragePool" for n in out.graph.node)
    sizes = [(72, 48), (70, 50), (61, 99), (33, 47), (128, 96), (40, 40)]  # maps 32x24, 28x48, 16x24, 64x48, 20x20
    errors = errors_vs_torch(m, out, sizes, seed=1, relative=True)
    assert max(errors.values()) < 1e-5, errors


def test_a_1d_pool_of_whole_frames_is_patched_exactly_at_lengths_where_the_bins_do_not_divide():
    if older_torch(torch):
        pytest.skip("an older torch exports these otherwise (docs/dynamo-files.md)")
    m = WholeFrames().eval()
    torch.manual_seed(0)
    model = dynamo_export(m, (torch.randn(1, 4, 160),), input_names=["x"],
                          dynamic_shapes={"x": {2: torch.export.Dim("T", min=32, max=4096)}})
    assert any(n.op_type == "AveragePool" for n in model.graph.node)  # 160 -> 10: kernel 16
    _refused_without_the_traced_size(model)
    out = patch(model, traced_shapes={"x": [1, 4, 160]}).model
    assert not any(n.op_type == "AveragePool" for n in out.graph.node)
    sess = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for t in (160, 170, 175, 333, 50, 1000):  # cropped to 160, 160, 160, 320, 48, 992
        x = rng.standard_normal((1, 4, t)).astype(np.float32)
        with torch.no_grad():
            want = m(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)

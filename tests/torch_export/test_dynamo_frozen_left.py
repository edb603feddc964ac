"""Plain dynamo exports under symbolic H/W whose adaptive pool torch wrote in a form of its own (a pool of a
permute, fused into the decomposition; pools chained; a region right only where traced): never "nothing to
patch" or a partial patch with the pool left frozen at the traced size (wrong or crashing at other sizes, shown
here against torch); patched exact or refused, while onnxpoolfix.export (which keeps the pools) is exact."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
pytestmark = pytest.mark.torch


class ChannelsLast(nn.Module):
    """A pool of a permuted tensor (a linear layer on channels-last features, then NCHW)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.pool = nn.Linear(4, 3), nn.AdaptiveAvgPool2d((5, 3))

    def forward(self, x):
        return self.pool(self.linear(x).permute(0, 3, 1, 2))


def chained() -> nn.Module:
    return nn.Sequential(nn.AdaptiveAvgPool2d((9, 7)), nn.AdaptiveAvgPool2d((4, 3))).eval()


def chained_1d() -> nn.Module:
    return nn.Sequential(nn.AdaptiveAvgPool1d(9), nn.AdaptiveAvgPool1d(4)).eval()


CASES = {"channels_last": (ChannelsLast, (1, 37, 23, 4), (1, 64, 64, 4), {1: "H", 2: "W"})}


def _dims(axes):
    return ({a: torch.export.Dim(n, min=16, max=200) for a, n in axes.items()},)  # (positional: Sequential's
    # argument is named input)


@pytest.mark.parametrize("name", list(CASES))
def test_the_file_torch_writes_is_patched_exact(name, tmp_path: Path):
    make, traced, other, axes = CASES[name]
    m, path = make().eval(), tmp_path / "in.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(m, (torch.randn(*traced),), str(path), dynamo=True, input_names=["x"],
                          dynamic_shapes=_dims(axes))
    x = torch.randn(*other)  # the premise: torch's file is wrong (or crashes) away from the traced size
    try:
        got = ort.InferenceSession(str(path)).run(None, {"x": x.numpy()})[0]
        assert not np.allclose(got, m(x).detach().numpy(), atol=1e-4)
    except Exception as e:  # noqa: BLE001 - onnxruntime's out-of-bounds Gather
        assert "out of bounds" in str(e) or "invalid" in str(e).lower(), e
    # torch fused the permute into its decomposition's Transpose: read as the pool of that permute (review40 F1;
    # refused before), with the traced size and without, and exact where torch's file is not
    for traced_shapes in ({"x": list(traced)}, None):
        out = onnxpoolfix.patch(onnx.load(str(path)), traced_shapes=traced_shapes).model
        assert_matches_torch(out, m, [traced, other, tuple(d + 3 if i in axes else d for i, d in enumerate(traced))])


def test_a_chain_is_never_taken_for_one_pool_proven_where_planes_hold_one_element(tmp_path: Path):
    """Two chained 1-D pools (torch decomposes the first with windows computed from the symbolic length) were
    taken whole for one pool L -> 4, "proven" at L = 1, where every average of one element is that element:
    OUT was wrong at every length, the traced one included. Now patched exactly or refused, never wrong."""
    m, path = chained_1d(), tmp_path / "in.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(m, (torch.randn(2, 3, 37),), str(path), dynamo=True, input_names=["x"],
                          dynamic_shapes=({2: torch.export.Dim("L", min=2, max=200)},))
    try:
        out = onnxpoolfix.patch(onnx.load(str(path))).model
    except UnsupportedNodeError:
        return
    sess = ort.InferenceSession(out.SerializeToString())
    for n in (37, 8, 64, 5):
        x = torch.randn(2, 3, n)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], m(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_export_keeps_them_and_is_exact(name, tmp_path: Path):
    make, traced, other, axes = CASES[name]
    m, out = make().eval(), tmp_path / "out.onnx"
    onnxpoolfix.export(m, (torch.randn(*traced),), out, input_names=["x"], dynamic_shapes=_dims(axes))
    sess = ort.InferenceSession(str(out))
    for shape in (traced, other, tuple(d + 3 if i in axes else d for i, d in enumerate(traced))):
        x = torch.randn(*shape)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], m(x).detach().numpy(), rtol=1e-5, atol=1e-6)


class Tokens(nn.Module):
    """A projector's token pooling: tokens to a grid (channels last), permuted to NCHW, pooled."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 5))

    def forward(self, x):
        b, n, c = x.shape
        h = int(n ** 0.5)
        return self.pool(x.view(b, h, h, c).permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)


class Transposed(nn.Module):
    def forward(self, x):
        return nn.functional.adaptive_avg_pool2d(x.transpose(2, 3), (5, 3))


BATCH_ONLY = {"channels_last": (ChannelsLast, (2, 37, 23, 4)), "tokens": (Tokens, (2, 144, 8)),
              "transposed": (Transposed, (2, 3, 19, 23))}


@pytest.mark.parametrize("name", list(BATCH_ONLY))
def test_only_the_batch_symbolic_keeps_torchs_right_file(name, tmp_path: Path):
    """Only the batch symbolic: the pooled axes are fixed, so torch's decomposition (which no region models) is
    right at every batch; it was refused as frozen. Now OUT is written and equals torch at other batches."""
    make, traced = BATCH_ONLY[name]
    m = make().eval()
    model = export_live(m, torch.randn(*traced), tmp_path / "in.onnx", {0: torch.export.Dim("B", min=1, max=64)})
    assert_matches_torch(onnxpoolfix.patch(model).model, m, [(b, *traced[1:]) for b in (1, 3, 5)])


def test_a_region_right_only_where_traced_is_refused_with_the_remedy_that_works(tmp_path: Path):
    """F.interpolate(scale_factor=0.25, mode="area") at 17x13: every window has one length there, and torch's
    decomposition is a mean frozen on that branch. Refused with the traced size given; the hint no longer asks
    whether the traced size is the export's (it is, and it proves the region there) but names the export."""

    class Quarter(nn.Module):
        def forward(self, x):
            return nn.functional.interpolate(x, scale_factor=0.25, mode="area")

    dims = {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}
    model = export_live(Quarter(), torch.randn(1, 3, 17, 13), tmp_path / "in.onnx", dims)
    with pytest.raises(UnsupportedNodeError, match="frozen") as info:
        onnxpoolfix.patch(model, traced_shapes={"x": [1, 3, 17, 13]})
    assert "did not prove" not in info.value.hint and "onnxpoolfix.export" in info.value.hint, info.value.hint


def test_a_mean_of_a_pooled_tensor_is_no_region(tmp_path: Path):
    """nn.AdaptiveAvgPool2d((3, 5))(x).mean((2, 3)) under symbolic H/W: the ReduceMean of the pool's result, on
    the pool's source line, was taken for a region of its own that no input fits and refused as frozen; it holds
    no window table. The pool is patched and OUT equals torch at other sizes."""

    class PoolThenMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d((3, 5))

        def forward(self, x):
            return self.pool(x).mean((2, 3))

    m = PoolThenMean().eval()
    dims = {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}
    model = export_live(m, torch.randn(1, 3, 17, 13), tmp_path / "in.onnx", dims)
    out = onnxpoolfix.patch(model, traced_shapes={"x": [1, 3, 17, 13]}).model
    assert_matches_torch(out, m, [(1, 3, 17, 13), (1, 3, 40, 9), (1, 3, 4, 30)])


def chained_mean_branch() -> nn.Module:
    """At 18x16 both pools' windows have one length each: torch writes each as a mean of gathered windows."""
    return nn.Sequential(nn.AdaptiveAvgPool2d((3, 3)), nn.AdaptiveAvgPool2d((2, 2))).eval()


def chained_three() -> nn.Module:
    return nn.Sequential(nn.AdaptiveAvgPool2d((13, 11)), nn.AdaptiveAvgPool2d((9, 7)),
                         nn.AdaptiveAvgPool2d((4, 3))).eval()


@pytest.mark.parametrize("make, traced", [(chained, (1, 3, 37, 23)), (chained_mean_branch, (1, 3, 18, 16)),
                                          (chained_three, (1, 3, 37, 23))])
@pytest.mark.parametrize("given", [False, True])
def test_chained_pools_are_each_a_region_and_exact(make, traced, given, tmp_path: Path):
    """Pools chained under symbolic H/W: a region reaching over another pool's end was taken whole for one pool
    (two chained mean-branch pools at 18x16 went out with exit 0, wrong at every size, the traced one included),
    or refused. Each end is now a region of its own: every pool patched, OUT equals torch at other sizes."""
    m = make()
    dims = {2: torch.export.Dim("H", min=16, max=300), 3: torch.export.Dim("W", min=16, max=300)}
    model = export_live(m, torch.randn(*traced), tmp_path / "in.onnx", dims)
    out = onnxpoolfix.patch(model, traced_shapes={"x": list(traced)} if given else None).model
    assert_matches_torch(out, m, [traced, (1, 3, 41, 29), (1, 3, 80, 61), (1, 3, 17, 16)], rtol=1e-4, atol=1e-5)

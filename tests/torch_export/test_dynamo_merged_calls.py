"""Two calls torch's export merged into one node (the same windows at the traced size: a common subexpression),
both results inside the graph: the second call's output size is nowhere in the file, and OUT followed the first
call's for both, exit 0 and wrong at other sizes (review12 F15). Only a node after them still names the program
value the merge removed; the pool it is computed from is refused, and onnxpoolfix.export (each call its own
node) is exact against torch."""
from __future__ import annotations

import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = nn.functional
pytestmark = pytest.mark.torch

TRACED = (1, 3, 16, 12)
OTHERS = [(1, 3, 20, 12), (1, 3, 30, 20), (1, 3, 9, 7)]


class TwoCallsMaxed(nn.Module):
    """(None, 4) and (16, 4) at 16x12: both kernel 1x3; the two amax merge as well."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (None, 4))
        b = F.adaptive_avg_pool2d(x, (16, 4))
        return a.amax((2, 3)) + b.amax((2, 3))


class TwoCallsApart(nn.Module):
    """The merged pool read by two different ops: the second reads the first call's result."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (16, 4))
        b = F.adaptive_avg_pool2d(x, (None, 4))
        return a.mean((2, 3)) + b.amax((2, 3))


class AdaptiveThenGenuine(nn.Module):
    """An adaptive pool and a genuine AvgPool2d of its kernel at the traced size, the adaptive one first."""

    def __init__(self):
        super().__init__()
        self.genuine = nn.AvgPool2d((1, 3))

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (16, 4))
        b = self.genuine(x)
        return a.amax((2, 3)) + b.amax((2, 3))


class GenuineThenAdaptive(AdaptiveThenGenuine):
    """The genuine AvgPool2d first: the shared node carries its metadata, and the file read as holding no adaptive
    pool ("nothing to patch", OUT = IN, wrong at other sizes: review26 F2)."""

    def forward(self, x):
        b = self.genuine(x)
        a = F.adaptive_avg_pool2d(x, (16, 4))
        return a.amax((2, 3)) + b.amax((2, 3))


class TwinsBehindANoOp(nn.Module):
    """The twins' products merge too, and one of them is multiplied by 1, a no-op torch's optimizer removes: the
    kept product lost a user, but two gone names read it (one the no-op's, one the twin's): still a merge. (Both
    read by one node, ``(a * 2) * 1 + b * 2``, makes torch specialise H to 16.)"""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (16, 4))
        b = F.adaptive_avg_pool2d(x, (None, 4))
        return torch.relu((a * 2) * 1).amax((2, 3)) + torch.sigmoid(b * 2).amax((2, 3))


class TwinsBesideABareNoOp(nn.Module):
    """One call multiplied by 1 (a no-op the optimizer removes: the kept pool lost a user), the twin read beside it:
    the pool is read in place of two gone names, the no-op's (another op) and the twin's."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (16, 4))
        b = F.adaptive_avg_pool2d(x, (None, 4))
        return torch.relu(a * 1).amax((2, 3)) + torch.sigmoid(b).amax((2, 3))


MERGED = [TwoCallsMaxed, TwoCallsApart, AdaptiveThenGenuine, GenuineThenAdaptive, TwinsBehindANoOp, TwinsBesideABareNoOp]


def _dims():
    return {2: torch.export.Dim("H", min=2, max=64), 3: torch.export.Dim("W", min=2, max=64)}


@pytest.mark.parametrize("make", MERGED)
@pytest.mark.parametrize("traced_given", [False, True])
def test_a_pool_a_merge_may_stand_behind_is_refused(make, traced_given, tmp_path):
    model = export_live(make().eval(), torch.randn(*TRACED), tmp_path / "in.onnx", _dims())
    with pytest.raises(UnsupportedNodeError) as e:
        onnxpoolfix.patch(model, traced_shapes={"x": list(TRACED)} if traced_given else None)
    assert "merged" in (e.value.hint or "") and "onnxpoolfix.export" in (e.value.hint or "")


@pytest.mark.parametrize("make", MERGED)
def test_the_remedy_keeps_each_call_and_is_exact_against_torch(make, tmp_path):
    m = make().eval()
    onnxpoolfix.export(m, (torch.randn(*TRACED),), str(tmp_path / "out.onnx"), input_names=["x"],
                       dynamic_shapes=(_dims(),))
    import onnx

    assert_matches_torch(onnx.load(str(tmp_path / "out.onnx")), m, [TRACED] + OTHERS, rtol=1e-5, atol=1e-5)


def test_one_call_pooled_once_is_not_taken_for_a_merge(tmp_path):
    """The same head with one call: patched, exact at other sizes (no merge, no refusal)."""

    class One(nn.Module):
        def forward(self, x):
            y = F.adaptive_avg_pool2d(x, (16, 4))
            return y.amax((2, 3)) + y.relu().mean((2, 3))

    m = One().eval()
    model = export_live(m, torch.randn(*TRACED), tmp_path / "in.onnx", _dims())
    out = onnxpoolfix.patch(model, traced_shapes={"x": list(TRACED)}).model
    assert_matches_torch(out, m, [TRACED] + OTHERS, rtol=1e-5, atol=1e-5)


class _Heads(nn.Module):
    """One pool, its result read by two identical computations (multi-head models): torch merges those, below the
    pool; the pool is one call, patched (review26 refused these)."""

    def __init__(self, form: str):
        super().__init__()
        torch.manual_seed(0)
        self.form, self.conv, self.pool = form, nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((3, 3))
        self.f1, self.f2 = nn.Linear(36, 5), nn.Linear(36, 5)

    def forward(self, x):
        p = self.pool(self.conv(x))
        if self.form == "flatten":
            return self.f1(p.flatten(1)), self.f2(p.flatten(1))
        if self.form == "view":
            return self.f1(p.view(p.size(0), -1)), self.f2(p.view(p.size(0), -1))
        return torch.cat([p.relu(), p.relu()], 1)


@pytest.mark.parametrize("form", ["flatten", "view", "relu"])
def test_identical_computations_of_one_pools_result_merged_are_no_twin_call(form, tmp_path):
    import numpy as np
    import onnxruntime as ort

    m = _Heads(form).eval()
    model = export_live(m, torch.randn(*TRACED), tmp_path / "in.onnx", _dims())
    out = onnxpoolfix.patch(model, traced_shapes={"x": list(TRACED)}).model
    session = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [TRACED] + OTHERS:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = m(x)
        for got, w in zip(session.run(None, {"x": x.numpy()}), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-6)


class _TwinUpsamples(nn.Module):
    """UPerHead's FPN (review41 #3): a value below the pool upsampled twice to one size, once in the top-down loop
    and once for the concat; torch merges the two. Each upsample's translation reads its input twice (its Shape
    under a symbolic batch, and the Resize): counted per node, the value seemed to lose no reader, and the pool
    was refused as a merge's twin."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.pool = nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((3, 5))

    def forward(self, x):
        f = self.conv(x)
        u = self.pool(f) * 2.0
        top = f + F.interpolate(u, size=f.shape[2:], mode="bilinear", align_corners=False)
        return torch.cat([top, F.interpolate(u, size=f.shape[2:], mode="bilinear", align_corners=False)], 1)


def test_twin_upsamples_below_the_pool_under_a_symbolic_batch_are_no_twin_call(tmp_path):
    m = _TwinUpsamples().eval()
    dims = {0: torch.export.Dim("B", min=1, max=8), **_dims()}
    model = export_live(m, torch.randn(2, 3, 16, 12), tmp_path / "in.onnx", dims)
    for traced in ({"x": [2, 3, 16, 12]}, None):
        out = onnxpoolfix.patch(model, traced_shapes=traced).model
        assert_matches_torch(out, m, [(2, 3, 16, 12), (3, 3, 20, 12), (1, 3, 30, 20), (2, 3, 9, 7)],
                             rtol=1e-5, atol=1e-5)

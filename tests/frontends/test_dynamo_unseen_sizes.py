"""Frozen dynamo pools whose output size the source line does not show are refused, never read off the traced
size (review12: each of these was exit 0, and OUT the traced size's output at every size where torch's follows
the input). The torch comparison shows what a file read that way would get wrong."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import export_symbolic_hw, older_torch  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.errors import UnsupportedNodeError  # noqa: E402

pytestmark = pytest.mark.torch

TRACED = (16, 12)  # 16 -> 8 and 12 -> 4 divide: every pool below is one frozen AveragePool


class SizeInAVariable(nn.Module):
    def forward(self, x):
        s = (x.shape[2] // 2, 4)
        return F.adaptive_avg_pool2d(x, s)


class MergedByTheExport(nn.Module):
    """Two calls with the same windows at 16x12: torch writes one AveragePool (the first call's metadata) and an
    Identity without metadata for the second result."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (None, 4))
        b = F.adaptive_avg_pool2d(x, (16, 4))
        return a, b


class ops:  # noqa: N801 - a user's namespace, as `helpers.relu` in another file
    @staticmethod
    def relu(x):
        return F.adaptive_avg_pool2d(x * 2, (None, 4))


class HelperNamedLikeATorchOp(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (16, 4)), ops.relu(x)


class ModuleBuiltOnTheLine(nn.Module):
    def forward(self, x):
        return nn.AdaptiveAvgPool2d((x.shape[2] // 2, 4))(x)


class ModuleBuiltALineBefore(nn.Module):
    def forward(self, x):
        pool = nn.AdaptiveAvgPool2d((x.shape[2] // 2, 4))
        return pool(x)


class Ops:
    def relu(self, t):
        return F.adaptive_avg_pool2d(t * 2, (None, 4))


class HelperBehindAnAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.ops = Ops()

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (16, 4)), self.ops.relu(x)


class Feats:
    def __init__(self, t):
        self.t = t

    def __mul__(self, k):
        return F.adaptive_avg_pool2d(self.t * k, (None, 4))


class PoolInAnOperator(nn.Module):
    """The line shows one pooling call and made two frozen pools: the other is in ``Feats.__mul__``."""

    def forward(self, x):
        f = Feats(x)
        return F.adaptive_avg_pool2d(x, (16, 4)), f * 3


def adaptive_avg_pool2d(x, size):  # a user's stand-in named like torch's: kernels fixed for one input size
    return F.avg_pool2d(x, (2, 3))


class OwnFunctionNamedLikeTorchs(nn.Module):
    """The line reads as torch's adaptive (8, 4); the file holds the user's fixed kernel (2, 3), whose windows
    are the adaptive ones at 16x12 only (exit 0 before, OUT 8x4 where torch's is 10x4)."""

    def forward(self, x):
        return adaptive_avg_pool2d(x, (8, 4))


@pytest.mark.parametrize("module", [SizeInAVariable, MergedByTheExport, HelperNamedLikeATorchOp,
                                    ModuleBuiltOnTheLine, ModuleBuiltALineBefore, HelperBehindAnAttribute,
                                    PoolInAnOperator, OwnFunctionNamedLikeTorchs], ids=lambda m: m.__name__)
def test_a_size_the_line_does_not_show_is_refused(module):
    m = module().eval()
    at_other = torch.randn(1, 3, 20, 12)
    with torch.no_grad():
        traced_shapes = [tuple(t.shape) for t in _outputs(m(torch.randn(1, 3, *TRACED)))]
        other_shapes = [tuple(t.shape) for t in _outputs(m(at_other))]
    assert traced_shapes != other_shapes  # some output follows the input: the traced size's is wrong there
    model = export_symbolic_hw(m, TRACED)
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model, traced_shapes={"x": [1, 3, *TRACED]})
    assert err.value.exit_code == 4 and "onnxpoolfix.export" in err.value.hint


def _outputs(y):
    return y if isinstance(y, tuple) else (y,)


class DividedOnTheLine(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (3, 5)) / 2, x / 2


class Appended(nn.Module):
    def forward(self, x):
        outs = []
        outs.append(F.adaptive_avg_pool2d(x, (8, 4)))
        return outs[0]


class CroppedToTheTracedWidth(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[..., :13], (3, 5))


class ScaledByTheWidth(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x * (x.shape[3] / 13), (3, 5))


class CroppedToTheTracedHeight(nn.Module):
    """17 -> 3 takes branches no other height takes: no second size can show the crop; the region's start does."""

    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :17], (3, 5))


class MadeEven(nn.Module):
    def forward(self, x):
        x = x[:, :, :, : x.shape[3] // 2 * 2]
        return F.adaptive_avg_pool2d(x, (3, 5))


class UnderNoGrad(nn.Module):
    """torch.export wraps the forward; the trace ends in its FX code ``torch.ops.aten.adaptive_avg_pool2d.default``."""

    @torch.no_grad()
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (8, 4))


class Block(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 3)) * 2.0


class BlockTwice(nn.Module):
    """Two instances of one block run one source line: a pool each, in its own scope (review14: refused as a
    line that made two pools and shows one call)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        return torch.cat([self.a(x).flatten(1), self.b(x * 2).flatten(1)], 1)


class ReturnedTwice(nn.Module):
    """One pool returned twice: the exporter's "_alias_" Identity is no merge of two calls (review14)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((4, 3))

    def forward(self, x):
        y = self.pool(x)
        return y, y


class OneModuleTwoTensors(nn.Module):
    """The second call pools 8x9 with one-row windows (None or 8?); the first, 16x9 with two-row ones, says 8
    (review12 F10: refused)."""

    def __init__(self):
        super().__init__()
        self.p = nn.AdaptiveAvgPool2d((8, 3))

    def forward(self, x):
        return self.p(x), self.p(x[:, :, ::2])


class Enumerated(nn.Module):
    def __init__(self):
        super().__init__()
        self.bins = ((8, 3), (4, 1))

    def forward(self, x):
        return tuple([F.adaptive_avg_pool2d(x * (i + 1), b) for i, b in enumerate(self.bins)])


@pytest.mark.parametrize("module,traced", [(DividedOnTheLine, (17, 13)), (Appended, TRACED),
                                           (BlockTwice, TRACED), (ReturnedTwice, TRACED), (Enumerated, TRACED),
                                           (OneModuleTwoTensors, (16, 9)),
                                           (CroppedToTheTracedWidth, (17, 13)), (ScaledByTheWidth, (17, 13)),
                                           (CroppedToTheTracedHeight, (17, 13)), (MadeEven, (17, 12)),
                                           (UnderNoGrad, TRACED)],
                         ids=["DividedOnTheLine", "Appended", "BlockTwice", "ReturnedTwice", "Enumerated",
                              "OneModuleTwoTensors",
                              "CroppedToTheTracedWidth", "ScaledByTheWidth",
                              "CroppedToTheTracedHeight", "MadeEven", "UnderNoGrad"])
def test_ordinary_code_on_the_pools_line_is_patched_exactly(module, traced):
    """review12 F11/F13: a Div on the pool's line was taken for another pool's end, and ``outs.append(...)`` for
    a call that may hide one: both refused, where the file is patched exactly. F9: a crop or scale that is the
    identity at the traced size was taken into the region (the pool read as one of x): exit 0, OUT 0.5 off at
    other widths; the region is now also run at the nearest sizes of the traced size's branches."""
    from dynamo_exports import errors_vs_torch

    if older_torch(torch):  # measured with torch 2.9.1 (docs/dynamo-files.md): the exports themselves differ
        pytest.skip("an older torch exports these otherwise: W static (Enumerated), W >= 13 (the crops), W even "
                    "with no crop and no assert (MadeEven, a file onnxpoolfix cannot see through)")
    m = module().eval()
    out = patch(export_symbolic_hw(m, traced), traced_shapes={"x": [1, 3, *traced]}).model
    errors = errors_vs_torch(m, out, [traced, (20, 12), (9, 7), (23, 30), (17, 20), (40, 31)], seed=1)
    assert max(errors.values()) < 1e-5, errors


class CroppedAboveTheTracedWidth(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :, :40], (3, 5))


class CroppedToAMultipleOf8(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :, : x.shape[3] // 8 * 8], (3, 8))


class PaddedToAMinimumWidth(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(torch.cat([x, x[..., : max(0, 24 - x.shape[3])]], 3), (3, 5))


class CroppedByIndexSelect(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x.index_select(3, torch.arange(min(x.shape[3], 40))), (3, 5))


class RowsByAnIndexVector(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, torch.arange(min(x.shape[2], 48))], (3, 5))


class ClampedIndex(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :, torch.arange(x.shape[3]).clamp(max=40)], (3, 5))


@pytest.mark.parametrize("module,traced", [(CroppedAboveTheTracedWidth, (37, 23)), (CroppedToAMultipleOf8, (37, 24)),
                                           (PaddedToAMinimumWidth, (37, 30)), (CroppedByIndexSelect, (37, 23)),
                                           (RowsByAnIndexVector, None), (ClampedIndex, None)],
                         ids=["CroppedAboveTheTracedWidth", "CroppedToAMultipleOf8", "PaddedToAMinimumWidth",
                              "CroppedByIndexSelect", "RowsByAnIndexVector", "ClampedIndex"])
def test_a_crop_that_changes_nothing_where_the_proof_looks_is_never_pooled_past(module, traced):
    """review40 F2: the region from x (the crop taken along) proved at sizes where the crop is the identity
    (widths below 40, multiples of 8, widths of 24 and more), and exit 0 wrote a pool of the uncropped x: up to
    1.2 off elsewhere; F3: a crop by a vector of indices was read as the decomposition's own Gather, with the
    traced size too. Without the traced size the region past the crop does not prove: refused, never the pool
    of x; with it, exact at widths where the crop or pad does something."""
    from dynamo_exports import errors_vs_torch

    if older_torch(torch):
        pytest.skip("an older torch exports these otherwise (docs/dynamo-files.md)")
    m = module().eval()
    decides = traced is not None  # None: the crop's Gather leaves the pooled axis moved first, which no region
    traced = traced or (37, 23)  # past it models (a pool of a permuted tensor): refused either way
    model = export_symbolic_hw(m, traced)
    sizes = [traced, (30, 64), (20, 41), (9, 100), (37, 25), (40, 63), (37, 9), (12, 17)]
    for bound in ({}, {"x": [1, 3, *traced]}):
        try:
            out = patch(model, traced_shapes=bound or None).model
        except UnsupportedNodeError as err:
            assert err.exit_code == 4 and not (decides and bound), err
            assert "traced_shapes=" in err.hint if decides else "onnxpoolfix.export" in err.hint
        else:
            errors = errors_vs_torch(m, out, sizes, seed=1)
            assert max(errors.values()) < 1e-5, errors

"""A source line that calls a function of the user's beside an adaptive pool: the exporter records no frame
inside such a function, so the nodes it makes carry the caller's line. A helper named like a torch op
(``normalize(x)``, which the line reader took for ``F.normalize``) holding ``F.adaptive_avg_pool2d(t, (2, 3))``
beside a literal ``F.adaptive_avg_pool2d(x, (4, 6))`` was read as a second (4, 6) pool: exit 0, and OUT
gave 4x6 where torch gives 2x3, at every size (found by review). So did ``F.interpolate(..., mode=self.mode)``
with ``self.mode == "area"``. Either is now a line that may hide a pool: refused, or exact. Likewise a size
computed from names the line does not define (``h, w = x.shape[2:]`` a line before, then ``(h // 2, w // 3)``):
read as the traced size's 6x6 at every size (exit 0, torch 12x6 at 24x18), now refused. Real dynamo exports,
compared with torch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional

from dynamo_exports import assert_matches_torch, errors_vs_torch, seeded
from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.errors import PoolFixError, ShapeError


def normalize(t):
    return F.adaptive_avg_pool2d(t, (2, 3))


class NamedLikeATorchOp(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 6)), normalize(x)


class ModeInAnAttribute(nn.Module):
    mode = "area"

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 6)), F.interpolate(x, size=(2, 3), mode=self.mode)


class SizeFromALineBefore(nn.Module):
    def forward(self, x):
        h, w = x.shape[2:]
        return F.adaptive_avg_pool2d(x, (h // 2, w // 3))


@pytest.mark.parametrize("module", [NamedLikeATorchOp(), ModeInAnAttribute(), SizeFromALineBefore()],
                         ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("traced", [None, {"x": [1, 3, 24, 30]}], ids=["alone", "traced shape given"])
def test_a_pool_behind_a_call_of_the_users_is_never_read_as_the_lines_other_pool(module, traced):
    dims = {"x": {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}}
    model = dynamo_export(module.eval(), (torch.randn(1, 3, 24, 30),), dynamic_shapes=dims, input_names=["x"])
    try:
        out = patch(model, traced_shapes=traced).model
    except PoolFixError:
        return  # refused: the line reads two ways
    errs = errors_vs_torch(module, out, [(24, 30), (12, 18), (13, 17), (40, 9), (24, 18)], seed=0)
    assert max(errs.values()) < 1e-5, errs


class PoolOfAPermute(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x.permute(0, 1, 3, 2), (5, 7))


def test_a_permute_fused_into_the_decomposition_is_the_pool_of_the_permute():
    # torch's optimizer joins the permute and the decomposition's own Transpose: no tensor holds the pooled
    # input, and the region, cut back to x, computes another thing than pooling x. It was refused; it is the pool
    # of the fused Transpose's permute (review40 F1): exact at other sizes, the traced one given or not. A traced
    # size the graph contradicts is still refused (exit 4), naming an input size it is right at
    dims = {"x": {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    module = PoolOfAPermute().eval()
    model = dynamo_export(module, (torch.randn(2, 4, 29, 61),), dynamic_shapes=dims, input_names=["x"])
    for traced in ({"x": [2, 4, 29, 61]}, None):
        assert_matches_torch(patch(model, traced_shapes=traced).model, module,
                             [(2, 4, 29, 61), (2, 4, 13, 8), (2, 4, 40, 41), (2, 4, 7, 100)])
    with pytest.raises(ShapeError) as wrong:
        patch(model, traced_shapes={"x": [2, 4, 29, 60]})
    assert wrong.value.exit_code == 4 and "x:2,4," in wrong.value.hint  # (the permute's input, not the pool's)

class PoolInAMethod(nn.Module):
    """torch records the caller's line (`a = s.pool(x, (3, 5))`) and no pool on it: evidence from structure."""

    def pool(self, t, o):
        return F.adaptive_avg_pool2d(t, o)

    def forward(self, x):
        a = self.pool(x, (3, 5))
        return a.sum() + self.pool(torch.relu(x), (2, 7)).sum()


def test_a_region_right_only_at_the_given_traced_size_names_why_no_traced_size_decides_it():
    """review40 F4: a region read from structure alone, right at the given traced size and nowhere else tried, was
    refused with a hint that blamed torch's branches; one size proves no region without metadata, so the hint names
    that, and the remedy that works (onnxpoolfix.export), not another traced size."""
    dims = {"x": {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}}
    model = dynamo_export(PoolInAMethod().eval(), (torch.randn(1, 2, 9, 64),), dynamic_shapes=dims,
                          input_names=["x"])
    with pytest.raises(PoolFixError) as refused:
        patch(model, traced_shapes={"x": [1, 2, 9, 64]})
    assert refused.value.exit_code == 4
    assert "without metadata" in refused.value.hint and "onnxpoolfix.export" in refused.value.hint


class HelperHead(nn.Module):
    """A pool to 1 in a helper method, then a classifier: the Linear takes C features at every size."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 4)

    def _pool(self, t):
        return F.adaptive_avg_pool2d(t, (1, t.shape[3] // 4))

    def forward(self, x):
        return self.fc(torch.flatten(self._pool(self.conv(x)), 1))


def avgmax(t):  # timm's adaptive_avgmax_pool2d / adaptive_catavgmax_pool2d, sizes passed in
    return 0.5 * (F.adaptive_avg_pool2d(t, (1, t.shape[3] // 4)) + F.adaptive_max_pool2d(t, (1, t.shape[3] // 4)))


def catavgmax(t):
    return torch.cat((F.adaptive_avg_pool2d(t, (1, t.shape[3] // 4)), F.adaptive_max_pool2d(t, (1, t.shape[3] // 4))), 1)


class AvgMaxHead(HelperHead):
    def __init__(self, join):
        super().__init__()
        self.join = join
        self.fc = nn.Linear(16 if join is catavgmax else 8, 4)

    def _pool(self, t):
        return self.join(t)


@pytest.mark.parametrize("module", [seeded(HelperHead()), seeded(AvgMaxHead(avgmax)), seeded(AvgMaxHead(catavgmax))],
                         ids=["mean", "avgmax", "catavgmax"])
def test_a_reduce_behind_a_helper_call_that_a_classifier_reads_stays_as_written(module):
    """The Linear after the flattened result takes 8 (16) features: the pool is to 1 wherever the model runs."""
    module = module.eval()
    dims = {"x": {2: torch.export.Dim("H", min=4, max=64), 3: torch.export.Dim("W", min=6, max=7)}}
    model = dynamo_export(module, (torch.randn(1, 3, 16, 7),), dynamic_shapes=dims, input_names=["x"])
    out = patch(model).model
    assert_matches_torch(out, module, [(1, 3, 16, 7), (1, 3, 33, 6), (1, 3, 5, 7)])

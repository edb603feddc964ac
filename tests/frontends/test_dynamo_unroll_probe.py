"""A dynamo region traced at a size whose classes lie far down the per-axis search (a 19x26 map pooled to
3x3: ~15 and ~22 classes in, ~700 pairs): torch unrolled its window sums at the traced size, so the search
of the smallest classes first met only onnxruntime failures until its budget ran out, and refused the file
("none found") though --traced-shape proved it at once. The unroll probe (frontends/dynamo/probe.py,
probe_unrolled_windows) bounds the traced windows from where the region stops failing. Real torch 2.13
dynamo exports, and the probe on a model of such a region."""
from __future__ import annotations

import pytest

from onnxpoolfix.frontends.dynamo.probe import PROBE_TRIES, probe_unrolled_windows
from onnxpoolfix.frontends.dynamo.search import SizeSpace, branch_class

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch


class Pool(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(size)

    def forward(self, x):
        return self.pool(x)


@pytest.mark.parametrize("size,hw", [(3, (19, 26)), ((3, 5), (61, 79)),
                                     pytest.param((2, 3), (41, 23), marks=pytest.mark.slow),
                                     pytest.param(3, (9, 56), marks=pytest.mark.slow)])
def test_a_region_traced_at_a_large_class_is_found_without_the_traced_shape(size, hw):
    module = Pool(size)
    model = export_symbolic_hw(module, hw)
    sizes = [hw, (33, 47), (9, 13), (71, 20)]
    assert max(errors_vs_torch(module, model, sizes[1:], seed=4).values()) > 1e-3  # wrong as exported
    result = patch(model)
    errs = errors_vs_torch(module, result.model, sizes, seed=4, relative=True)
    assert all(e < 1e-5 for e in errs.values()), errs
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]


def _unrolled(traced: tuple[int, int], m: tuple[int, int]):
    """A model of torch's unrolled region traced at ``traced``: onnxruntime fails where an axis's longest
    window is below the traced one within the traced branches, or the branches differ and reach past the
    axis (a family other than the traced); it equals pooling in the traced classes only."""
    want = [branch_class(n, k) for n, k in zip(traced, m)]
    seen = []

    def run(env):
        n = (env["H"], env["W"])
        seen.append(n)
        got = [branch_class(v, k) for v, k in zip(n, m)]
        if got == want:
            return None
        if any(g[:2] == w[:2] and g[2] < w[2] for g, w in zip(got, want)):
            return "failed"
        if any(g[:2] != w[:2] and g[0] for g, w in zip(got, want)):  # a divisible size past the traced formula
            return "failed"
        return "it differs from adaptive average pooling"
    return run, seen


@pytest.mark.parametrize("traced", [(19, 26), (61, 79), (9, 56), (150, 7), (4, 200)])
def test_the_probe_reaches_the_traced_classes_within_its_tries(traced):
    space = SizeSpace.of({"p": [1, 4, "H", "W"]}, "p", [], (3, 5))
    run, seen = _unrolled(traced, (3, 5))
    probe_unrolled_windows(space, run)
    assert seen and len(seen) <= PROBE_TRIES + 1
    last = seen[-1]
    assert [branch_class(n, k) for n, k in zip(last, (3, 5))] == [branch_class(n, k) for n, k in zip(traced, (3, 5))]


def test_the_probe_stops_where_every_size_fails():
    space = SizeSpace.of({"p": [1, 4, "H", "W"]}, "p", [], (3, 5))
    seen = []
    probe_unrolled_windows(space, lambda env: seen.append(env) or "failed")
    assert 0 < len(seen) <= 20  # one try per family pair's largest sizes, then it gives up

"""Max with one non-uniform axis: ONE MaxPool over the input on a regular grid inside the windows, plus
the few elements the grid misses.

Adaptive windows overlap by at most one element, so a grid of kernel k and stride s (ceil_mode for a
partial last window) often fits inside every window, leaving an element or two per window outside it:
64 -> 5 (windows [0,13) [12,26) [25,39) [38,52) [51,64)) is the grid k13 s13 ([0,13) [13,26) ... [52,64))
plus rows 12, 25, 38, 51. So ``y = Max(MaxPool(x), pool(Gather(x, missed)))``: the MaxPool takes every
pooled axis at once (the uniform ones with their own kernel and stride), the Gather only the missed rows,
pooled the same way on the other axes. Exact: max is separable and every window is the union of its grid
window and its missed elements (short rows of the missed table repeat an element of their own window).

Why: on 8x256x64x64 -> 5x7 (32 MB) the per-axis form (MaxPool k1x10 s1x9 over the input, then a window
Gather + ReduceMax along H on its 3.7 MB output, with onnxruntime's NCHWc reorder of that output) spends a
fifth to a third of its time after the MaxPool; this form's MaxPool writes 35 values per plane and the rest
runs on 2.6 MB. A/B in one process: 0.62-0.67x the per-axis form without the NaN guard, 0.83-0.89x with it
(the guard's ReduceSum and the NCHWc reorder of the input, ~2x a ReduceSum by itself, are common to both).
Since the one-axis pool runs over single-channel planes out of cache (:mod:`.plane_pool`: a 1D MaxPool over
rows, no NCHWc reorder), the per-axis window_gather is faster there for onnxruntime (1.3-1.6x); this form
stays the choice where the pool keeps its layout (TensorRT) and on inputs the planes form does not take.
NaN and -inf: the base class' If-guarded wrapper, as for every max lowering.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .. import windows as W
from . import cost as C
from .base import Lowering, axis_windows
from .max_steps import WindowGatherStep
from .pool import pool_op_reason
from .steps import OneAxisStep, PoolStep, gather_cost, numel, reshape_keep

MAX_MISSED = 2  # at most this many missed elements per window (beyond it the Gather is no longer small)


@dataclass(frozen=True)
class Cover:
    """A grid inside the windows of ``n -> m``: kernel, stride, and the ``[m, e]`` table of missed indices."""

    kernel: int
    stride: int
    missed: tuple[tuple[int, ...], ...]  # per window, >= 1 entry (an element of the window when none is missed)


def _cover(n: int, m: int, k: int, s: int) -> Cover | None:
    if k > n or (m - 1) * s >= n or -(-(n - k) // s) + 1 != m:  # ceil_mode output count; last start inside
        return None
    missed = []
    for i, (start, end) in enumerate(W.windows(n, m)):
        lo, hi = i * s, min(i * s + k, n)
        if lo < start or hi > end:
            return None
        rows = tuple(range(start, lo)) + tuple(range(hi, end))
        missed.append(rows)
    if not any(missed) or max(map(len, missed)) > MAX_MISSED:
        return None
    width = max(map(len, missed))
    return Cover(k, s, tuple(r + (r[-1] if r else W.window_start(i, n, m),) * (width - len(r))
                             for i, r in enumerate(missed)))


def cover(n: int, m: int) -> Cover | None:
    """The grid with the fewest missed elements (then the largest kernel), or None. Strides near n/m only:
    any other stride drifts out of the windows. ``cover(64, 5)``: k13 s13, missed (0,) (12,) (25,) (38,) (51,)
    (window 0 misses nothing and repeats its first row)."""
    found = [c for s in range(max(1, n // m - 1), n // m + 2) for k in range(1, W.max_window(n, m) + 1)
             if (c := _cover(n, m, k, s)) is not None]
    return min(found, key=lambda c: (sum(map(len, c.missed)), -c.kernel), default=None)


@dataclass(frozen=True)
class CoverMaxStep(OneAxisStep):
    """``Max(MaxPool(x), pooled missed rows)`` along ``axis`` (module docstring); ``others``: the uniform axes
    pooled in the same MaxPool (absolute axis, kernel/stride)."""

    first_spatial: int
    others: tuple[tuple[int, W.Uniform], ...]

    def _pool(self, shape, grid: bool):
        """kernel, strides of the MaxPool over ``shape``'s spatial axes (``grid``: ``axis`` on the grid)."""
        c = cover(self.n, self.m)
        windows = self.others + (((self.axis, W.Uniform(c.kernel, c.stride)),) if grid else ())
        return PoolStep("MaxPool", self.first_spatial, windows).kernel_strides(shape)

    def out_shape(self, shape):
        out = list(super().out_shape(shape))
        for a, u in self.others:
            out[a] = (shape[a] - u.kernel) // u.stride + 1
        return tuple(out)

    def cost(self, shape, itemsize):
        """The MaxPool as :class:`~.steps.PoolStep` prices it, plus the Gather of the missed rows, their
        MaxPool on the other axes (cache-resident: no out-of-cache charge) and the Max."""
        width = len(cover(self.n, self.m).missed[0])
        out = numel(self.out_shape(shape))
        k, _ = self._pool(shape, True)
        big = numel(shape) * C.POOL_OUT_OF_CACHE if numel(shape) * itemsize > C.CACHE_BYTES else 0.0
        pool = C.NODE + out * prod(k) / C.POOL_RATE + big + (numel(shape) + out) * itemsize / C.BANDWIDTH
        rows = list(shape)
        rows[self.axis] = self.m * width
        kr, _ = self._pool(rows, False)
        missed = (C.NODE * (2 + 2 * (width > 1)) + gather_cost(tuple(rows), self.axis)
                  + numel(rows) * prod(kr) / C.POOL_RATE + (width + 2) * out * itemsize / C.BANDWIDTH)
        return pool + missed

    def emit(self, em, x, shape, elem):
        c = cover(self.n, self.m)
        k, s = self._pool(shape, True)
        grid = em.op("MaxPool", [x], kernel_shape=k, strides=s, ceil_mode=1)
        width = len(c.missed[0])
        rows = em.op("Gather", [x, em.ints("missed_rows", [r for row in c.missed for r in row])], axis=self.axis)
        if self.others:
            kr, sr = self._pool(shape, False)
            rows = em.op("MaxPool", [rows], kernel_shape=kr, strides=sr)
        if width > 1:
            later = [int(d) for d in self.out_shape(shape)[self.axis + 1:]]
            rows = reshape_keep(em, rows, self.axis, [self.m, width] + later)
            rows = em.reduce("ReduceMax", rows, [self.axis + 1], keepdims=0)
        return em.op("Max", [grid, rows])

    ops = ("MaxPool", "Gather", "Reshape", "ReduceMax", "Max")


class CoverMaxLowering(Lowering):
    name = "pool_cover"
    summary = ("max, one non-uniform axis on a grid inside its windows: one MaxPool (ceil_mode) over every "
               "pooled axis + a Gather of the few elements the grid misses")
    kinds = frozenset({"max"})
    min_opset = 10  # ceil_mode

    def _check(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        if any(a.upsample for a in axes):
            return "an axis is upsampled"
        general = [a for a in axes if a.general]
        if not general:
            return "no axis has non-uniform windows (that is plain 'pool')"
        if all(cover(a.n, a.m) is None for a in general):
            return (f"no grid fits inside the windows of {', '.join(a.describe() for a in general)} with at most "
                    f"{MAX_MISSED} missed elements per window")
        return pool_op_reason(spec)

    def _steps(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        general = [a for a in axes if a.general]
        covered = next(a for a in general if cover(a.n, a.m) is not None)
        others = tuple((a.axis, a.uniform) for a in axes if a.uniform)
        first = CoverMaxStep(covered.axis, covered.n, covered.m, spec.ndim - spec.k, others)
        return [first] + [WindowGatherStep(a.axis, a.n, a.m) for a in general if a is not covered]

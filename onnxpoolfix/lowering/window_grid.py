"""Static max pooling's windows over consecutive pooled axes, joined by one Concat (the portable target's
``window_slices`` lowering where its windows are ReduceMaxes, not MaxPool runs: below opset 18, and float64 or
a 3-D pool not cut into planes at any opset; issue 33).

onnxruntime's ``quantize_static`` (QDQ) gives each input of a Concat its own calibrated range and the Concat's
output another, so every join rounds the pooled values once more. Cut axis by axis (:class:`~.window_slices.
WindowSlicesStep`), a 2-D pool joins twice and a 3-D one three times. Here the windows of the first axis are cut
and reduced, each of those cut along the next axis and reduced, and so on (one axis at a time: pnnx converts no
reduction over two axes, and each large copy is of a whole slab), and all the windows are joined once along the
last axis and reshaped to the output (a Reshape shares its input's range). quantize_static's error on the static
max fixtures, axis by axis -> joined once: max2d 1.21e-2 -> 8.3e-3, max3d 1.05e-2 -> 9.1e-3, max2d_uniform 1.45e-2 ->
8.3e-3, aten_attr_max2d 8.5e-3 -> 9.0e-3 (the input's own rounding alone: 4.3e-3 to 6.6e-3), against issue 33's bar
of 1e-2 (docs/targets.md, "Max pooling"). At most :data:`MAX_GRID` windows in all.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import windows as W
from . import cost as C
from .base import specialized
from .steps import Step, chain_shape, emit_chain, numel, run_cost

#: the most windows (the product over the pooled axes) joined by one Concat; more are cut axis by axis
MAX_GRID = 64


@dataclass(frozen=True)
class WindowGridStep(Step):
    """Consecutive static axes ``axes`` pooled ``n[j] -> m[j]``: a Slice per output window, reduced with
    ``op_type`` along each axis (keepdims), one Concat along the last axis, a Reshape to the output.
    ``plane_stages``: in a 3-D pool's planes (:mod:`.separable`), the same pooling axis by axis
    (:class:`~.window_slices.WindowSlicesStep`), whose mean twins average the max's NaN carrier there in runs of
    AveragePools, the pooling op pnnx drops the batch at (ncnn; the carrier's values are 0 and NaN, which no
    rounding moves). Elsewhere the carrier takes this form too: onnx2tf keeps a 4-D Reshape's output
    channels-first, so the max and its carrier must be reshaped alike before they meet."""

    axes: tuple[int, ...]
    n: tuple[int, ...]
    m: tuple[int, ...]
    op_type: str = "ReduceMax"  # | ReduceMean (the max's NaN carrier)
    plane_stages: tuple[Step, ...] = ()

    def out_shape(self, shape):
        out = list(shape)
        for a, m in zip(self.axes, self.m):
            out[a] = m
        return tuple(out)

    def mean_twin(self):
        if self.op_type != "ReduceMax":
            return None
        if not self.plane_stages:
            return replace(self, op_type="ReduceMean")
        twins = tuple(s.mean_twin() for s in self.plane_stages)
        return None if None in twins else StepChain(twins)

    def at(self, shape, itemsize, opset):
        return replace(self, plane_stages=tuple(specialized(self.plane_stages, shape, itemsize, opset)))

    def cost(self, shape, itemsize):
        total, dims, count = 2 * C.NODE, list(shape), 1
        for a, n, m in zip(self.axes, self.n, self.m):  # per axis: each piece's m Slices and reductions
            covered = sum(e - s for s, e in W.windows(n, m))
            dims[a] = covered
            total += count * m * 2 * C.NODE + 3 * count * numel(tuple(dims)) * itemsize / C.BANDWIDTH
            count, dims[a] = count * m, 1
        return total + numel(self.out_shape(shape)) * C.REDUCE_OUT

    def emit(self, em, x, shape, elem):
        # the windows of the first axis cut and reduced first, each of those cut along the next axis, and so on: the
        # large copies are of whole slabs (a box of the full tensor copies rows a few elements long, 2x the time)
        pieces = [x]
        for a, n, m in zip(self.axes, self.n, self.m):
            axis = em.ints("axes", [a])
            bounds = [(em.ints("window_start", [s]), em.ints("window_end", [e])) for s, e in W.windows(n, m)]
            pieces = [em.reduce(self.op_type, em.op("Slice", [p, s, e, axis], hint="window"), [a], keepdims=1)
                      for p in pieces for s, e in bounds]
        joined = em.op("Concat", pieces, axis=self.axes[-1])
        # the leading dims written as the numbers they are where static (pnnx carries the batch across a Reshape
        # that holds its 1: lowering/separable.py), else copied (0)
        out = [d if isinstance(d, int) else 0 for d in self.out_shape(shape)]
        return em.op("Reshape", [joined, em.ints("shape", out)])

    @property
    def ops(self):
        return ("Slice", self.op_type, "Concat", "Reshape")


@dataclass(frozen=True)
class StepChain(Step):
    """``steps`` one after the other, as one step."""

    steps: tuple[Step, ...]

    def out_shape(self, shape):
        return chain_shape(self.steps, shape)

    def cost(self, shape, itemsize):
        return run_cost(self.steps, shape, itemsize)

    def emit(self, em, x, shape, elem):
        return emit_chain(em, self.steps, x, shape, elem)

    @property
    def ops(self):
        return tuple(dict.fromkeys(op for s in self.steps for op in s.ops))

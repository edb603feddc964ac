"""The portable target's windows as Slices: each output window a Slice of the input, reduced.

Symbolic pooled sizes (the bounds computed at run time) and static ones (constant bounds; ncnn has no Gather
layer, so the portable target's averages take this form over the window sums wherever it applies).

For one axis pooled ``n -> m`` (``m`` the node's constant, ``n`` read at run time as ``Gather(Shape(x),
axis)``), window ``i`` is ``[start_i, end_i)`` with (int64, exact)::

    start_i = (i * n) div m            end_i = ((i + 1) * n + m - 1) div m

computed for every ``i`` at once (two constant vectors, Mul/Add/Div), split into ``m`` one-element bounds,
and each window is one ``Slice`` reduced by ReduceMean (average) or ReduceMax (max, with the base class'
NaN / -inf wrapper), keepdims; one Concat puts the ``m`` windows back in order. Axes are pooled one after
the other, the smaller output first read by the next.

What the default target's runtime windows (:mod:`.dynamic`) use and the runtimes of docs/targets.md refuse
is absent: no Range, no runtime pooling matrix or window table, no Reshape to a computed length, no Shape
with ``start``/``end``, no If. No weights (int8 quantization and fp16 storage leave it exact), no
multiplication of the data (a NaN or inf reaches only its windows). Measured: tract (symbolic input facts)
and OpenVINO take it; TVM 0.27's ONNX frontend refuses the Gather of ``Shape`` (docs/targets.md). The price
is ``2 m`` nodes per axis and a copy of each window: at most :data:`MAX_WINDOWS` windows per axis.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from .. import windows as W
from ..spec import RuntimeDim
from . import cost as C
from .base import Lowering, axis_windows, compute_dtype
from .runtime_windows import guess_len
from .steps import OneAxisStep, ReduceStep, Step, numel

#: the most windows one axis may be cut into (each is a Slice and a Reduce node)
MAX_WINDOWS = 64


@dataclass(frozen=True)
class WindowSlicesStep(OneAxisStep):
    """One axis pooled ``n -> m`` (``n`` an int, or None where it is read at run time): ``m`` Slices, each
    reduced with ``op_type`` (keepdims), concatenated along the axis."""

    axis: int
    n: int | None
    m: int
    op_type: str  # ReduceMean | ReduceMax
    #: each window an AveragePool over its slice (kernel = its length) instead of a ReduceMean: see pool_windows()
    pool_windows: bool = False

    def cost(self, shape, itemsize):
        dims = list(shape)
        dims[self.axis] = guess_len(dims[self.axis])
        copied = numel(tuple(dims)) + numel(self.out_shape(shape))  # every window copied (overlaps aside)
        return (2 * self.m + 8) * C.NODE + 3 * copied * itemsize / C.BANDWIDTH

    def bounds(self, em, x) -> tuple[list[str], list[str]]:
        """The ``m`` windows' one-element start and end tensors (int64 ``[1]``)."""
        i = np.arange(self.m, dtype=np.int64)
        if self.n is not None:  # a static axis: constants
            starts = (i * self.n) // self.m
            ends = ((i + 1) * self.n + self.m - 1) // self.m
            return ([em.ints("window_start", [s]) for s in starts], [em.ints("window_end", [e]) for e in ends])
        n = em.op("Gather", [em.op("Shape", [x]), em.ints("axis", [self.axis])], axis=0, hint="length")  # [1]
        m = em.ints("m", [self.m])
        start = em.op("Div", [em.op("Mul", [n, em.const("i", i)]), m], hint="window_starts")
        last = em.op("Add", [em.op("Mul", [n, em.const("i_plus_1", i + 1)]), em.ints("m_minus_1", [self.m - 1])])
        end = em.op("Div", [last, m], hint="window_ends")
        if self.m == 1:
            return [start], [end]
        return split_ones(em, start, self.m, "window_start"), split_ones(em, end, self.m, "window_end")

    def emit(self, em, x, shape, elem):
        starts, ends = self.bounds(em, x)
        axes = em.ints("axes", [self.axis])
        windows = [em.op("Slice", [x, s, e, axes], hint="window") for s, e in zip(starts, ends)]
        if self.pool_windows:
            lengths = [e - s for s, e in W.windows(self.n, self.m)]
            kernels = [[L if a == self.axis else 1 for a in range(2, len(shape))] for L in lengths]
            pooled = [em.op("AveragePool", [w], kernel_shape=k) for w, k in zip(windows, kernels)]
        else:
            pooled = [em.reduce(self.op_type, w, [self.axis], keepdims=1) for w in windows]
        return pooled[0] if self.m == 1 else em.op("Concat", pooled, axis=self.axis)

    @property
    def ops(self):
        bounds = ("Shape", "Gather", "Mul", "Add", "Div", "Split") if self.n is None else ()
        return bounds + ("Slice", "AveragePool" if self.pool_windows else self.op_type, "Concat")


def split_ones(em, v: str, m: int, hint: str) -> list[str]:
    """``v`` (1-D, length ``m``) as ``m`` one-element tensors: one Split (the sizes an input from opset 13,
    an attribute before; opset 18 reads them from the input as well)."""
    if em.opset >= 13:
        em.op("Split", [v, em.ints("split", [1] * m)], axis=0, n_out=m, hint=hint)
    else:
        em.op("Split", [v], axis=0, split=[1] * m, n_out=m, hint=hint)
    return list(em.nodes[-1].output)


def pool_windows(spec, axis: int, n) -> bool:
    """Whether a static average axis' windows are AveragePools over their slices rather than ReduceMeans: from
    opset 18, pnnx (20261020) drops the axes of a Reduce whose axes are an input (opset 18's only form) when it
    writes ncnn's Reduction, which then averages the wrong dims (measured); AveragePool converts to ncnn's
    Pooling. Over a pooling op's spatial dims of a 1-D or 2-D pool only (no 3-D pooling op: MNN, TFLite)."""
    return (spec.kind == "avg" and isinstance(n, int) and spec.opset >= 18 and spec.ndim in (3, 4) and axis >= 2
            and compute_dtype(spec) != TensorProto.DOUBLE)  # (onnxruntime has no float64 AveragePool)


def slices_fit(spec) -> bool:
    """Every changed axis of ``spec`` is cut into at most :data:`MAX_WINDOWS` windows, from opset 10 (Slice's
    bounds as inputs): window_slices applies, and the portable target prefers it to Gathers (ncnn has none)."""
    return spec.opset >= 10 and all(a.keep or a.m <= MAX_WINDOWS for a in axis_windows(spec))


class WindowSlicesLowering(Lowering):
    name = "window_slices"
    summary = "per pooled axis: a Slice per window (bounds constant, or from Shape), ReduceMean/ReduceMax, Concat"
    dynamic = True
    min_opset = 10  # Slice with tensor starts/ends
    targets = frozenset({"portable"})
    other_targets_reason = ("for --target portable (no Range or runtime matrices); the dynamic lowering runs "
                            "faster in onnxruntime")

    def _check(self, spec):
        for a, size in zip(axis_windows(spec), spec.node.output_size):
            if isinstance(size, RuntimeDim):
                return (f"the output size of axis {a.axis} is computed from the input's size at run time; the "
                        f"portable target needs a constant one")
            if not a.keep and a.m > MAX_WINDOWS:
                return f"axis {a.axis} has {a.m} windows (at most {MAX_WINDOWS} are cut as Slices)"
        return None

    def _steps(self, spec):
        op = "ReduceMean" if spec.kind == "avg" else "ReduceMax"
        changed = [a for a in axis_windows(spec) if not a.keep]
        steps: list[Step] = []
        whole = tuple(a.axis for a in changed if a.m == 1)
        if whole:
            steps.append(ReduceStep(op, whole))
        # the axis whose output is smallest relative to its input first: later axes slice less
        rest = sorted((a for a in changed if a.m != 1), key=lambda a: a.m / guess_len(a.n))
        steps += [WindowSlicesStep(a.axis, a.n if isinstance(a.n, int) else None, a.m, op,
                                   pool_windows(spec, a.axis, a.n)) for a in rest]
        return steps

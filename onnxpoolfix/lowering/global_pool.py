"""Every output size is 1: one window spanning each pooled axis.

ReduceMean/ReduceMax over the pooled axes (keepdims) rather than GlobalAveragePool: measured faster in
onnxruntime, valid for any input rank (unbatched too), and with float64 kernels. The portable target's take a
pooling op where pnnx gets the Reduce wrong for ncnn (:func:`~.base.reduce_whole`), its static batched 3-D pools
two 2-D ones (:mod:`.separable`): ncnn fails to load a 5-D ReduceMean (review87; docs/targets.md).
"""
from __future__ import annotations

from .base import Lowering, axis_windows, reduce_whole
from .window_slices import separable, separable_step


class GlobalLowering(Lowering):
    name = "global"
    summary = "ReduceMean/ReduceMax over the pooled axes: every output size is 1"
    dynamic = True  # a symbolic axis pooled to 1 or following the input needs no window arithmetic (no Range)
    refuses_copies = True

    def _check(self, spec):
        if not spec.static and any(not a.keep and spec.node.output_size[a.axis - (spec.ndim - spec.k)] != 1
                                   for a in axis_windows(spec)):
            return "a symbolic pooled axis has an output size other than 1 or the input's own"
        bad = [a.describe() for a in axis_windows(spec) if a.m != 1 and not a.keep]
        return f"axis {bad[0]} has output size > 1" if bad else None

    def _steps(self, spec):
        if separable(spec):
            return [separable_step(spec, "ReduceMean" if spec.kind == "avg" else "ReduceMax")]
        axes = tuple(a.axis for a in axis_windows(spec) if not a.keep)
        return reduce_whole(spec, axes)

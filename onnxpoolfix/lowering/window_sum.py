"""Averages on any windows as window sums (Pad + Gather + ReduceSum) divided by the window lengths: no weights,
and a NaN or inf reaches only its own windows (:class:`~.sum_steps.WindowSumStep`). onnxruntime runs the MatMul
lowerings faster (benchmarks/RESULTS.md), so the default target keeps those from opset 9.
"""
from __future__ import annotations

from .avg_non_finite import GUARD_MIN_OPSET
from .base import Lowering, axis_windows, compute_dtype, itemsize
from .matmul import cheapest_order
from .steps import run_cost
from .sum_steps import FlatWindowSumStep, WindowSumStep
from .window_slices import MAX_WINDOWS, slices_fit


class WindowSumLowering(Lowering):
    name = "window_sum"
    summary = "per changed axis: Gather of the window table, ReduceSum, Div by the window lengths"
    kinds = frozenset({"avg"})
    targets = frozenset({"portable", "onnxruntime", "tensorrt"})  # listed: see WindowSlicesLowering.targets

    def _check(self, spec):
        if spec.target == "onnxruntime" and spec.opset >= GUARD_MIN_OPSET:
            return ("MatMul runs faster in onnxruntime, its guard keeping NaN and inf in their windows (below opset "
                    f"{GUARD_MIN_OPSET}, without the guard, the window sums do)")
        if all(a.keep for a in axis_windows(spec)):
            return "nothing to pool (every size is kept)"
        if slices_fit(spec):
            return (f"window_slices applies (at most {MAX_WINDOWS} windows per axis): its Slices convert for ncnn, "
                    f"which has no Gather layer")
        return None

    def _steps(self, spec):
        """Per axis (large planes) or all pooled axes in one Gather (small ones), whichever costs less."""
        changed = [a for a in axis_windows(spec) if not a.keep]
        separable = cheapest_order(spec, lambda a: [WindowSumStep(a.axis, a.n, a.m)], changed)
        if len(changed) < 2 or any(not isinstance(d, int) for d in spec.input_shape[spec.ndim - spec.k:]):
            return separable
        flat = [FlatWindowSumStep(spec.ndim - spec.k, spec.in_sizes, spec.out_sizes)]
        size = itemsize(compute_dtype(spec))
        return min((flat, separable), key=lambda s: run_cost(s, spec.input_shape, size))

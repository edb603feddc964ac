"""Uniform windows on every changed axis: one AveragePool/MaxPool with kernel k and stride s.

Exact iff every window has length k AND window i starts at i*s (divisibility is not the test: 7->3 is
k3 s2, 10->4 has equal lengths but uneven starts and is not uniform). See windows.uniform_windows.
"""
from __future__ import annotations

from onnx import TensorProto

from .base import Lowering, axis_windows, compute_dtype, itemsize, no_float64_kernel
from .plane_pool import planes_form
from .steps import PoolStep, Step


def pool_op_reason(spec) -> str | None:
    """Why no AveragePool/MaxPool can pool ``spec``'s axes, or None."""
    if spec.ndim != spec.k + 2:
        return f"input rank {spec.ndim} is not N, C + {spec.k} spatial axes (pooling ops need that layout)"
    if spec.k >= 3 and (spec.target == "portable" or (spec.target == "tensorrt" and spec.kind == "avg")):
        return (f"not for the {spec.target} target's averages: a 3-D pooling op (MNN crashes on 3-D AveragePool, "
                f"TFLite needs TensorFlow's Flex ops; the window Slices pool 3-D as two 2-D pools)")
    if spec.kind == "max" and compute_dtype(spec) == TensorProto.DOUBLE and no_float64_kernel(["MaxPool"], spec.opset):
        return f"onnxruntime has no float64 kernel for MaxPool at opset {spec.opset}"
    return None


class PoolLowering(Lowering):
    name = "pool"
    summary = "one AveragePool/MaxPool: every changed axis has uniform windows"
    refuses_copies = True

    def _check(self, spec):
        axes = axis_windows(spec)
        bad = [a for a in axes if not a.keep and a.uniform is None]
        if bad:
            return f"axis {bad[0].describe()} has no single kernel/stride"
        if (spec.target == "portable" and spec.kind == "max" and spec.opset < 18
                and all(a.keep or a.m == 1 for a in axes)):
            return ("every pooled axis goes to 1: that is 'global', a ReduceMax per axis (MNN's MaxPool starts its "
                    "max at -2^24)")
        return pool_op_reason(spec)

    def _steps(self, spec):
        wins = tuple((a.axis, a.uniform) for a in axis_windows(spec) if not a.keep)
        op = "AveragePool" if spec.kind == "avg" else "MaxPool"
        return [for_target(spec, PoolStep(op, spec.ndim - spec.k, wins))]


def for_target(spec, step: PoolStep) -> Step:
    """``step`` on the node's input as it runs fastest on the target: for onnxruntime, a one-axis kernel over
    a large input pools the planes (:mod:`.plane_pool`)."""
    if spec.target != "onnxruntime":
        return step
    return planes_form(step, spec.input_shape, itemsize(compute_dtype(spec)))

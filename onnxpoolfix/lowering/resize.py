"""Integer upsampling on every changed axis (m = q*n): each window is the single element x[i // q].

That is Resize nearest with coordinate_transformation_mode=asymmetric and nearest_mode=floor. Where
onnxruntime has no Resize kernel for the dtype (float64), a Gather of i // q does the same copy.
"""
from __future__ import annotations

from onnx import TensorProto

from .base import Lowering, axis_windows, compute_dtype
from .steps import GatherStep, ResizeStep


class ResizeLowering(Lowering):
    name = "resize"
    summary = "Resize nearest (asymmetric, floor): every changed axis is an integer upsample"
    min_opset = 11  # coordinate_transformation_mode / nearest_mode

    def _check(self, spec):
        axes = axis_windows(spec)
        if all(a.keep for a in axes):
            return "nothing to resize (every size is kept)"
        bad = [a for a in axes if not a.keep and a.upsample is None]
        return f"axis {bad[0].describe()} is not an integer upsample" if bad else None

    def steps(self, spec):  # a copy: no float32 detour needed
        return list(self._steps(spec))

    def _steps(self, spec):
        factors = tuple((a.axis, a.upsample) for a in axis_windows(spec) if not a.keep)
        if compute_dtype(spec) == TensorProto.DOUBLE or spec.dtype == TensorProto.BFLOAT16:
            return [GatherStep(a, tuple(i // q for i in range(n * q)), "upsample")
                    for (a, q), n in zip(factors, [spec.input_shape[a] for a, _ in factors])]
        return [ResizeStep(factors)]

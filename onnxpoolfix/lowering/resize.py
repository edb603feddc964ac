"""Integer upsampling on every changed axis (m = q*n): each window is the single element x[i // q].

That is Resize nearest with coordinate_transformation_mode=asymmetric and nearest_mode=floor. Where
onnxruntime has no Resize kernel for the dtype (float64), a Gather of i // q does the same copy. The portable
target's static batched 3-D pools resize as two 4-D Resizes (:mod:`.separable`): pnnx converts a 5-D Resize
without its scales, and ncnn returns the input's size with no error (measured, review81).
"""
from __future__ import annotations

from onnx import TensorProto

from .base import Lowering, axis_windows, compute_dtype
from .separable import SeparableStep
from .steps import GatherStep, ResizeStep
from .window_slices import separable


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
            return [GatherStep(a, tuple(i // q for i in range(spec.input_shape[a] * q))) for a, q in factors]
        if separable(spec):
            f = dict(factors)
            plane = tuple((a, f[d]) for a, d in ((2, 3), (3, 4)) if d in f)
            return [SeparableStep((ResizeStep(plane),) if plane else (),
                                  (ResizeStep(((2, f[2]),)),) if 2 in f else ())]
        return [ResizeStep(factors)]

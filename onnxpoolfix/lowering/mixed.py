"""Per-axis choice: each pooled axis gets the cheapest exact op for ITS windows.

Uniform axes share one AveragePool/MaxPool (kernel 1 on the others; axes pooled to 1 may take a
ReduceMean/ReduceMax instead, where the cost model says so), non-uniform axes get a MatMul
(average) or the MaxPool+Gather/window-Gather construction (max), integer-upsampled axes one Resize last.
Shrinking steps go first so later steps touch less data. This is how "H uniform, W not" is handled.
"""
from __future__ import annotations

from onnx import TensorProto

from .avg_non_finite import WEIGHTLESS
from .base import Lowering, axis_windows, compute_dtype, itemsize, reduce_whole
from .matmul import cheapest_order
from .max_steps import MaxPoolGatherStep, WindowGatherStep
from .pool import for_target, pool_op_reason
from .resize import ResizeLowering
from .steps import (
    GatherStep,
    MatMulStep,
    PoolStep,
    ResizeStep,
    run_cost,
)
from .sum_steps import WindowSumStep
from .window_slices import WindowSlicesStep, pool_windows, separable, slices_fit


class _PerAxis(Lowering):
    general_method: str  # "matmul" | "pool_gather" | "window_gather"
    refuses_copies = True

    def _general_steps(self, spec, a):
        if self.general_method == "matmul" and spec.target in WEIGHTLESS:  # no weights; NaN kept in place
            if slices_fit(spec):  # Slices over Gathers: ncnn has no Gather layer
                return [WindowSlicesStep(a.axis, a.n, a.m, "ReduceMean", pool_windows(spec, a.axis, a.n))]
            return [WindowSumStep(a.axis, a.n, a.m)]
        if self.general_method == "matmul":
            return [MatMulStep(a.axis, a.n, a.m)]
        if self.general_method == "pool_gather":
            return [MaxPoolGatherStep(a.axis, a.n, a.m, spec.ndim - spec.k)]
        return [WindowGatherStep(a.axis, a.n, a.m)]

    def _steps(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        pools_ok = pool_op_reason(spec) is None
        uniform = [a for a in axes if a.uniform and pools_ok and a.m < a.n]
        upsample = [a for a in axes if a.upsample]
        general = [a for a in axes if a not in uniform and a not in upsample]
        steps = []
        if uniform:
            op = "AveragePool" if spec.kind == "avg" else "MaxPool"
            first = spec.ndim - spec.k
            options = [[for_target(spec, PoolStep(op, first, tuple((a.axis, a.uniform) for a in uniform)))]]
            to_one = [a for a in uniform if a.m == 1]
            if to_one:  # a Reduce over the axes pooled to 1, the pooling op (if any) for the others
                rest = tuple((a.axis, a.uniform) for a in uniform if a.m != 1)
                reduce = reduce_whole(spec, tuple(a.axis for a in to_one))
                options.append(reduce + ([PoolStep(op, first, rest)] if rest else []))
            size = itemsize(compute_dtype(spec))
            steps += min(options, key=lambda o: run_cost(o, spec.input_shape, size))
        steps += cheapest_order(spec, lambda a: self._general_steps(spec, a), general)
        if upsample:
            # Gather copies exactly where Resize has no kernel (float64) or no asymmetric/floor mode (opset < 11);
            # never MatMul for a copy: 0 * NaN/inf would spread a non-finite value along the row (and is no max);
            # the portable target's static 3-D pools: a 5-D Resize is what pnnx drops the scales of (base.py)
            if compute_dtype(spec) == TensorProto.DOUBLE or spec.opset < 11 or separable(spec):
                steps += [GatherStep(a.axis, tuple(i // a.upsample for i in range(a.m))) for a in upsample]
            else:
                steps.append(ResizeStep(tuple((a.axis, a.upsample) for a in upsample)))
        return steps


class MixedLowering(_PerAxis):
    name = "mixed"
    summary = "per axis: a pooling op for uniform windows, Resize for integer upsampling, MatMul otherwise"
    general_method = "matmul"

    def _check(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        if spec.kind == "max" and any(a.general for a in axes):
            return "a max-pooled axis has non-uniform windows (that is 'pool_gather' or 'window_gather')"
        if spec.kind == "max" and any(a.uniform for a in axes) and pool_op_reason(spec):
            # without MaxPool a uniform axis would fall to the general method, which is MatMul here
            return pool_op_reason(spec)
        if separable(spec):  # its uniform axes would be Slices of the 5-D tensor, which ncnn cannot load
            return "the portable target's static 3-D pools are 'window_slices' (two 2-D pools: ncnn, no 3-D pooling op)"
        special = [a for a in axes if a.uniform or a.upsample]
        if not special:
            return "no axis has uniform windows or an integer upsample (that is plain 'matmul')"
        if len(special) == len(axes) and len({bool(a.uniform) for a in axes}) == 1:
            return "every changed axis is of one kind (that is plain 'pool' or 'resize')"
        return None


class MaxPoolGatherLowering(_PerAxis):
    name = "pool_gather"
    summary = ("per axis: MaxPool for uniform windows, Resize for upsampling, "
               "else MaxPool(kmin, stride 1) + 2 Gathers + Max")
    kinds = frozenset({"max"})
    general_method = "pool_gather"
    min_opset = 8  # multi-input Max with broadcasting

    def _check(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        if not any(a.general for a in axes):
            return "no axis has non-uniform windows (that is plain 'pool' or 'resize')"
        return pool_op_reason(spec)


class WindowGatherLowering(_PerAxis):
    name = "window_gather"
    summary = ("per axis: MaxPool for uniform windows, Resize for upsampling, "
               "else Gather of the window table + ReduceMax")
    kinds = frozenset({"max"})
    general_method = "window_gather"

    def _check(self, spec):
        axes = [a for a in axis_windows(spec) if not a.keep]
        if not any(a.general for a in axes) and pool_op_reason(spec) is None:
            return "no axis has non-uniform windows (that is plain 'pool' or 'resize')"
        if (separable(spec) and all(a.upsample for a in axes) and spec.opset >= ResizeLowering.min_opset
                and compute_dtype(spec) != TensorProto.DOUBLE):  # a copy: the resize lowering's 4-D Resizes (ncnn)
            return "every changed axis is an integer upsample (that is 'resize': two 4-D Resizes, which ncnn runs)"
        return None

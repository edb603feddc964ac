"""A pooling op whose kernel spans ONE spatial axis of a large ``[N, C, H, W]`` input, run over the planes.

``PlanePoolStep`` reshapes the input to a batch of single-channel images (``[N*C, 1, H, W]`` for a kernel
along H; ``[N*C*H, 1, W]``, a 1D pool, for a kernel along W), pools, and reshapes back: every plane is
pooled with the same kernel and stride as before, so the values are the same, bit for bit.

Why: onnxruntime's graph optimizer rewrites a 2D MaxPool/AveragePool over many channels into its blocked
NCHWc layout (a reorder of the input and of the output around the pool); out of cache that costs more than
the pooling itself, while a single-channel pool is left as it is (benchmarks/RESULTS.md, "One-axis pools
over large inputs": 4.7-5.2x a ReduceSum as NCHW, 1.9-2.7x as planes at 8x256x64x64; in cache the blocked
layout wins). A kernel over both axes gains nothing, so only one-axis kernels above ``CACHE_BYTES`` take
this form, and only for onnxruntime (TensorRT has no such pass).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import cost as C
from .steps import PoolStep, Step, numel


def _pooled_axis(step: PoolStep, shape) -> int | None:
    """The one spatial axis ``step`` pools (kernel or stride > 1) of a static ``[N, C, H, W]``, else None."""
    if len(shape) != 4 or step.first_spatial != 2 or not all(isinstance(d, int) for d in shape[2:]):
        return None
    if sum(not isinstance(d, int) for d in shape[:2]) > 1:  # the way back needs N or C
        return None
    k, s = step.kernel_strides(shape)
    moved = [2 + j for j in range(2) if (k[j], s[j]) != (1, 1)]
    return moved[0] if len(moved) == 1 else None


def planes_form(step: PoolStep, shape, itemsize: int) -> Step:
    """``step`` as a :class:`PlanePoolStep` where that is the faster form on ``shape``, else ``step``."""
    if _pooled_axis(step, shape) is None or numel(shape) * itemsize <= C.CACHE_BYTES:
        return step
    return PlanePoolStep(step)


@dataclass(frozen=True)
class PlanePoolStep(Step):
    """``pool`` over the ``H x W`` planes as single-channel images (module docstring)."""

    pool: PoolStep

    def out_shape(self, shape):
        return self.pool.out_shape(shape)

    def cost(self, shape, itemsize):
        k, _ = self.pool.kernel_strides(shape)
        out = numel(self.out_shape(shape))
        pooling = out * k[0] * k[1] / C.POOL_RATE + numel(shape) * C.POOL_OUT_OF_CACHE * C.POOL_PLANES_SHARE
        return 3 * C.NODE + pooling + (numel(shape) + out) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        axis = _pooled_axis(self.pool, shape)
        k, s = self.pool.kernel_strides(shape)
        h, w = shape[2], shape[3]
        if axis == 3:  # rows: a 1D pool
            view, kernel, strides = [-1, 1, w], [k[1]], [s[1]]
        else:
            view, kernel, strides = [-1, 1, h, w], k, s
        planes = em.op("Reshape", [x, em.ints("planes", view)])
        pooled = em.op(self.pool.op_type, [planes], kernel_shape=kernel, strides=strides)
        out = self.out_shape(shape)
        back = [d if isinstance(d, int) else -1 for d in out]
        return em.op("Reshape", [pooled, em.ints("shape", back)])

    @property
    def ops(self):
        return ("Reshape", self.pool.op_type)

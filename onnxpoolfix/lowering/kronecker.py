"""Averages over all pooled axes in ONE MatMul: flatten the pooled axes, multiply by kron(P_1..P_k)^T.

One GEMM for the whole tensor instead of one per plane: the fastest form for small planes
(9x9 -> 7x7 on 2048 channels), hopeless for large ones since the matrix has prod(in)*prod(out) entries.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from .. import windows as W
from . import cost as C
from .base import Lowering, compute_dtype, itemsize
from .steps import AllAxesStep, gemm_seconds, numel, reshape_keep


@dataclass(frozen=True)
class KroneckerStep(AllAxesStep):
    """All pooled axes at once: flatten them, one MatMul against ``kron(P_1, ..., P_k)^T`` (module docstring)."""

    def matrix_entries(self) -> int:
        return prod(self.n) * prod(self.m)

    def cost(self, shape, itemsize):
        planes = numel(shape[: self.first_axis])
        macs = planes * self.matrix_entries()
        out = numel(self.out_shape(shape))
        # the constant matrix is not charged as traffic (as MatMulStep's is not): onnxruntime prepacks it once,
        # and its reads are the GEMM's own (measured, 2 threads: 1x2x5x7x9 -> 3x7x4 17 us vs the separable
        # 18 us, where charging its 106 KB at BANDWIDTH estimated 28 vs 18; the large matrices, 64x64 -> 5x7 or
        # 100x100 -> 7x7, still lose to the separable form on their MACs)
        return (3 * C.NODE + gemm_seconds(macs, prod(self.m)) + C.GEMM_CALL
                + (numel(shape) + out) * itemsize / C.BANDWIDTH)

    def emit(self, em, x, shape, elem):
        k = np.ones((1, 1))
        for n, m in zip(self.n, self.m):
            k = np.kron(k, W.pooling_matrix(n, m, dtype=np.float64))
        flat = reshape_keep(em, x, self.first_axis, [prod(self.n)])  # not -1: see BlockPoolStep (a batch of 0)
        y = em.op("MatMul", [flat, em.weights("kron_matrix_t", k.T, elem)])
        return reshape_keep(em, y, self.first_axis, list(self.m))

    ops = ("Reshape", "MatMul")


# beyond this the matrix alone is more memory traffic than any input we would use it for
MAX_MATRIX_BYTES = 16 << 20


class KroneckerMatMulLowering(Lowering):
    name = "kronecker"
    summary = "one MatMul over the flattened pooled axes against the Kronecker pooling matrix"
    kinds = frozenset({"avg"})
    refuses_copies = True

    def _check(self, spec):
        step = self._steps(spec)[0]
        size = step.matrix_entries() * itemsize(compute_dtype(spec))
        if size > MAX_MATRIX_BYTES:
            return f"the Kronecker matrix would take {size / 2**20:.0f} MiB (limit {MAX_MATRIX_BYTES >> 20} MiB)"
        return None

    def _steps(self, spec):
        return [KroneckerStep(spec.ndim - spec.k, spec.in_sizes, spec.out_sizes)]

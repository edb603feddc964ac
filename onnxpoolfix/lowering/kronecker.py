"""Averages over all pooled axes in ONE MatMul: flatten the pooled axes, multiply by kron(P_1..P_k)^T.

One GEMM for the whole tensor instead of one per plane: the fastest form for small planes
(9x9 -> 7x7 on 2048 channels), hopeless for large ones since the matrix has prod(in)*prod(out) entries.
"""
from __future__ import annotations

from .base import Lowering, axis_windows, compute_dtype, itemsize
from .steps import KroneckerStep

# beyond this the matrix alone is more memory traffic than any input we would use it for
MAX_MATRIX_BYTES = 16 << 20


class KroneckerMatMulLowering(Lowering):
    name = "kronecker"
    summary = "one MatMul over the flattened pooled axes against the Kronecker pooling matrix"
    kinds = frozenset({"avg"})

    def _check(self, spec):
        axes = axis_windows(spec)
        if all(a.keep for a in axes):
            return "nothing to pool (every size is kept)"
        step = self._steps(spec)[0]
        size = step.matrix_entries() * itemsize(compute_dtype(spec))
        if size > MAX_MATRIX_BYTES:
            return f"the Kronecker matrix would take {size / 2**20:.0f} MiB (limit {MAX_MATRIX_BYTES >> 20} MiB)"
        return None

    def _steps(self, spec):
        axes = axis_windows(spec)
        return [KroneckerStep(spec.ndim - spec.k, tuple(a.n for a in axes), tuple(a.m for a in axes))]

"""The window-sum steps: averages as sums of gathered windows divided by the window lengths, with no
weights (the portable target's lowering, :mod:`.window_sum`)."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from .. import windows as W
from ..graph.emit import np_dtype
from . import cost as C
from .steps import AllAxesStep, OneAxisStep, gather_cost, numel, reshape_keep, window_gather_cost


def pad_zero(em, x: str, rank: int, axis: int) -> str:
    """``x`` with one zero after the last element of ``axis`` (the window tables' padding index); Pad takes its
    pads as an input from opset 11."""
    pads = [0] * (2 * rank)
    pads[rank + axis] = 1
    if em.opset >= 11:
        return em.op("Pad", [x, em.ints("pads", pads)], mode="constant")
    return em.op("Pad", [x], mode="constant", pads=pads, value=0.0)


@dataclass(frozen=True)
class WindowSumStep(OneAxisStep):
    """Average along one axis as window sums divided by the window lengths: the input padded with one zero
    at the end of the axis, a Gather of the ``[m, kmax]`` window table (short windows padded with the zero's
    index), ReduceSum over the window dim, Div by the lengths (small integers).

    No weights to quantize or round (int8 quantization and fp16 storage leave it exact), and no multiplication:
    a NaN or inf reaches only the windows that hold it, as in torch (a MatMul's 0 * NaN spreads it). A last axis
    goes to the front first (:func:`~.max_steps.gather_window_max`).
    """

    def table(self) -> np.ndarray:
        t = np.full((self.m, W.max_window(self.n, self.m)), self.n, dtype=np.int64)  # n: the zero appended by the Pad
        for i, (s, e) in enumerate(W.windows(self.n, self.m)):
            t[i, : e - s] = np.arange(s, e)
        return t

    def cost(self, shape, itemsize):
        out_shape = self.out_shape(shape)
        pad = C.NODE + 2 * numel(shape) * itemsize / C.BANDWIDTH
        div = C.NODE + 2 * numel(out_shape) * itemsize / C.BANDWIDTH
        return window_gather_cost(shape, out_shape, self.axis, W.max_window(self.n, self.m), itemsize, pad + div)

    def emit(self, em, x, shape, elem):
        rank = len(shape)
        last = self.axis == rank - 1
        axis = 0 if last else self.axis
        if last:
            x = em.op("Transpose", [x], perm=[rank - 1] + list(range(rank - 1)))
        g = em.op("Gather", [pad_zero(em, x, rank, axis), em.const("window_table", self.table())], axis=axis)
        sums = em.reduce("ReduceSum", g, [axis + 1], keepdims=0)
        lengths = np.asarray(W.window_lengths(self.n, self.m), dtype=np_dtype(elem))
        lengths = lengths.reshape((self.m,) + (1,) * (rank - 1 - axis))
        y = em.op("Div", [sums, em.const("window_lengths", lengths)])
        if last:
            y = em.op("Transpose", [y], perm=list(range(1, rank)) + [0])
        return y

    @property
    def ops(self):
        return ("Pad", "Gather", "ReduceSum", "Div", "Transpose")


@dataclass(frozen=True)
class FlatWindowSumStep(AllAxesStep):
    """:class:`WindowSumStep` over all pooled axes at once (the Kronecker form's counterpart): the pooled
    axes flattened and moved to the front, one zero appended, one Gather of the ``[prod(m), prod(kmax)]``
    flat window table (padded with the zero's index), ReduceSum, Div by the window sizes, back in place.
    One Gather of contiguous blocks for the whole tensor instead of one per axis: small planes."""

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """The flat window table and the window sizes, both in output (row-major) order."""
        per_axis = [W.windows(n, m) for n, m in zip(self.n, self.m)]
        kmax, total = self.kmax(), prod(self.n)
        rows, sizes = [], []
        for idx in np.ndindex(*self.m):
            ranges = [np.arange(*per_axis[a][i]) for a, i in enumerate(idx)]
            flat = np.ravel_multi_index(np.meshgrid(*ranges, indexing="ij"), self.n).ravel()
            rows.append(np.concatenate([flat, np.full(kmax - flat.size, total)]))
            sizes.append(flat.size)
        return np.asarray(rows, dtype=np.int64), np.asarray(sizes)

    def kmax(self) -> int:
        return prod(W.max_window(n, m) for n, m in zip(self.n, self.m))

    def cost(self, shape, itemsize):
        lead = numel(shape[: self.first_axis])
        gathered = prod(self.m) * self.kmax() * lead
        moved = 2 * (numel(shape) + lead * prod(self.m)) * itemsize / C.BANDWIDTH  # the two Transposes
        return (8 * C.NODE + moved + 2 * numel(shape) * itemsize / C.BANDWIDTH
                + gather_cost((prod(self.m), self.kmax(), lead), 1) + 2 * gathered * itemsize / C.BANDWIDTH)

    def emit(self, em, x, shape, elem):
        first = self.first_axis
        flat = reshape_keep(em, x, first, [prod(self.n)])  # [lead..., P]
        front = em.op("Transpose", [flat], perm=[first] + list(range(first)))  # [P, lead...]
        rank = first + 1
        table, sizes = self.table()
        g = em.op("Gather", [pad_zero(em, front, rank, 0), em.const("window_table", table)], axis=0)  # [M, K, lead...]
        sums = em.reduce("ReduceSum", g, [1], keepdims=0)  # [M, lead...]
        sizes = sizes.astype(np_dtype(elem)).reshape((-1,) + (1,) * first)
        y = em.op("Div", [sums, em.const("window_sizes", sizes)])
        back = em.op("Transpose", [y], perm=list(range(1, rank)) + [0])  # [lead..., M]
        return reshape_keep(em, back, first, list(self.m))

    ops = ("Reshape", "Transpose", "Pad", "Gather", "ReduceSum", "Div")

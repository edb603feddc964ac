"""What the dynamic lowerings compute from the runtime lengths of symbolic axes (shared by the average's
:mod:`.dynamic` and the max's :mod:`.dynamic_max`): the lengths themselves, read from ``Shape``, and max
pooling's window tables, from (int64, exact)::

    start_i = (i * n) div m            end_i = ((i + 1) * n + m - 1) div m

``m`` is a constant, or (:class:`~onnxpoolfix.spec.RuntimeDim`: an output size the graph computes from the
input's size) a 0-d int64 tensor read from the graph's own size tensor (:func:`runtime_size`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from onnx import TensorProto

from ..graph.emit import Emitter
from ..spec import RuntimeDim

# a guess for a symbolic length in cost estimates (the planner has no other candidate for these nodes)
GUESS = 32


def guess_len(d) -> int:
    """``d``, or the guess for a symbolic length."""
    return d if isinstance(d, int) else GUESS


def out_dim(m):
    """An output length in a shape: ``m``, or the symbolic name of a runtime one."""
    return str(m) if isinstance(m, RuntimeDim) else m


def runtime_size(em: Emitter, m: RuntimeDim) -> str:
    """The output length ``m`` as a 0-d int64 tensor: its entry of the graph's size tensor (float where torch
    computed it as ``Floor(n * scale)``: integral, so the Cast is exact)."""
    if m.scalar:  # already the 0-d length
        return em.cast(m.tensor, TensorProto.INT64)
    entry = em.op("Gather", [m.tensor, int64_scalar(em, "entry", m.index)], axis=0, hint="output_size")
    return em.cast(entry, TensorProto.INT64)


def int64_scalar(em: Emitter, hint: str, v: int) -> str:
    """A 0-d int64 constant (what Range, Div and friends take for a length)."""
    return em.const(hint, np.array(v, dtype=np.int64))


class RuntimeLengths:
    """Lengths of ``x``'s axes read at run time, as 1-D int64 tensors: ``Shape`` with ``start``/``end`` from
    opset 15 (one node each), before that one ``Shape`` shared by Gathers."""

    def __init__(self, em: Emitter, x: str):
        self.em, self.x, self._shape = em, x, None

    def __call__(self, axes: Sequence[int]) -> str:
        em, axes = self.em, list(axes)
        if em.opset >= 15 and axes == list(range(axes[0], axes[-1] + 1)):
            return em.op("Shape", [self.x], start=axes[0], end=axes[-1] + 1, hint="lengths")
        if self._shape is None:
            self._shape = em.op("Shape", [self.x])
        return em.op("Gather", [self._shape, em.ints("axes", axes)], axis=0, hint="lengths")


def runtime_window_table(em: Emitter, n: str, m: int | str) -> tuple[str, str]:
    """The window table ``idx[i, k] = min(start_i + k, end_i - 1)`` (``[m, kmax]``, int64) of ``n -> m`` for a
    runtime length ``n`` (a 0-d int64 tensor), and ``kmax`` (0-d): short windows repeat their last index.
    ``m``: a constant, or a 0-d int64 tensor (a runtime output length)."""
    if isinstance(m, int):
        i = em.const("i", np.arange(m, dtype=np.int64).reshape(m, 1))
        i1 = em.const("i_plus_1", np.arange(1, m + 1, dtype=np.int64).reshape(m, 1))
        m_, m_minus_1 = int64_scalar(em, "m", m), int64_scalar(em, "m_minus_1", m - 1)
    else:
        one = int64_scalar(em, "one", 1)
        i = em.unsqueeze(em.op("Range", [int64_scalar(em, "zero", 0), m, one], hint="i"), [1])
        i1 = em.op("Add", [i, one], hint="i_plus_1")
        # m = 0 (torch: an empty output) divides nothing by zero: max(m, 1) divides the empty table
        m_ = int_max(em, m, one)
        m_minus_1 = em.op("Sub", [m_, one], hint="m_minus_1")
    start = em.op("Div", [em.op("Mul", [n, i]), m_], hint="start")  # [m, 1]
    end = em.op("Div", [em.op("Add", [em.op("Mul", [n, i1]), m_minus_1]), m_], hint="end")
    kmax = em.reduce("ReduceMax", em.op("Sub", [end, start], hint="length"), [0, 1], keepdims=0)
    if not isinstance(m, int):  # an empty table (m = 0) still has one window column: every reduction is defined
        kmax = int_max(em, kmax, int64_scalar(em, "one", 1))
    k = em.op("Range", [int64_scalar(em, "zero", 0), kmax, int64_scalar(em, "one", 1)])  # [kmax]
    last = em.op("Sub", [end, int64_scalar(em, "one", 1)], hint="last")
    idx = em.op("Add", [start, k])  # [m, kmax]
    if em.opset >= 12:
        return em.op("Min", [idx, last], hint="window_table"), kmax
    # Min has no int64 before opset 12
    return em.op("Where", [em.op("Less", [idx, last]), idx, last], hint="window_table"), kmax


def int_max(em: Emitter, a: str, b: str) -> str:
    """``max(a, b)`` of int64 tensors (Max has no int64 before opset 12)."""
    if em.opset >= 12:
        return em.op("Max", [a, b])
    return em.op("Where", [em.op("Less", [a, b]), b, a])


def runtime_window_tables(em: Emitter, lengths: str, g: int, m: int) -> str:
    """The window tables of ``g`` axes pooled to the same ``m`` from their runtime ``lengths`` (1-D, ``[g]``),
    in one computation: ``[m, kmax]`` for one axis, ``[g, m, kmax]`` stacked for several (axis ``q``'s is
    ``Gather(tables, q, axis=0)``), ``kmax`` the longest window of any of them. Window ``i`` lists
    ``end_i - kmax .. end_i - 1`` clamped below at ``start_i``: short windows repeat their first index,
    which changes no maximum.

    ``start`` and ``end`` are 2 and 3 nodes, ``-kmax = ReduceMin(start - end)``, and the offsets
    ``-kmax .. -1`` one Range on the last axis, no Unsqueeze (for one axis): 11 nodes with the Shape for one
    axis, 12 + g for ``g`` (the ``[m, kmax, g]`` form this replaced: 13 and 13 + g; onnxruntime runs such a
    node in ~2-3 us). An empty axis (n = 0) gets an empty table, as before.
    """
    i = np.arange(m, dtype=np.int64).reshape(m, 1)
    if g > 1:
        lengths = em.unsqueeze(lengths, [1, 2])  # [g, 1, 1]
    start = em.op("Div", [em.op("Mul", [lengths, em.const("i", i)]), int64_scalar(em, "m", m)], hint="start")
    end = em.op("Div", [em.op("Add", [em.op("Mul", [lengths, em.const("i_plus_1", i + 1)]),
                                      int64_scalar(em, "m_minus_1", m - 1)]), int64_scalar(em, "m", m)], hint="end")
    minus_kmax = em.reduce("ReduceMin", em.op("Sub", [start, end]), list(range(3 if g > 1 else 2)), keepdims=0)
    offsets = em.op("Range", [minus_kmax, int64_scalar(em, "zero", 0), int64_scalar(em, "one", 1)], hint="offsets")
    return int_max(em, em.op("Add", [end, offsets]), start)  # (end - kmax .. end - 1) clamped at start



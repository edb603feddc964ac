"""Max pooling with torch's indices for FINITE inputs, one pooled axis at a time (the ``argmax`` lowering's
fast path, behind its If on "the input's sum is finite"; :mod:`.argmax` keeps the NaN-aware construction for
the rest).

torch's index is the first maximum in row-major scan order. Over finite values that choice is separable,
provided the axes are reduced from the innermost outwards: per row the first column holding the row's
window maximum, then the first row whose maximum is the window's maximum (its first column holding it is
the one the first pass chose). Reduced the other way round it would be the first maximum in column-major
order, which differs on ties.

Per pooled axis, innermost first, on the input laid out ``[n_1..n_k, L]`` (the pooled axes in front, the
leading dims flattened behind them: every Gather copies whole blocks, every reduction runs over a middle
axis, which onnxruntime vectorises):

1. ``g = Gather(v, window table)``: ``[.., m, kmax, ..]`` (short windows repeat their last index, after the
   real one, so never the first maximum);
2. ``v = ReduceMax(g)``: the window maxima, the next pass's input;
3. the first position of the maximum as ``kmax - ReduceMax(Cast(Equal(g, v)) * [kmax, kmax-1, .., 1])``,
   in float (onnxruntime's ArgMax runs 5-25x slower than its ReduceMax here: measured [10,7,3,512] over the
   middle axis 185 vs 32 us; this construction 120 us);

then the coordinates are read back outermost first (each inner axis's position at the outer coordinates
already found: a GatherElements), moved to ``[L, m_1..m_k]`` as float (onnxruntime transposes int64 element
by element: [7,7,512] 0.6 ms against ~20 us for float) and summed with the input strides in int64. The
values are the last pass's maxima: onnxruntime's ReduceMax keeps the first of equal values, so a tie of
``0.0`` and ``-0.0`` gives torch's (tests/lowering/test_first_max.py holds it to that).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
from onnx import TensorProto

from ..graph.emit import Emitter

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
#: every op :func:`emit_first_max` may emit
FIRST_MAX_OPS = ("Transpose", "Reshape", "Gather", "ReduceMax", "Equal", "Cast", "Mul", "Squeeze", "Sub",
                 "GatherElements", "Slice", "Concat", "Shape", "Add", "Range", "Unsqueeze")


@dataclass(frozen=True)
class PooledAxis:
    """One axis of :func:`emit_first_max`. ``table``: its ``[m, kmax]`` window table (a numpy array, or the
    name of a runtime int64 tensor), None where the axis keeps its length (its window is the element itself);
    ``kmax``, ``m``, ``n``: its window length, output and input length, ints or names of 0-d int64 tensors."""

    table: np.ndarray | str | None
    kmax: int | str
    m: int | str
    n: int | str


def emit_first_max(em: Emitter, x: str, rank: int, axes: list[PooledAxis], elem: int, y: str,
                   indices: str | None) -> None:
    """Values (into ``y``) and, if ``indices``, torch's indices of max pooling ``x``'s last ``len(axes)`` axes,
    exact where every element of ``x`` is finite (see the module docstring)."""
    k = len(axes)
    lead = rank - k
    g = em.op("Transpose", [x], perm=list(range(lead, rank)) + list(range(lead)))
    v = em.op("Reshape", [g, em.ints("pooled_first", [0] * k + [-1])], hint="pooled_first")  # [n_1..n_k, L]
    reversed_pos: dict[int, str] = {}  # axis -> kmax - first position of the maximum, float
    for a in reversed(range(k)):
        ax = axes[a]
        if ax.table is None:
            continue
        table = em.const(f"window_table_{a}", ax.table) if isinstance(ax.table, np.ndarray) else ax.table
        windows = em.op("Gather", [v, table], axis=a, hint="windows")
        v = em.reduce("ReduceMax", windows, [a + 1], keepdims=1)
        if indices:
            hit = em.cast(em.op("Equal", [windows, v]), F32)
            reversed_pos[a] = em.reduce("ReduceMax", em.op("Mul", [hit, _weights(em, ax.kmax, k - a)]), [a + 1],
                                        keepdims=0)
        v = em.squeeze(v, [a + 1])
    out_shape = _output_shape(em, x, lead, axes)
    back = [k] + list(range(k))  # [m_1..m_k, L] -> [L, m_1..m_k]
    em.op("Reshape", [em.op("Transpose", [v], perm=back), out_shape], out=y)
    if not indices:
        return
    coords = _coordinates(em, axes, reversed_pos)
    flat, stride = None, None
    if all(isinstance(ax.n, int) for ax in axes) and prod(ax.n for ax in axes) <= 1 << 24:
        # a known plane of at most 2**24 elements: the flat index is exact in float, summed before the move
        for a in reversed(range(k)):
            term = coords[a] if stride is None else em.op("Mul", [coords[a], em.const("stride", np.float32(stride))])
            flat = term if flat is None else em.op("Add", [flat, term])
            stride = (stride or 1) * axes[a].n
        flat = em.cast(em.op("Transpose", [flat], perm=back), I64)
    else:  # each coordinate moved as float, then summed in int64
        for a in reversed(range(k)):
            c = em.cast(em.op("Transpose", [coords[a]], perm=back), I64)
            term = c if stride is None else em.op("Mul", [c, stride])
            flat = term if flat is None else em.op("Add", [flat, term])
            if a > 0:
                stride = _scalar(em, axes[a].n) if stride is None else em.op("Mul", [stride, _scalar(em, axes[a].n)])
    em.op("Reshape", [flat, out_shape], out=indices)


def _coordinates(em: Emitter, axes: list[PooledAxis], reversed_pos: dict[int, str]) -> dict[int, str]:
    """Per axis the input coordinate of torch's choice, float, laid out ``[m_1..m_k, L]`` (a kept axis: its
    output coordinate, broadcast). Outermost first: axis ``a``'s positions are laid out ``[n_1..n_{a-1},
    m_a..m_k, L]``, so they are read at the outer axes' coordinates."""
    k = len(axes)
    coords: dict[int, str] = {}
    for a, ax in enumerate(axes):
        shape = [1] * (k + 1)
        shape[a] = -1
        if ax.table is None:
            iota = (em.const("coordinate", np.arange(ax.n, dtype=np.float32)) if isinstance(ax.n, int) else
                    em.cast(em.op("Range", [_scalar(em, 0), ax.n, _scalar(em, 1)]), F32))
            coords[a] = em.op("Reshape", [iota, em.ints("shape", shape)], hint="coordinate")
            continue
        pos = reversed_pos[a]
        outer = [j for j in range(a) if axes[j].table is not None]
        if outer:  # read at the outer coordinates: flatten the outer axes into one
            pos = _read_at(em, pos, a, coords, axes)
        # coordinate = start + kmax - (kmax - position)
        if isinstance(ax.table, np.ndarray):
            start_plus = em.const("start_plus_kmax", (ax.table[:, 0] + ax.table.shape[1]).astype(np.float32))
        else:
            first = em.op("Gather", [ax.table, _scalar(em, 0)], axis=1, hint="window_start")
            start_plus = em.cast(em.op("Add", [first, ax.kmax]), F32)
        coords[a] = em.op("Sub", [em.op("Reshape", [start_plus, em.ints("shape", shape)]), pos], hint="coordinate")
    return coords


def _read_at(em: Emitter, pos: str, a: int, coords: dict[int, str], axes: list[PooledAxis]) -> str:
    """``pos`` (``[n_1..n_{a-1}, m_a..m_k, L]``) at the coordinates of axes ``1..a-1``: ``[m_1..m_k, L]``."""
    if a == 1:
        return em.op("GatherElements", [pos, em.cast(coords[0], I64)], axis=0)
    # flatten axes 1..a-1 of both: the index is the row-major offset of the outer coordinates
    index = None
    for j in range(a):
        c = em.cast(coords[j], I64)
        index = c if index is None else em.op("Add", [em.op("Mul", [index, _scalar(em, axes[j].n)]), c])
    full = em.op("Shape", [index])  # [m_1..m_k, L]: at least one outer axis is pooled (a full coordinate)
    tail = em.op("Slice", [em.op("Shape", [pos]), em.ints("start", [a]), em.ints("end", [len(axes) + 1])])
    flat_pos = em.op("Reshape", [pos, em.op("Concat", [em.ints("minus_one", [-1]), tail], axis=0)])
    tail_i = em.op("Slice", [full, em.ints("start", [a]), em.ints("end", [len(axes) + 1])])
    flat_index = em.op("Reshape", [index, em.op("Concat", [em.ints("minus_one", [-1]), tail_i], axis=0)])
    return em.op("Reshape", [em.op("GatherElements", [flat_pos, flat_index], axis=0), full])


def _weights(em: Emitter, kmax: int | str, trailing: int) -> str:
    """``[kmax, kmax-1, .., 1]`` as float, shaped ``[kmax, 1 x trailing]`` (over the window axis)."""
    shape = [-1] + [1] * trailing
    if isinstance(kmax, int):
        return em.const("descending", np.arange(kmax, 0, -1, dtype=np.float32).reshape(shape))
    desc = em.cast(em.op("Range", [kmax, _scalar(em, 0), _scalar(em, -1)]), F32)
    return em.op("Reshape", [desc, em.ints("shape", shape)], hint="descending")


def _output_shape(em: Emitter, x: str, lead: int, axes: list[PooledAxis]) -> str:
    parts = []
    if lead:
        parts.append(em.op("Slice", [em.op("Shape", [x]), em.ints("start", [0]), em.ints("end", [lead])]))
    static = [ax.m for ax in axes]
    if all(isinstance(m, int) for m in static):
        parts.append(em.ints("pooled_sizes", static))
    else:
        for ax in axes:
            parts.append(em.ints("size", [ax.m]) if isinstance(ax.m, int) else em.unsqueeze(ax.m, [0]))
    return parts[0] if len(parts) == 1 else em.op("Concat", parts, axis=0, hint="output_shape")


def _scalar(em: Emitter, v: int | str) -> str:
    return em.const("int", np.array(v, dtype=np.int64)) if isinstance(v, int) else v


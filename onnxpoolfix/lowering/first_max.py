"""Max pooling with torch's indices for inputs with no NaN, one pooled axis at a time (the ``argmax``
lowering's fast path, behind its If on "the input's sum is finite and nothing is empty"; :mod:`.argmax`
keeps the NaN-aware construction for the rest).

torch's index is the first maximum in row-major scan order. Without NaN that choice is separable, provided
the axes are reduced from the innermost outwards: per row the first column holding the row's window
maximum, then the first row whose maximum is the window's maximum (its first column holding it is the one
the first pass chose). Reduced the other way round it would be the first maximum in column-major order,
which differs on ties.

On the input laid out ``[n_1..n_k, L]`` (the pooled axes in front, the leading dims flattened behind them:
every Gather copies whole blocks, every reduction runs over a middle axis, which onnxruntime vectorises):

1. values, innermost axis first: ``Gather(v, window table)`` (``[.., m, kmax, ..]``; short windows repeat
   their last index, after the real one, so never the first maximum), then ``ReduceMax`` over the window;
2. positions, outermost axis first: the first window position holding the maximum, as
   ``kmax - ReduceMax(Cast(Equal(candidates, max)) * [kmax, .., 1])`` in float (onnxruntime's ArgMax runs
   5-25x slower than its ReduceMax over a middle axis: [10,7,3,512] 185 vs 32 us). The outermost axis reads
   its own windows; each inner axis reads only its ``kmax`` candidates at the outer coordinates already
   found (one GatherElements from the tensor its pass reduced): [1,256,33,33] -> 8x8 604 against 708 us
   for comparing every window of every pass;
3. the coordinates summed to the flat index in float where the plane is known and at most 2**24 elements
   (exact), moved to ``[L, m_1..m_k]`` as float (onnxruntime transposes int64 element by element: [7,7,512]
   0.6 ms against ~20 us for float), else each moved as float and summed in int64.

The values are the last pass's maxima: onnxruntime's ReduceMax keeps the first of equal values, so a tie of
``0.0`` and ``-0.0`` gives torch's (tests/lowering/test_first_max.py holds it to that). Measured against
torch's kernel (2 threads, one process): [1,512,10,10] -> 7x7 400 vs 511 us, [1,256,33,33] -> 8x8 647 vs
856 us, [8,64,31,40] -> 6x9 1408 vs 1674 us; values only [1,512,10,10] -> 7x7 107 us against 154 for the
``window_gather`` lowering.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
from onnx import TensorProto

from ..graph.emit import Emitter
from . import cost as C
from .max_steps import finite_input

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
#: every op :func:`emit_first_max` may emit
FIRST_MAX_OPS = ("Transpose", "Reshape", "Gather", "ReduceMax", "Equal", "Cast", "Mul", "Squeeze", "Sub",
                 "GatherElements", "Slice", "Concat", "Shape", "Add", "Range", "Unsqueeze", "Flatten", "Size", "And",
                 "Greater", "Where")


@dataclass(frozen=True)
class PooledAxis:
    """One axis of :func:`emit_first_max`. ``table``: its ``[m, kmax]`` window table (a numpy array, or the
    name of a runtime int64 tensor), None where the axis keeps its length (its window is the element itself);
    ``kmax``, ``m``, ``n``: its window length, output and input length, ints or names of 0-d int64 tensors."""

    table: np.ndarray | str | None
    kmax: int | str
    m: int | str
    n: int | str


def emit_first_max(em: Emitter, x: str, rank: int, axes: list[PooledAxis], y: str,
                   indices: str | None) -> None:
    """Values (into ``y``) and, if ``indices``, torch's indices of max pooling ``x``'s last ``len(axes)`` axes,
    exact where no element of ``x`` is NaN (see the module docstring)."""
    k = len(axes)
    lead = rank - k
    g = em.op("Transpose", [x], perm=list(range(lead, rank)) + list(range(lead)))
    v = em.op("Reshape", [g, em.ints("pooled_first", [0] * k + [-1])], hint="pooled_first")  # [n_1..n_k, L]
    pooled = [a for a in range(k) if axes[a].table is not None]
    read = {}  # axis -> the tensor its pass reduced: [n_1..n_a, m_a+1..m_k, L]
    tables = {a: em.const(f"window_table_{a}", axes[a].table) if isinstance(axes[a].table, np.ndarray)
              else axes[a].table for a in pooled}  # names, read by the passes and the read-back alike
    for a in reversed(pooled):
        read[a] = v
        windows = em.op("Gather", [v, tables[a]], axis=a, hint="windows")
        kept_max = em.reduce("ReduceMax", windows, [a + 1], keepdims=1)
        v = em.squeeze(kept_max, [a + 1])
    out_shape = output_shape(em, x, lead, axes)
    back = [k] + list(range(k))  # [m_1..m_k, L] -> [L, m_1..m_k]
    em.op("Reshape", [em.op("Transpose", [v], perm=back), out_shape], out=y)
    if not indices:
        return
    # outermost pooled axis: the first window position holding the maximum, from its own windows; then each
    # inner axis at the coordinates found so far, from the tensor its pass reduced (only kmax candidates each)
    coords = {a: _iota(em, axes[a].n, a, k) for a in range(k) if axes[a].table is None}
    coords[pooled[0]] = _coordinate(em, axes[pooled[0]], pooled[0], k,
                                    _first_hit(em, windows, kept_max, axes[pooled[0]].kmax, pooled[0], k))
    for a in pooled[1:]:
        candidates = _candidates(em, read[a], a, coords, axes, tables[a])
        hits = _first_hit(em, candidates, em.unsqueeze(v, [a + 1]), axes[a].kmax, a, k)
        coords[a] = _coordinate(em, axes[a], a, k, hits)
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


def first_max_seconds(lead: int, n: list[int], m: list[int], kmax: list[int], itemsize: int, indices: bool) -> float:
    """Estimated seconds of :func:`emit_first_max` behind its If (lowering/cost.py's constants): the finiteness
    sum and the move of ``x``, per pooled axis (``n != m``) a blocked Gather of its windows and a ReduceMax, and
    for the indices ~4 passes over the outermost axis's windows and ~8 over each inner axis's candidates
    (``kmax`` per output position: the index build, the GatherElements, the comparison), plus ~12 nodes per axis."""
    size = lead * prod(n)
    c = 3 * size * itemsize / C.BANDWIDTH + 8 * C.NODE
    cur = list(n)
    pooled = [a for a in range(len(n)) if n[a] != m[a]]
    for a in reversed(pooled):
        gathered = prod(cur) // cur[a] * m[a] * kmax[a] * lead
        blocks = gathered // max(lead * prod(cur[a + 1:]), 1)
        c += gathered / C.GATHER_RATE + blocks * C.GATHER_BLOCK + 2 * gathered * itemsize / C.BANDWIDTH + 4 * C.NODE
        if indices and a == pooled[0]:
            c += 4 * gathered * 4 / C.BANDWIDTH
        cur[a] = m[a]
    if indices:
        out = lead * prod(m)
        c += sum(8 * out * kmax[a] * 8 / C.BANDWIDTH + 12 * C.NODE for a in pooled[1:]) + 8 * out * 4 / C.BANDWIDTH
    if size * itemsize > C.CACHE_BYTES:  # the move and the Gathers out of cache: [8,256,64,64] -> 5x7 values
        c *= C.ARGMAX_OUT_OF_CACHE / 2  # 15.9 ms against window_gather's 7.8 ms (in cache it is 107 vs 154 us)
    return c


def takes_first_max(em: Emitter, x: str, elem: int, axes: list[PooledAxis]) -> str:
    """The If condition for :func:`emit_first_max`: ``x`` is finite and nothing is empty (no element: the
    NaN-aware construction handles empty tensors, and every Reshape here may then take sizes from shapes)."""
    cond = finite_input(em, x, elem)
    zero = _scalar(em, 0)
    for test in [em.op("Size", [x])] + [ax.m for ax in axes if isinstance(ax.m, str)]:
        cond = em.op("And", [cond, em.op("Greater", [test, zero])])
    return cond


def _first_hit(em: Emitter, candidates: str, maximum: str, kmax: int | str, a: int, k: int) -> str:
    """``kmax`` minus the first position along axis ``a + 1`` of ``candidates`` equal to ``maximum`` (float;
    the window axis dropped): ``ReduceMax(Cast(Equal) * [kmax, .., 1])``, which onnxruntime runs 1.5x faster
    than an ArgMax over a middle axis and without its per-element index bookkeeping."""
    hit = em.zero_one(em.op("Equal", [candidates, maximum]), F32)
    return em.reduce("ReduceMax", em.op("Mul", [hit, _weights(em, kmax, k - a)]), [a + 1], keepdims=0)


def _coordinate(em: Emitter, ax: PooledAxis, a: int, k: int, reversed_pos: str) -> str:
    """The input coordinate (float, ``[m_1..m_k, L]``) of window position ``kmax - reversed_pos``."""
    shape = [1] * (k + 1)
    shape[a] = -1
    if isinstance(ax.table, np.ndarray):
        start_plus = em.const("start_plus_kmax", (ax.table[:, 0] + ax.table.shape[1]).astype(np.float32))
    else:
        first = em.op("Gather", [ax.table, _scalar(em, 0)], axis=1, hint="window_start")
        start_plus = em.cast(em.op("Add", [first, _scalar(em, ax.kmax)]), F32)
    return em.op("Sub", [em.op("Reshape", [start_plus, em.ints("shape", shape)]), reversed_pos], hint="coordinate")


def _iota(em: Emitter, n: int | str, a: int, k: int) -> str:
    """``0..n-1`` as float along axis ``a`` of ``k + 1`` (a kept axis's coordinate, broadcast)."""
    shape = [1] * (k + 1)
    shape[a] = -1
    iota = (em.const("coordinate", np.arange(n, dtype=np.float32)) if isinstance(n, int) else
            em.cast(em.op("Range", [_scalar(em, 0), n, _scalar(em, 1)]), F32))
    return em.op("Reshape", [iota, em.ints("shape", shape)], hint="coordinate")


def _candidates(em: Emitter, data: str, a: int, coords: dict[int, str], axes: list[PooledAxis], table: str) -> str:
    """The ``kmax_a`` window elements along axis ``a`` of ``data`` (``[n_1..n_a, m_a+1..m_k, L]``, what axis
    a's pass reduced) at the outer axes' coordinates ``coords`` and every output position:
    ``[m_1..m_a, kmax_a, m_a+1..m_k, L]``, one GatherElements over the flattened axes. ``table``: axis a's
    window table (``[m_a, kmax_a]``)."""
    k = len(axes)
    dims = [ax.n if j <= a else ax.m for j, ax in enumerate(axes)]  # data's dims (a kept axis: n == m)
    if isinstance(axes[a].table, np.ndarray) and all(isinstance(d, int) for d in dims) and prod(dims) <= 1 << 24:
        index = _float_index(em, a, coords, axes, axes[a].table, dims)
    else:
        index = _int_index(em, a, coords, axes, table, dims)
    # [rows, L] both (Flatten, not Reshape(-1, L): that is ambiguous for an empty batch, L = 0)
    picked = em.op("GatherElements", [em.op("Flatten", [data], axis=k), em.op("Flatten", [index], axis=k + 1)], axis=0)
    return em.op("Reshape", [picked, em.op("Shape", [index])], hint="candidates")


def _float_index(em: Emitter, a: int, coords, axes, table: np.ndarray, dims) -> str:
    """:func:`_candidates`' row index summed in float (exact: below 2**24) and cast once: onnxruntime's
    broadcasting int64 Add and Mul run several times slower than float ones."""
    k = len(axes)
    index, stride = None, 1
    for j in reversed(range(k)):
        if j < a:
            term = em.unsqueeze(coords[j], [a + 1])
        elif j == a:
            shape = [1] * (k + 2)
            shape[a], shape[a + 1] = table.shape
            term = em.const("window_rows", (table * stride).astype(np.float32).reshape(shape))
        else:
            term = em.unsqueeze(_iota(em, axes[j].m, j, k), [a + 1])
        if stride != 1 and j != a:
            term = em.op("Mul", [term, em.const("stride", np.float32(stride))])
        index = term if index is None else em.op("Add", [index, term])
        stride *= dims[j]
    return em.cast(index, TensorProto.INT32)  # GatherElements takes int32 indices: half the bytes of int64


def _int_index(em: Emitter, a: int, coords, axes, table: str, dims) -> str:
    """:func:`_candidates`' row index in int64, from the runtime window ``table`` and lengths (the dynamic
    lowering's tables, or planes past 2**24 elements)."""
    k = len(axes)
    index, stride = None, None
    for j in reversed(range(k)):
        if j < a:
            term = em.unsqueeze(em.cast(coords[j], I64), [a + 1])
        elif j == a:  # [m_a, kmax_a] placed on dims a, a + 1
            term = em.unsqueeze(table, [b for b in range(k + 2) if b not in (a, a + 1)])
        else:
            term = em.unsqueeze(em.cast(_iota(em, axes[j].m, j, k), I64), [a + 1])
        if stride is not None:
            term = em.op("Mul", [term, stride])
        index = term if index is None else em.op("Add", [index, term])
        if j:  # (past the first axis no term is left to scale)
            stride = _scalar(em, dims[j]) if stride is None else em.op("Mul", [stride, _scalar(em, dims[j])])
    return index


def _weights(em: Emitter, kmax: int | str, trailing: int) -> str:
    """``[kmax, kmax-1, .., 1]`` as float, shaped ``[kmax, 1 x trailing]`` (over the window axis)."""
    shape = [-1] + [1] * trailing
    if isinstance(kmax, int):
        return em.const("descending", np.arange(kmax, 0, -1, dtype=np.float32).reshape(shape))
    desc = em.cast(em.op("Range", [kmax, _scalar(em, 0), _scalar(em, -1)]), F32)
    return em.op("Reshape", [desc, em.ints("shape", shape)], hint="descending")


def output_shape(em: Emitter, x: str, lead: int, axes: list[PooledAxis]) -> str:
    """The pooled output's shape (1-D int64): ``x``'s ``lead`` leading dims, then each axis's ``m``."""
    parts = []
    if lead:
        parts.append(em.op("Slice", [em.op("Shape", [x]), em.ints("start", [0]), em.ints("end", [lead])]))
    static = [ax.m for ax in axes]
    if all(isinstance(m, int) for m in static):
        parts.append(em.ints("pooled_sizes", static))
    else:
        parts += [em.ints("size", [ax.m]) if isinstance(ax.m, int) else em.unsqueeze(ax.m, [0]) for ax in axes]
    return parts[0] if len(parts) == 1 else em.op("Concat", parts, axis=0, hint="output_shape")


def _scalar(em: Emitter, v: int | str) -> str:
    return em.const("int", np.array(v, dtype=np.int64)) if isinstance(v, int) else v


"""Symbolic pooled axes: the windows are computed in the graph from the runtime length ``n``.

For one axis pooled ``n -> m`` (``m`` is the node's constant; ``n`` is ``Shape(x)[axis]``, read at run
time), with ``i`` in ``[0, m)`` and ``j = Range(0, n)``, window ``i`` is ``[start_i, end_i)``::

    start_i = (i * n) div m            end_i = ((i + 1) * n + m - 1) div m         (int64, exact)

- average: the runtime ``P^T[j, i] = [start_i <= j < end_i] / len_i``, with membership tested as
  ``|n(2i+1) - m(2j+1)| < n + m`` (the same condition in one comparison) and each column divided by its
  count. Symbolic axes pooled to the same ``m`` (AdaptiveAvgPool2d(7): H and W) share ONE construction over
  ``j < max(n)``, stacked ``[max(n), m, axes]`` and sliced per axis (rows past an axis' ``n`` are zero); at
  small sizes the cost is these nodes' fixed overhead (~1 us each in onnxruntime), not arithmetic, so
  sharing them is what counts (AdaptiveAvgPool2d(7) at 10x10: 33 -> 26 nodes). Lengths are
  ``Shape(start, end)`` from opset 15, a Gather of ``Shape`` before. The last axis is ``x @ P^T`` (one
  GEMM); an earlier axis whose later dims are static and small
  (just pooled: 7, 5x7, ...) is one GEMM against ``kron(P^T, I)`` on the flattened tail, so no per-plane
  GEMMs are issued (those made this 3-7x slower than the static lowering on 512-channel inputs);
- max: the window table ``idx[i, k] = min(start_i + k, end_i - 1)`` for ``k = Range(0, kmax)``,
  ``kmax = ReduceMax(end - start)``; Gather along the axis, ReduceMax over the window dim (short windows
  repeat their last index, which changes no maximum). The pooled axes are moved in front of the others
  once (:class:`DynamicWindowMaxStep`), so no Gather runs along the last axis (element by element in
  onnxruntime). NaN/-inf handling is the base class' wrapper.

Axes whose output size is 1 become one ReduceMean/ReduceMax (exact for any ``n``); axes that follow the
input (torch's ``None``) are untouched; static axes of a partly symbolic node use constant matrices or
window tables. No Loop/If/Einsum: every op is in TensorRT's ONNX parser table. Range needs opset 11.
Max whose indices output is read: :class:`DynamicArgMaxStep`, the ``argmax`` lowering's construction over
runtime window tables (NaN and -inf handled there, no If on either target).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import ceil, prod
from typing import Sequence

import numpy as np

from .. import windows as W
from ..emit import Emitter, np_dtype
from . import cost as C
from .base import Lowering, axis_windows
from .steps import IdentityStep, ReduceStep, Step

Shape = tuple

# a guess for a symbolic length in cost estimates (the planner has no other candidate for these nodes)
_GUESS = 32


def _len(d) -> int:
    return d if isinstance(d, int) else _GUESS


def _scalar(em: Emitter, hint: str, v: int) -> str:
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


def runtime_pooling_matrices_t(em: Emitter, lengths: str, g: int, m: int, elem: int) -> str:
    """The ``P^T`` of ``g`` axes pooled to the same ``m``, in one computation from their runtime ``lengths``
    (1-D, ``[g]``): ``[n, m]`` for one axis; for several, stacked ``[nmax, m, g]`` over ``j < nmax = max(n)``
    (rows ``j >= n`` of an axis are all zero: no window holds them; slice them off with :func:`axis_rows`).

    Window membership in one comparison: ``start_i <= j < end_i`` iff ``i*n < (j+1)*m`` and
    ``j*m < (i+1)*n``, i.e. ``|n*(2i+1) - m*(2j+1)| < n + m`` (int64, exact); ``m*(2j+1)`` is
    ``Range(m, 2m*nmax, 2m)``. Each column is then divided by its count (the window length): the same
    correctly rounded ``1/len`` as the static matrices. 12 nodes, however many axes share them.
    """
    nmax = em.reduce("ReduceMax", lengths, [0], keepdims=0)  # a scalar, as Range needs
    odd_j = em.op("Range", [_scalar(em, "m", m), em.op("Mul", [nmax, _scalar(em, "two_m", 2 * m)]),
                            _scalar(em, "two_m", 2 * m)], hint="odd_j")  # m*(2j+1)
    odd_j = em.op("Reshape", [odd_j, em.ints("column", [-1, 1, 1] if g > 1 else [-1, 1])])
    odd_i = (2 * np.arange(m, dtype=np.int64) + 1).reshape((m, 1) if g > 1 else (m,))
    diff = em.op("Abs", [em.op("Sub", [em.op("Mul", [lengths, em.const("odd_i", odd_i)]), odd_j])])
    inside = em.op("Less", [diff, em.op("Add", [lengths, _scalar(em, "m", m)])], hint="inside")
    member = em.cast(inside, elem)
    count = em.reduce("ReduceSum", member, [0], keepdims=1)
    return em.op("Div", [member, count], hint="pool_matrices_t" if g > 1 else "pool_matrix_t")


def axis_rows(em: Emitter, stacked: str, q: int, n: str) -> str:
    """Axis ``q``'s ``P^T`` (``[n, m]``) out of :func:`runtime_pooling_matrices_t`' stacked ``[nmax, m, g]``."""
    rows = em.op("Slice", [stacked, em.ints("starts", [0]), n, em.ints("axes", [0])])
    return em.op("Gather", [rows, _scalar(em, "axis_index", q)], axis=2, hint="pool_matrix_t")


def kron_identity(em: Emitter, pt: str, m: int, t: int, elem: int) -> str:
    """``kron(P^T, I_t)`` (``[n*t, m*t]``) from ``P^T`` (``[n, m]``)."""
    eye = np.eye(t, dtype=np_dtype(elem)).reshape(1, t, 1, t)
    blocks = em.op("Reshape", [pt, em.ints("shape", [-1, 1, m, 1])])
    return em.op("Reshape", [em.op("Mul", [blocks, em.const("eye", eye)]), em.ints("shape", [-1, m * t])],
                 hint="kron_matrix_t")


# a non-last axis with static later dims of product t <= this is contracted as ONE GEMM against
# kron(P^T, I_t) (t times the multiply-adds, no per-plane GEMM calls); beyond it, one GEMM per plane
KRON_IDENTITY_MAX = 16


@dataclass(frozen=True)
class DynamicMatMulStep(Step):
    """Average along ``axes`` (absolute, each with its static length or None, and its output length m),
    the last axis first.

    The last axis: ``x @ P^T`` (one GEMM). An earlier axis whose later dims are static with product
    ``t <= KRON_IDENTITY_MAX`` (the usual case: they were just pooled to 7x7 or so): flatten from the axis
    on and multiply by ``kron(P^T, I_t)``, again one GEMM. Otherwise ``P @ x`` per plane (Reshape with
    ``0``/``-1``), or, with two symbolic later dims, Transposes around a last-axis MatMul. Static axes
    get constant matrices, symbolic ones runtime matrices.
    """

    axes: tuple[tuple[int, int | None, int], ...]  # (axis, n or None, m), in the order they are pooled
    rank: int

    def out_shape(self, shape):
        out = list(shape)
        for a, _, m in self.axes:
            out[a] = m
        return tuple(out)

    def _forms(self, shape) -> list[str]:
        """Per axis: "last" | "kron" | "planes" | "transpose"."""
        dims = list(shape)
        forms = []
        for a, _, m in self.axes:
            later = dims[a + 1:]
            if not later:
                forms.append("last")
            elif all(isinstance(d, int) for d in later) and prod(later) <= KRON_IDENTITY_MAX:
                forms.append("kron")
            elif sum(not isinstance(d, int) for d in later) <= 1:
                forms.append("planes")
            else:
                forms.append("transpose")
            dims[a] = m
        return forms

    def cost(self, shape, itemsize):
        c = 0.0
        cur = [_len(d) for d in shape]
        for (a, n, m), form in zip(self.axes, self._forms(shape)):
            t = prod(cur[a + 1:])
            lead = prod(cur[:a])
            nn = cur[a]
            if form == "kron":
                c += 3 * C.NODE + lead * nn * t * m * t / C.MAC_RATE + C.GEMM_CALL
            elif form == "planes":
                c += 3 * C.NODE + lead * nn * t * m / C.MAC_RATE + lead * C.GEMM_CALL
            else:
                c += C.NODE + lead * nn * t * m / C.MAC_RATE + C.GEMM_CALL
                if form == "transpose":
                    c += 2 * C.NODE + 2 * lead * (nn + m) * t * itemsize / C.BANDWIDTH
            c += lead * (nn + m) * t * itemsize / C.BANDWIDTH
            cur[a] = m
        # building the runtime matrices: 12 small nodes per output size m, 3 more per axis sharing them
        groups = Counter(m for _, n, m in self.axes if n is None)
        c += sum(12 + (3 * g if g > 1 else 1) for g in groups.values()) * C.NODE
        return c

    def emit(self, em, x, shape, elem):
        dims = list(shape)
        rank = len(dims)
        lengths = RuntimeLengths(em, x)
        # symbolic axes pooled to the same m share one runtime construction (see runtime_pooling_matrices_t)
        groups: dict[int, list[int]] = {}
        for a, n, m in self.axes:
            if n is None:
                groups.setdefault(m, []).append(a)
        stacked: dict[int, str] = {}

        def runtime_matrix_t(a: int, m: int) -> str:
            axes = sorted(groups[m])
            if m not in stacked:
                stacked[m] = runtime_pooling_matrices_t(em, lengths(axes), len(axes), m, elem)
            return stacked[m] if len(axes) == 1 else axis_rows(em, stacked[m], axes.index(a), lengths([a]))

        cur = x
        for (a, n, m), form in zip(self.axes, self._forms(shape)):
            later = dims[a + 1:]
            t = prod(later) if form == "kron" else 1

            def matrix_t(t=t, a=a, n=n, m=m):
                if n is None:
                    pt = runtime_matrix_t(a, m)
                    return pt if t == 1 else kron_identity(em, pt, m, t, elem)
                pt = W.pooling_matrix(n, m, dtype=np.float64).T
                return em.const("pool_matrix_t" if t == 1 else "kron_matrix_t",
                                np.kron(pt, np.eye(t)).astype(np_dtype(elem)))

            if form == "last":
                cur = em.op("MatMul", [cur, matrix_t()])
            elif form == "kron":
                flat = em.op("Reshape", [cur, em.ints("shape", [0] * a + [-1])])
                cur = em.op("MatMul", [flat, matrix_t()])
                cur = em.op("Reshape", [cur, em.ints("shape", [0] * a + [m] + later)])
            elif form == "planes":
                p = (em.op("Transpose", [matrix_t()], perm=[1, 0], hint="pool_matrix") if n is None else
                     em.const("pool_matrix", W.pooling_matrix(n, m, dtype=np.float64).astype(np_dtype(elem))))
                if a == rank - 2:
                    cur = em.op("MatMul", [p, cur])
                else:
                    flat = em.op("Reshape", [cur, em.ints("shape", [0] * a + [0, -1])])
                    cur = em.op("MatMul", [p, flat])
                    back = [d if isinstance(d, int) else -1 for d in later]
                    cur = em.op("Reshape", [cur, em.ints("shape", [0] * a + [m] + back)])
            else:
                perm = [b for b in range(rank) if b != a] + [a]
                cur = em.op("Transpose", [cur], perm=perm)
                cur = em.op("MatMul", [cur, matrix_t()])
                cur = em.op("Transpose", [cur], perm=[perm.index(b) for b in range(rank)])
            dims[a] = m
        return cur

    @property
    def ops(self):
        # every form a shape could take (the symbolic leading dims are not known here)
        out = {"MatMul", "Reshape", "Transpose"}
        if any(n is None for _, n, _ in self.axes):
            out |= {"Shape", "Gather", "Slice", "ReduceMax", "Range", "Mul", "Add", "Sub", "Abs", "Less", "Cast",
                    "ReduceSum", "Div"}
        return tuple(sorted(out))


def runtime_window_table(em: Emitter, n: str, m: int) -> tuple[str, str]:
    """The window table ``idx[i, k] = min(start_i + k, end_i - 1)`` (``[m, kmax]``, int64) of ``n -> m`` for a
    runtime length ``n`` (a 0-d int64 tensor), and ``kmax`` (0-d): short windows repeat their last index."""
    i = np.arange(m, dtype=np.int64).reshape(m, 1)
    m_ = _scalar(em, "m", m)
    start = em.op("Div", [em.op("Mul", [n, em.const("i", i)]), m_], hint="start")  # [m, 1]
    end = em.op("Div", [em.op("Add", [em.op("Mul", [n, em.const("i_plus_1", i + 1)]), _scalar(em, "m_minus_1", m - 1)]),
                        m_], hint="end")
    kmax = em.reduce("ReduceMax", em.op("Sub", [end, start], hint="length"), [0, 1], keepdims=0)
    k = em.op("Range", [_scalar(em, "zero", 0), kmax, _scalar(em, "one", 1)])  # [kmax]
    last = em.op("Sub", [end, _scalar(em, "one", 1)], hint="last")
    idx = em.op("Add", [start, k])  # [m, kmax]
    if em.opset >= 12:
        return em.op("Min", [idx, last], hint="window_table"), kmax
    # Min has no int64 before opset 12
    return em.op("Where", [em.op("Less", [idx, last]), idx, last], hint="window_table"), kmax


def runtime_window_tables(em: Emitter, lengths: str, m: int) -> str:
    """The window tables of ``g`` axes pooled to the same ``m`` from their runtime ``lengths`` (1-D, ``[g]``),
    in one computation: ``[m, kmax, g]`` with ``kmax`` the longest window of any of them (an axis with
    shorter windows repeats its last index further, which changes no maximum). Axis ``q``'s table is
    ``Gather(tables, q, axis=2)``: ~12 nodes for all of them instead of ~11 per axis."""
    i = np.arange(m, dtype=np.int64).reshape(m, 1, 1)
    m_ = _scalar(em, "m", m)
    start = em.op("Div", [em.op("Mul", [lengths, em.const("i", i)]), m_], hint="start")  # [m, 1, g]
    end = em.op("Div", [em.op("Add", [em.op("Mul", [lengths, em.const("i_plus_1", i + 1)]),
                                      _scalar(em, "m_minus_1", m - 1)]), m_], hint="end")
    kmax = em.reduce("ReduceMax", em.op("Sub", [end, start], hint="length"), [0, 1, 2], keepdims=0)
    k = em.unsqueeze(em.op("Range", [_scalar(em, "zero", 0), kmax, _scalar(em, "one", 1)]), [1])  # [kmax, 1]
    last = em.op("Sub", [end, _scalar(em, "one", 1)], hint="last")
    idx = em.op("Add", [start, k])  # [m, kmax, g]
    if em.opset >= 12:
        return em.op("Min", [idx, last], hint="window_tables")
    return em.op("Where", [em.op("Less", [idx, last]), idx, last], hint="window_tables")


@dataclass(frozen=True)
class DynamicWindowMaxStep(Step):
    """Max along ``axes`` ((axis, static n or None, m), earlier axes first): the pooled axes are moved in
    front of the others once, then per axis a Gather of its window table (runtime for a symbolic axis) and a
    ReduceMax over the window dim, and the result is moved back.

    In front, every Gather copies whole blocks of the other dims and every ReduceMax reduces a middle axis
    with the other dims inside (onnxruntime's Gather along the last axis copies element by element);
    measured 1x256x33x33 -> 8x8: 138-177 us against 186-214 us for per-axis Gathers in place with the last
    axis moved to the front for its own Gather.
    """

    axes: tuple[tuple[int, int | None, int], ...]

    def out_shape(self, shape):
        out = list(shape)
        for a, _, m in self.axes:
            out[a] = m
        return tuple(out)

    def cost(self, shape, itemsize):
        dims = [_len(d) for d in shape]
        total = prod(dims)
        c = 2 * C.NODE + (total + prod(_len(d) for d in self.out_shape(shape))) * 2 * itemsize / C.BANDWIDTH
        for a, n, m in self.axes:
            kmax = ceil(dims[a] / m) + 1
            gathered = total // dims[a] * m * kmax
            c += (2 + (12 if n is None else 0)) * C.NODE + gathered / C.GATHER_RATE + 2 * gathered * itemsize / C.BANDWIDTH
            total = total // dims[a] * m
            dims[a] = m
        return c

    def emit(self, em, x, shape, elem):
        rank = len(shape)
        first = min(a for a, _, _ in self.axes)
        pooled = list(range(first, rank))
        front = em.op("Transpose", [x], perm=pooled + list(range(first)))
        # symbolic axes pooled to the same m share one table construction (AdaptiveMaxPool2d(8): H and W)
        groups: dict[int, list[int]] = {}
        for a, n, m in self.axes:
            if n is None:
                groups.setdefault(m, []).append(a)
        lengths = RuntimeLengths(em, x)
        shared: dict[int, str] = {}
        g = front
        for a, n, m in self.axes:
            pos = a - first
            if n is None and len(groups[m]) > 1:
                if m not in shared:
                    shared[m] = runtime_window_tables(em, lengths(groups[m]), m)
                table = em.op("Gather", [shared[m], _scalar(em, "axis_index", groups[m].index(a))], axis=2,
                              hint="window_table")
            elif n is None:
                length = em.op("Gather", [em.op("Shape", [x]), _scalar(em, "axis", a)], axis=0)  # a scalar for Range
                table, _ = runtime_window_table(em, length, m)
            else:
                table = em.const("window_table", W.window_table(n, m))
            g = em.reduce("ReduceMax", em.op("Gather", [g, table], axis=pos), [pos + 1], keepdims=0)
        k = rank - first
        return em.op("Transpose", [g], perm=list(range(k, rank)) + list(range(k)))

    ops = ("Shape", "Gather", "Mul", "Add", "Div", "Sub", "ReduceMax", "Range", "Min", "Less", "Where", "Transpose",
           "Unsqueeze")


@dataclass(frozen=True)
class DynamicArgMaxStep(Step):
    """Max pooling WITH torch's indices over symbolic pooled axes: the ``argmax`` lowering's construction
    (:func:`~.argmax.emit_argmax`: every window gathered into one axis; the first maximum or the last NaN by
    position, no ArgMax with ``tie_safe``; values by GatherElements, bit for bit) with the window tables
    built from the runtime lengths (:func:`runtime_window_table`) and the flat-index table
    (``d*H*W + h*W + w`` of every window element) built from them too: per axis its table (or, for an axis
    that follows the input, ``Range(n)``) times its runtime stride, summed by broadcasting.

    ``m[j]`` is None where axis ``j`` keeps its length (torch's ``None``): it is not gathered, its window is
    the element itself. ``n[j]`` is None where the length is symbolic.
    """

    first_axis: int
    n: tuple[int | None, ...]
    m: tuple[int | None, ...]
    tie_safe: bool = False
    exact_non_finite = True  # NaN and all -inf windows as torch, without the NonFiniteMaxStep wrapper

    def out_shape(self, shape):
        f = self.first_axis
        return tuple(shape[:f]) + tuple(shape[f + j] if m is None else m for j, m in enumerate(self.m))

    def cost(self, shape, isz):
        f = self.first_axis
        lead = prod(_len(d) for d in shape[:f])
        outs = [_len(d) for d in self.out_shape(shape)[f:]]
        kmax = [1 if m is None else ceil(_len(shape[f + j]) / m) + 1 for j, m in enumerate(self.m)]
        gathered = lead * prod(outs) * prod(kmax)
        rows = lead * prod(outs)
        # argmax's passes (see ArgMaxStep.cost) + ~12 small nodes per symbolic table and the flat index
        return (14 * C.NODE + gathered / C.GATHER_RATE * len(self.m) + gathered * C.GATHER_BLOCK
                + 10 * gathered * isz / C.BANDWIDTH + 2 * rows * C.ARGMAX_ROW
                + (12 * sum(n is None for n in self.n) + 10) * C.NODE)

    @property
    def ops(self):
        from .argmax import ARGMAX_OPS

        tables = ("Div", "Sub", "Min", "Less")  # runtime_window_table (Where/Less before opset 12)
        return tuple(dict.fromkeys(ARGMAX_OPS + tables + (("Equal", "ReduceMin") if self.tie_safe else ("ArgMax",))))

    def emit_both(self, em, x, shape, elem, y, indices):
        from .argmax import emit_argmax

        lead, k = self.first_axis, len(self.m)
        lengths: dict[int, str] = {}
        shape_of_x: list[str] = []

        def length(j: int) -> str:  # axis j's length as a 0-d int64 tensor
            if j not in lengths:
                if isinstance(self.n[j], int):
                    lengths[j] = _scalar(em, "n", self.n[j])
                else:
                    if not shape_of_x:
                        shape_of_x.append(em.op("Shape", [x]))
                    lengths[j] = em.op("Gather", [shape_of_x[0], _scalar(em, "axis", lead + j)], axis=0,
                                       hint="length")
            return lengths[j]

        def product(factors: list[int | str]) -> int | str:
            static = prod(f for f in factors if isinstance(f, int))
            out: int | str = static
            for f in factors:
                if isinstance(f, str):
                    out = f if out == 1 else em.op("Mul", [out if isinstance(out, str) else _scalar(em, "factor", out), f])
            return out

        changed = [j for j in range(k) if self.m[j] is not None]
        tables: dict[int, str | np.ndarray] = {}
        kmax: dict[int, int | str] = {}
        for j in changed:
            if isinstance(self.n[j], int):
                tables[j] = W.window_table(self.n[j], self.m[j])
                kmax[j] = int(tables[j].shape[1])
            else:
                tables[j], kmax[j] = runtime_window_table(em, length(j), self.m[j])
        kall = product([kmax[j] for j in changed])
        n_out = product([self.m[j] if j in tables else
                         (self.n[j] if isinstance(self.n[j], int) else length(j)) for j in range(k)])

        flat = None
        if indices:
            # flat input index of every (output position, window element): sum_j coordinate_j * stride_j,
            # laid out [out_1..out_k, kmax_c...] (output-major, each part row-major), as emit_argmax reads it
            c_count = len(changed)
            rank = c_count + k
            terms: list[str] = []
            stride: int | str = 1
            for j in reversed(range(k)):
                dims = [1] * rank
                if j in tables:
                    t = tables[j]
                    coord = em.const(f"window_table_{j}", t) if isinstance(t, np.ndarray) else t
                    dims[j], dims[k + changed.index(j)] = self.m[j], -1
                else:
                    coord = (em.ints("coordinate", range(self.n[j])) if isinstance(self.n[j], int) else
                             em.op("Range", [_scalar(em, "zero", 0), length(j), _scalar(em, "one", 1)],
                                   hint="coordinate"))
                    dims[j] = -1
                coord = em.op("Reshape", [coord, em.ints("shape", dims)])
                terms.append(coord if stride == 1 else
                             em.op("Mul", [coord, stride if isinstance(stride, str) else _scalar(em, "stride", stride)]))
                if j > 0:
                    stride = product([stride, self.n[j] if isinstance(self.n[j], int) else length(j)])
            acc = terms[0]
            for t in terms[1:]:
                acc = em.op("Add", [acc, t])
            flat = em.op("Reshape", [acc, em.ints("flat", [-1])], hint="flat_index")
        table_names = [None if j not in tables else
                       (em.const(f"window_table_{j}", tables[j]) if isinstance(tables[j], np.ndarray) else tables[j])
                       for j in range(k)]
        emit_argmax(em, x, len(shape), table_names, kall, n_out, elem, self.tie_safe, y, indices, flat)

class DynamicLowering(Lowering):
    name = "dynamic"
    summary = "windows computed at run time from Shape: runtime pooling matrices (avg) or window tables (max)"
    dynamic = True
    min_opset = 11  # Range

    computes_indices = True

    def check(self, spec):
        if spec.static:
            return "every pooled axis is static (the dynamic lowering is for symbolic sizes)"
        if spec.opset < self.min_opset:
            return f"needs opset {self.min_opset} (Range) for symbolic sizes, the model has {spec.opset}"
        return super().check(spec)

    def _steps(self, spec):
        if spec.node.indices_output:  # a max whose indices are read
            axes = axis_windows(spec)
            return [DynamicArgMaxStep(spec.ndim - spec.k, tuple(a.n if isinstance(a.n, int) else None for a in axes),
                                      tuple(None if a.keep else a.m for a in axes), tie_safe=spec.target == "tensorrt")]
        changed = [a for a in axis_windows(spec) if not a.keep]
        if not changed:
            return [IdentityStep()]
        steps: list[Step] = []
        reduce = tuple(a.axis for a in changed if a.m == 1)
        if reduce:
            steps.append(ReduceStep("ReduceMean" if spec.kind == "avg" else "ReduceMax", reduce))
        rest = sorted((a for a in changed if a.m != 1), key=lambda a: -a.axis)  # last axis first
        if not rest:
            return steps
        if spec.kind == "avg":
            steps.append(DynamicMatMulStep(tuple((a.axis, a.n if isinstance(a.n, int) else None, a.m)
                                                 for a in rest), spec.ndim))
            return steps
        # max: all changed axes in one step, earlier axes first (see DynamicWindowMaxStep)
        steps.append(DynamicWindowMaxStep(tuple((a.axis, a.n if isinstance(a.n, int) else None, a.m)
                                                for a in sorted(rest, key=lambda a: a.axis))))
        return steps

    def build(self, em, spec, x, y, indices=None):
        if spec.node.indices_output:
            from .argmax import build_with_indices

            return build_with_indices(em, spec, self._steps(spec)[0], x, y, indices)
        return super().build(em, spec, x, y, indices)

    def steps(self, spec):
        inner = self._steps(spec)
        if len(inner) == 1 and isinstance(inner[0], IdentityStep):
            return inner  # no casts around a copy
        return super().steps(spec)

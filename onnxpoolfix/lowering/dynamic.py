"""Symbolic pooled axes: the windows are computed in the graph from the runtime length ``n`` (the bounds and
max pooling's window tables: :mod:`.runtime_windows`; the max steps: :mod:`.dynamic_max`; docs/dynamic-sizes.md).

- average: the runtime ``P^T`` (:func:`runtime_pooling_matrices_t`). Symbolic axes pooled to the same ``m``
  (AdaptiveAvgPool2d(7): H and W) share ONE construction: at small sizes the cost is these nodes' fixed
  overhead (~1 us each in onnxruntime), not arithmetic, so sharing them is what counts (AdaptiveAvgPool2d(7) at
  10x10: 33 -> 26 nodes). The last axis is ``x @ P^T`` (one GEMM); an earlier axis whose later dims are static
  and small (just pooled: 7, 5x7, ...) is one GEMM against ``kron(P^T, I)`` on the flattened tail, so no
  per-plane GEMMs are issued (those made this 3-7x slower than the static lowering on 512-channel inputs);
- max: :class:`~.dynamic_max.DynamicWindowMaxStep`, or where the indices output is read
  :class:`~.dynamic_max.DynamicArgMaxStep` (NaN and -inf handled there).

Axes whose output size is 1 become one ReduceMean/ReduceMax (exact for any ``n``); axes that follow the
input (torch's ``None``) are untouched; static axes of a partly symbolic node use constant matrices or
window tables. No Loop/Einsum, no If for TensorRT: every op is in TensorRT's ONNX parser table. Range needs opset 11.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import prod

import numpy as np

from .. import windows as W
from ..graph.emit import Emitter, np_dtype
from ..reason import needs_opset
from ..spec import RuntimeDim
from . import cost as C
from .argmax import build_with_indices
from .base import Lowering, axis_windows
from .dynamic_max import DynamicArgMaxStep, DynamicWindowMaxStep
from .runtime_windows import RuntimeLengths, guess_len, int64_scalar, out_dim, runtime_size
from .steps import KRON_IDENTITY_MAX, IdentityStep, ReduceStep, Step, reshape_keep


def largest(em: Emitter, lengths: str) -> str:
    """The largest of 1-D ``lengths``, a 0-d tensor as Range needs: ``Gather(lengths, ArgMax(lengths))``, not a
    ReduceMax, whose axes are an input from opset 18, and onnxruntime's symbolic shape inference (which its
    ``quant_pre_process`` runs) leaves such a ReduceMax's output without a shape and then fails on the Mul after
    it (review24)."""
    return em.op("Gather", [lengths, em.op("ArgMax", [lengths], axis=0, keepdims=0)], axis=0, hint="largest")


def runtime_pooling_matrices_t(em: Emitter, lengths: str, g: int, m: int, elem: int) -> str:
    """The ``P^T`` of ``g`` axes pooled to the same ``m``, in one computation from their runtime ``lengths``
    (1-D, ``[g]``): ``[n, m]`` for one axis; for several, stacked ``[nmax, m, g]`` over ``j < nmax = max(n)``
    (rows ``j >= n`` of an axis are all zero: no window holds them; slice them off with :func:`axis_rows`).

    Window membership in one comparison: ``start_i <= j < end_i`` iff ``i*n < (j+1)*m`` and
    ``j*m < (i+1)*n``, i.e. ``|n*(2i+1) - m*(2j+1)| < n + m`` (int64, exact); ``m*(2j+1)`` is
    ``Range(m, 2m*nmax, 2m)``. Each column is then divided by its count (the window length): the same
    correctly rounded ``1/len`` as the static matrices. 12 nodes, however many axes share them.
    """
    nmax = largest(em, lengths)
    odd_j = em.op("Range", [int64_scalar(em, "m", m), em.op("Mul", [nmax, int64_scalar(em, "two_m", 2 * m)]),
                            int64_scalar(em, "two_m", 2 * m)], hint="odd_j")  # m*(2j+1)
    odd_j = em.op("Reshape", [odd_j, em.ints("column", [-1, 1, 1] if g > 1 else [-1, 1])])
    odd_i = (2 * np.arange(m, dtype=np.int64) + 1).reshape((m, 1) if g > 1 else (m,))
    diff = em.op("Abs", [em.op("Sub", [em.op("Mul", [lengths, em.const("odd_i", odd_i)]), odd_j])])
    inside = em.op("Less", [diff, em.op("Add", [lengths, int64_scalar(em, "m", m)])], hint="inside")
    member = em.zero_one(inside, elem)
    count = em.reduce("ReduceSum", member, [0], keepdims=1)
    return em.op("Div", [member, count], hint="pool_matrices_t" if g > 1 else "pool_matrix_t")


def runtime_size_matrix_t(em: Emitter, n: str, m: str, elem: int) -> str:
    """``P^T`` (``[n, m]``) of ``n -> m`` where the output length ``m`` is a runtime 0-d int64 tensor too (the
    graph computed it from the input's size) and ``n`` a 0-d int64 tensor: the membership test of
    :func:`runtime_pooling_matrices_t` with ``2i+1`` from ``Range(m)`` instead of a constant."""
    zero, one, two = int64_scalar(em, "zero", 0), int64_scalar(em, "one", 1), int64_scalar(em, "two", 2)
    # m*(2j+1), the Range's step not m (m = 0 is an empty output, as torch gives for floor(n * scale) = 0)
    odd_j = em.op("Range", [one, em.op("Mul", [n, two]), two], hint="odd_j")
    odd_j = em.unsqueeze(em.op("Mul", [odd_j, m]), [1])
    odd_i = em.op("Add", [em.op("Mul", [em.op("Range", [zero, m, one]), two]), one], hint="odd_i")  # 2i+1
    diff = em.op("Abs", [em.op("Sub", [em.op("Mul", [n, odd_i]), odd_j])])
    inside = em.op("Less", [diff, em.op("Add", [n, m])], hint="inside")
    member = em.zero_one(inside, elem)
    count = em.reduce("ReduceSum", member, [0], keepdims=1)
    return em.op("Div", [member, count], hint="pool_matrix_t")


def axis_rows(em: Emitter, stacked: str, q: int, n: str) -> str:
    """Axis ``q``'s ``P^T`` (``[n, m]``) out of :func:`runtime_pooling_matrices_t`' stacked ``[nmax, m, g]``."""
    rows = em.op("Slice", [stacked, em.ints("starts", [0]), n, em.ints("axes", [0])])
    return em.op("Gather", [rows, int64_scalar(em, "axis_index", q)], axis=2, hint="pool_matrix_t")


def kron_identity(em: Emitter, pt: str, m: int, t: int, elem: int) -> str:
    """``kron(P^T, I_t)`` (``[n*t, m*t]``) from ``P^T`` (``[n, m]``)."""
    eye = np.eye(t, dtype=np_dtype(elem)).reshape(1, t, 1, t)
    blocks = em.op("Reshape", [pt, em.ints("shape", [-1, 1, m, 1])])
    return em.op("Reshape", [em.op("Mul", [blocks, em.const("eye", eye)]), em.ints("shape", [-1, m * t])],
                 hint="kron_matrix_t")



def _shape_part(em, shape: str, start: int, end: int) -> str:
    """``shape[start:end]`` of a Shape output (int64)."""
    return em.op("Slice", [shape, em.ints("start", [start]), em.ints("end", [end])])


@dataclass(frozen=True)
class DynamicMatMulStep(Step):
    """Average along ``axes`` (absolute, each with its static length or None, and its output length m), the
    last axis first: ``x @ P^T``; an earlier axis whose later dims are static with product ``t <=
    KRON_IDENTITY_MAX`` one GEMM against ``kron(P^T, I_t)`` (module docstring); else ``P @ x`` per plane (Reshape
    with ``0``/``-1``) or, with two symbolic later dims, Transposes around a last-axis MatMul. Static axes get
    constant matrices, symbolic ones runtime matrices."""

    axes: tuple[tuple[int, int | None, int], ...]  # (axis, n or None, m), in the order they are pooled

    def out_shape(self, shape):
        out = list(shape)
        for a, _, m in self.axes:
            out[a] = out_dim(m)
        return tuple(out)

    def _forms(self, shape) -> list[str]:
        """Per axis: "last" | "kron" | "planes" | "transpose"."""
        dims = list(shape)
        forms = []
        for a, _, m in self.axes:
            later = dims[a + 1:]
            runtime_m = isinstance(m, RuntimeDim)  # no Reshape can spell its length: no kron, no flat planes
            if not later:
                forms.append("last")
            elif all(isinstance(d, int) for d in later) and prod(later) <= KRON_IDENTITY_MAX and not runtime_m:
                forms.append("kron")
            elif sum(not isinstance(d, int) for d in later) <= 1 and (not runtime_m or a == len(dims) - 2):
                forms.append("planes")
            else:
                forms.append("transpose")
            dims[a] = out_dim(m)
        return forms

    def cost(self, shape, itemsize):
        c = 0.0
        cur = [guess_len(d) for d in shape]
        for (a, n, m), form in zip(self.axes, self._forms(shape)):
            m = guess_len(m)
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
        groups = Counter(m for _, n, m in self.axes if n is None or isinstance(m, RuntimeDim))
        c += sum(12 + (3 * g if g > 1 else 1) for g in groups.values()) * C.NODE
        return c

    def emit(self, em, x, shape, elem):
        dims = list(shape)
        rank = len(dims)
        lengths = RuntimeLengths(em, x)
        # symbolic axes pooled to the same m share one runtime construction (see runtime_pooling_matrices_t)
        groups: dict[int, list[int]] = {}
        for a, n, m in self.axes:
            if n is None and isinstance(m, int):
                groups.setdefault(m, []).append(a)
        stacked: dict[int, str] = {}

        def runtime_matrix_t(a: int, n: int | None, m: int | RuntimeDim) -> str:
            if isinstance(m, RuntimeDim):  # one axis, its own construction
                length = (int64_scalar(em, "n", n) if isinstance(n, int) else
                          largest(em, lengths([a])))
                return runtime_size_matrix_t(em, length, runtime_size(em, m), elem)
            axes = sorted(groups[m])
            if m not in stacked:
                stacked[m] = runtime_pooling_matrices_t(em, lengths(axes), len(axes), m, elem)
            return stacked[m] if len(axes) == 1 else axis_rows(em, stacked[m], axes.index(a), lengths([a]))

        cur = x
        for (a, n, m), form in zip(self.axes, self._forms(shape)):
            later = dims[a + 1:]
            t = prod(later) if form == "kron" else 1

            def matrix_t(t=t, a=a, n=n, m=m):
                if n is None or isinstance(m, RuntimeDim):
                    pt = runtime_matrix_t(a, n, m)
                    return pt if t == 1 else kron_identity(em, pt, m, t, elem)
                pt = W.pooling_matrix(n, m, dtype=np.float64).T
                return em.weights("pool_matrix_t" if t == 1 else "kron_matrix_t", np.kron(pt, np.eye(t)), elem)

            if form == "last":
                cur = em.op("MatMul", [cur, matrix_t()])
            elif form == "kron":
                symbolic_lead = [b for b in range(a) if not isinstance(dims[b], int)]
                if len(symbolic_lead) == 1:
                    # a Reshape that copies a leading dim (0) and infers another (-1) fails in onnxruntime when
                    # the copied dim is 0 (batch 0: nothing to infer from): Flatten, and infer the one
                    # symbolic leading dim on the way back (the other dims are static, never 0)
                    flat = em.op("Flatten", [cur], axis=a)
                    cur = em.op("MatMul", [flat, matrix_t()])
                    back = [-1 if b in symbolic_lead else dims[b] for b in range(a)]
                    cur = em.op("Reshape", [cur, em.ints("shape", back + [m] + later)])
                elif symbolic_lead:  # several: the targets spelled from the runtime shape
                    shape_now = em.op("Shape", [cur])
                    lead = _shape_part(em, shape_now, 0, a)
                    tail = em.reduce("ReduceProd", _shape_part(em, shape_now, a, rank), [0], keepdims=1)
                    flat = em.op("Reshape", [cur, em.op("Concat", [lead, tail], axis=0)])
                    cur = em.op("MatMul", [flat, matrix_t()])
                    cur = em.op("Reshape", [cur, em.op("Concat", [lead, em.ints("shape", [m] + later)], axis=0)])
                else:
                    flat = reshape_keep(em, cur, a, [-1])
                    cur = em.op("MatMul", [flat, matrix_t()])
                    cur = reshape_keep(em, cur, a, [m] + later)
            elif form == "planes":
                p = (em.op("Transpose", [matrix_t()], perm=[1, 0], hint="pool_matrix")
                     if n is None or isinstance(m, RuntimeDim) else
                     em.weights("pool_matrix", W.pooling_matrix(n, m, dtype=np.float64), elem))
                if a == rank - 2:
                    cur = em.op("MatMul", [p, cur])
                elif (sum(not isinstance(d, int) for d in dims[:a]) == 1
                      and all(isinstance(d, int) for d in later)):  # batch 0: -1 at the symbolic leading dim
                    sym = next(b for b in range(a) if not isinstance(dims[b], int))
                    flat_shape = [-1 if b == sym else 0 for b in range(a + 1)] + [prod(later)]
                    flat = em.op("Reshape", [cur, em.ints("shape", flat_shape)])
                    cur = em.op("MatMul", [p, flat])
                    back = [-1 if b == sym else 0 for b in range(a)] + [m] + list(later)
                    cur = em.op("Reshape", [cur, em.ints("shape", back)])
                elif any(not isinstance(d, int) for d in dims[:a]):  # several unknowns: the runtime shape
                    shape_now = em.op("Shape", [cur])
                    lead, length = _shape_part(em, shape_now, 0, a), _shape_part(em, shape_now, a, a + 1)
                    later_shape = _shape_part(em, shape_now, a + 1, rank)
                    plane = em.reduce("ReduceProd", later_shape, [0], keepdims=1)
                    flat = em.op("Reshape", [cur, em.op("Concat", [lead, length, plane], axis=0)])
                    cur = em.op("MatMul", [p, flat])
                    cur = em.op("Reshape", [cur, em.op("Concat", [lead, em.ints("m", [m]), later_shape], axis=0)])
                else:
                    flat = reshape_keep(em, cur, a, [0, -1])
                    cur = em.op("MatMul", [p, flat])
                    back = [d if isinstance(d, int) else -1 for d in later]
                    cur = reshape_keep(em, cur, a, [m] + back)
            else:
                perm = [b for b in range(rank) if b != a] + [a]
                cur = em.op("Transpose", [cur], perm=perm)
                cur = em.op("MatMul", [cur, matrix_t()])
                cur = em.op("Transpose", [cur], perm=[perm.index(b) for b in range(rank)])
            dims[a] = out_dim(m)
        return cur

    @property
    def ops(self):
        # every form a shape could take (the symbolic leading dims are not known here)
        out = {"MatMul", "Reshape", "Transpose", "Flatten", "Shape", "Slice", "Concat", "ReduceProd"}  # (batch 0)
        if any(n is None or isinstance(m, RuntimeDim) for _, n, m in self.axes):
            out |= {"Shape", "Gather", "Slice", "ReduceMax", "Range", "Mul", "Add", "Sub", "Abs", "Less", "Cast",
                    "Where", "ReduceSum", "Div", "Unsqueeze", "ArgMax"}
        return tuple(sorted(out))


class DynamicLowering(Lowering):
    name = "dynamic"
    summary = "windows computed at run time from Shape: runtime pooling matrices (avg) or window tables (max)"
    dynamic = True
    min_opset = 11  # Range

    computes_indices = True

    def check(self, spec):
        if spec.static:
            return "every pooled axis is static (the dynamic lowering is for symbolic sizes)"
        if spec.target == "portable":
            # its Shape/Range window arithmetic: tract, TVM, onnx2tf and ncnn (pnnx) refuse it (issue 33)
            return ("not portable: runtime windows (Range, runtime pooling matrices and window tables) are what "
                    "tract, TVM, onnx2tf and ncnn refuse; window_slices is the portable target's form")
        if spec.opset < self.min_opset:
            return needs_opset(self.min_opset,
                               f"needs opset {self.min_opset} (Range) for symbolic sizes, the model has {spec.opset}")
        return super().check(spec)

    def _steps(self, spec):
        def m_of(a):  # the output length: an int, or the graph's runtime size entry
            size = spec.node.output_size[a.axis - (spec.ndim - spec.k)]
            return size if isinstance(size, RuntimeDim) else a.m

        def n_of(a):
            return a.n if isinstance(a.n, int) else None

        if spec.node.indices_output:  # a max whose indices are read
            axes = axis_windows(spec)
            return [DynamicArgMaxStep(spec.ndim - spec.k, tuple(n_of(a) for a in axes),
                                      tuple(None if a.keep else m_of(a) for a in axes),
                                      tie_safe=spec.target == "tensorrt")]
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
            steps.append(DynamicMatMulStep(tuple((a.axis, n_of(a), m_of(a)) for a in rest)))
            return steps
        # max: all changed axes in one step, earlier axes first (see DynamicWindowMaxStep)
        steps.append(DynamicWindowMaxStep(tuple((a.axis, n_of(a), m_of(a)) for a in sorted(rest, key=lambda a: a.axis)),
                                          by_size=spec.target != "tensorrt"))
        return steps

    def build(self, em, spec, x, y, indices=None):
        if spec.node.indices_output:
            return build_with_indices(em, spec, self._steps(spec)[0], x, y, indices)
        return super().build(em, spec, x, y, indices)

    def steps(self, spec):
        inner = self._steps(spec)
        if len(inner) == 1 and isinstance(inner[0], IdentityStep):
            return inner  # no casts around a copy
        return super().steps(spec)

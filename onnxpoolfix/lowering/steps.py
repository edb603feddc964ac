"""The building blocks every lowering is made of, each with its cost and its emission.

A lowering is a list of :class:`Step` s applied in order to the pooled tensor. Each step knows how to
estimate its cost on a given shape (``cost``) and how to emit its ONNX nodes (``emit``), so the planner's
estimate and the emitted graph can never disagree about what runs.

Shapes here are tuples of ``int`` (static) or ``str``/``None`` (symbolic leading dims: a static lowering
only needs the pooled axes to be static; leading dims are copied with Reshape's ``0``).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod
from typing import ClassVar, Sequence

import numpy as np
from onnx import GraphProto, TensorProto

from .. import windows as W
from ..emit import Emitter, np_dtype
from . import cost as C

Shape = tuple


def _static(d) -> int:
    return d if isinstance(d, int) else 1


def _elems(shape: Shape) -> int:
    return prod(_static(d) for d in shape)


def _gather_cost(out_shape: Shape, axis: int) -> float:
    """A Gather along ``axis`` producing ``out_shape``: elements copied plus one block per contiguous run
    (the dims after the axis): a last-axis Gather copies element by element."""
    out = _elems(out_shape)
    inner = _elems(out_shape[axis + 1:]) if axis + 1 < len(out_shape) else 1
    return out / C.GATHER_RATE + out / max(inner, 1) * C.GATHER_BLOCK


def _gemm_seconds(macs: float, n_cols: int) -> float:
    """GEMM time: narrow outputs (fewer than NARROW_N columns) waste part of every column strip."""
    return macs / (C.MAC_RATE * min(1.0, max(n_cols, 1) / C.NARROW_N))


def _reshape_keep(em: Emitter, x: str, keep: int, tail: Sequence[int]) -> str:
    """Reshape keeping the first ``keep`` dims as they are (``0`` copies a dim, even a symbolic one)."""
    return em.op("Reshape", [x, em.ints("shape", [0] * keep + list(tail))])


@dataclass(frozen=True)
class Step:
    #: computes torch's max on NaN and all -inf windows itself (else max steps get the NonFiniteMaxStep wrapper)
    exact_non_finite: ClassVar[bool] = False

    def out_shape(self, shape: Shape) -> Shape:
        raise NotImplementedError

    def cost(self, shape: Shape, itemsize: int) -> float:
        raise NotImplementedError

    def emit(self, em: Emitter, x: str, shape: Shape, elem: int) -> str:
        raise NotImplementedError

    @property
    def ops(self) -> tuple[str, ...]:
        """The ONNX op types this step emits (for reports and the TensorRT target)."""
        raise NotImplementedError


class OneAxisStep(Step):
    """A step that maps one axis (``self.axis``) to length ``self.m`` and leaves the others."""

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = self.m
        return tuple(out)


@dataclass(frozen=True)
class IdentityStep(Step):
    def out_shape(self, shape):
        return shape

    def cost(self, shape, itemsize):
        return C.NODE

    def emit(self, em, x, shape, elem):
        return em.op("Identity", [x])

    ops = ("Identity",)


@dataclass(frozen=True)
class CastStep(Step):
    to: int

    def out_shape(self, shape):
        return shape

    def cost(self, shape, itemsize):
        return C.NODE + _elems(shape) * 6 / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        return em.cast(x, self.to)

    ops = ("Cast",)


@dataclass(frozen=True)
class ReduceStep(Step):
    """Global pooling over ``axes`` (output length 1): ReduceMean / ReduceMax with keepdims."""

    op_type: str  # ReduceMean | ReduceMax
    axes: tuple[int, ...]

    def out_shape(self, shape):
        return tuple(1 if a in self.axes else d for a, d in enumerate(shape))

    def cost(self, shape, itemsize):
        return C.NODE + _elems(shape) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        return em.reduce(self.op_type, x, self.axes, keepdims=1)

    @property
    def ops(self):
        return (self.op_type,)


@dataclass(frozen=True)
class PoolStep(Step):
    """One AveragePool/MaxPool over all spatial axes (input rank k+2): uniform windows on ``windows``'
    axes, kernel 1 stride 1 elsewhere. Exact because every window has one length and one stride."""

    op_type: str  # AveragePool | MaxPool
    first_spatial: int  # absolute index of the first spatial axis (always 2: N, C first)
    windows: tuple[tuple[int, W.Uniform], ...]  # (absolute axis, kernel/stride)

    def _ks(self, shape):
        u = dict(self.windows)
        axes = range(self.first_spatial, len(shape))
        return [u[a].kernel if a in u else 1 for a in axes], [u[a].stride if a in u else 1 for a in axes]

    def out_shape(self, shape):
        k, s = self._ks(shape)
        out = list(shape)
        for j, a in enumerate(range(self.first_spatial, len(shape))):
            out[a] = (shape[a] - k[j]) // s[j] + 1
        return tuple(out)

    def cost(self, shape, itemsize):
        k, _ = self._ks(shape)
        out = _elems(self.out_shape(shape))
        rate = C.POOL_RATE_3D if len(shape) - self.first_spatial >= 3 else C.POOL_RATE
        big = _elems(shape) * C.POOL_OUT_OF_CACHE if _elems(shape) * itemsize > C.CACHE_BYTES else 0.0
        return C.NODE + out * prod(k) / rate + big + (_elems(shape) + out) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        k, s = self._ks(shape)
        return em.op(self.op_type, [x], kernel_shape=k, strides=s)

    @property
    def ops(self):
        return (self.op_type,)


@dataclass(frozen=True)
class ResizeStep(Step):
    """Integer upsampling by ``q`` on some axes: nearest, asymmetric, floor (x_in = floor(i / q))."""

    factors: tuple[tuple[int, int], ...]  # (absolute axis, q)

    def out_shape(self, shape):
        f = dict(self.factors)
        return tuple(d * f[a] if a in f else d for a, d in enumerate(shape))

    def cost(self, shape, itemsize):
        return C.NODE + _elems(self.out_shape(shape)) * itemsize * 2 / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        f = dict(self.factors)
        return em.resize_nearest(x, [float(f.get(a, 1)) for a in range(len(shape))])

    ops = ("Resize",)


@dataclass(frozen=True)
class GatherStep(Step):
    """``Gather(x, idx, axis)`` with a constant index vector: integer upsampling (``idx = i // q``) where
    Resize has no kernel for the dtype, or any pure selection of input positions."""

    axis: int
    indices: tuple[int, ...]
    hint: str = "gather"

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = len(self.indices)
        return tuple(out)

    def cost(self, shape, itemsize):
        return C.NODE + _gather_cost(self.out_shape(shape), self.axis)

    def emit(self, em, x, shape, elem):
        idx = em.ints(f"{self.hint}_indices", self.indices)
        return em.op("Gather", [x, idx], axis=self.axis)

    ops = ("Gather",)


@dataclass(frozen=True)
class MatMulStep(OneAxisStep):
    """Average along one axis as ``P @ x``: the general exact form (any n -> m).

    Last axis: ``x @ P^T`` (one big GEMM). Second-to-last: ``P @ x`` (one GEMM per plane). Earlier axes:
    reshape so the axis is second-to-last, multiply, reshape back.

    Block form: with g = gcd(n, m) > 1 the windows repeat every p = n/g inputs and q = m/g outputs, and no
    window crosses a period (window i ends at ceil((i+1)p/q) <= p within its period), so P is
    block-diagonal, ``I_g (x) P[:q, :p]``. Reshaping the axis to [g, p] and multiplying by the small block
    does g times fewer multiply-adds (1D 1000 -> 30: 3.2 ms -> 2.0 ms). Used where the cost model says so.
    """

    axis: int
    n: int
    m: int

    def _cost(self, shape, itemsize, g: int) -> float:
        pos = len(shape) - 1 - self.axis
        q = self.m // g
        macs = _elems(shape) * q  # every input element meets the q columns of its block
        out = _elems(self.out_shape(shape))
        # x @ P^T: q output columns; P @ x: the plane's columns, and x (the B operand) is packed per call
        cols = q if pos == 0 else _elems(shape[self.axis + 1:])
        pack = 0.0 if pos == 0 else _elems(shape) * C.PACK_ELEM
        calls = 1 if pos == 0 else _elems(shape[: self.axis]) * g
        nodes = 1 if pos < 2 and g == 1 else 3
        return (C.NODE * nodes + _gemm_seconds(macs, cols) + pack + calls * C.GEMM_CALL
                + (_elems(shape) + out) * itemsize / C.BANDWIDTH)

    def period(self, shape) -> int:
        """g for the block form, 1 for the full matrix: whichever the cost model prefers."""
        g = gcd(self.n, self.m)
        return g if g > 1 and self._cost(shape, 4, g) < self._cost(shape, 4, 1) else 1

    def cost(self, shape, itemsize):
        return self._cost(shape, itemsize, self.period(shape))

    def emit(self, em, x, shape, elem):
        g = self.period(shape)
        n, m = self.n // g, self.m // g
        p = W.pooling_matrix(self.n, self.m, dtype=np.float64)[:m, :n].astype(np_dtype(elem))
        pos = len(shape) - 1 - self.axis
        tail = list(shape[self.axis + 1:])
        if g == 1 and pos == 0:
            return em.op("MatMul", [x, em.const("pool_matrix_t", p.T)])
        if g == 1 and pos == 1:
            return em.op("MatMul", [em.const("pool_matrix", p), x])
        if pos == 0:
            blocks = _reshape_keep(em, x, self.axis, [g, n])
            y = em.op("MatMul", [blocks, em.const("pool_block_t", p.T)])
        else:
            blocks = _reshape_keep(em, x, self.axis, ([g] if g > 1 else []) + [n, -1])
            y = em.op("MatMul", [em.const("pool_block" if g > 1 else "pool_matrix", p), blocks])
        return _reshape_keep(em, y, self.axis, [self.m] + tail)

    @property
    def ops(self):
        return ("MatMul",)


@dataclass(frozen=True)
class KroneckerStep(Step):
    """All pooled axes at once: flatten them, one MatMul against ``kron(P_1, ..., P_k)^T``.

    One GEMM for the whole tensor; the matrix has prod(in) * prod(out) entries, so it wins on small planes.
    """

    first_axis: int
    n: tuple[int, ...]
    m: tuple[int, ...]

    def out_shape(self, shape):
        return tuple(shape[: self.first_axis]) + self.m

    def matrix_entries(self) -> int:
        return prod(self.n) * prod(self.m)

    def cost(self, shape, itemsize):
        planes = _elems(shape[: self.first_axis])
        macs = planes * self.matrix_entries()
        out = _elems(self.out_shape(shape))
        return (3 * C.NODE + _gemm_seconds(macs, prod(self.m)) + C.GEMM_CALL
                + (_elems(shape) + out + self.matrix_entries()) * itemsize / C.BANDWIDTH)

    def emit(self, em, x, shape, elem):
        k = np.ones((1, 1))
        for n, m in zip(self.n, self.m):
            k = np.kron(k, W.pooling_matrix(n, m, dtype=np.float64))
        flat = _reshape_keep(em, x, self.first_axis, [-1])
        y = em.op("MatMul", [flat, em.const("kron_matrix_t", k.T.astype(np_dtype(elem)))])
        return _reshape_keep(em, y, self.first_axis, list(self.m))

    ops = ("Reshape", "MatMul")


@dataclass(frozen=True)
class MaxPoolGatherStep(OneAxisStep):
    """Max along one axis with non-uniform windows: ``M = MaxPool(kmin, stride 1)``, then
    ``max(M[start_i], M[end_i - kmin])``. Exact: every window is covered by those two kmin-windows because
    the longest window is at most twice the shortest. Needs the input to be N, C, spatial."""

    axis: int
    first_spatial: int
    n: int
    m: int

    def _parts(self):
        w = W.windows(self.n, self.m)
        kmin = min(e - s for s, e in w)
        starts = tuple(s for s, _ in w)
        lasts = tuple(e - kmin for _, e in w)
        return kmin, starts, lasts


    def cost(self, shape, itemsize):
        kmin, starts, lasts = self._parts()
        e_in = _elems(shape)
        e_out = _elems(self.out_shape(shape))
        out_shape = self.out_shape(shape)
        c = C.NODE * 2 + _gather_cost(out_shape, self.axis)
        if kmin > 1:
            rate = C.POOL_RATE_3D if len(shape) - self.first_spatial >= 3 else C.POOL_RATE
            c += C.NODE + e_in * kmin / rate + 2 * e_in * itemsize / C.BANDWIDTH
        if starts != lasts:
            c += C.NODE + _gather_cost(out_shape, self.axis) + 3 * e_out * itemsize / C.BANDWIDTH
        return c

    def emit(self, em, x, shape, elem):
        kmin, starts, lasts = self._parts()
        src = x
        if kmin > 1:
            spatial = range(self.first_spatial, len(shape))
            kernel = [kmin if a == self.axis else 1 for a in spatial]
            src = em.op("MaxPool", [x], kernel_shape=kernel, strides=[1] * len(kernel))
        a = em.op("Gather", [src, em.ints("window_starts", starts)], axis=self.axis)
        if starts == lasts:  # all windows of length kmin (e.g. 10 -> 4): one gather covers them
            return a
        b = em.op("Gather", [src, em.ints("window_lasts", lasts)], axis=self.axis)
        return em.op("Max", [a, b])

    @property
    def ops(self):
        return ("MaxPool", "Gather", "Max")


@dataclass(frozen=True)
class WindowGatherStep(OneAxisStep):
    """Max along one axis via the window table: Gather ``[m, kmax]`` indices (short windows padded with
    their own last index), then ReduceMax over the window dim. Exact for any windows and any rank."""

    axis: int
    n: int
    m: int


    def cost(self, shape, itemsize):
        kmax = W.max_window(self.n, self.m)
        out_shape = self.out_shape(shape)
        gathered = _elems(out_shape) * kmax
        if self.axis == len(shape) - 1:  # moved to the front first (see emit): block = everything else
            moved = (out_shape[-1], kmax) + tuple(out_shape[:-1])
            transposes = 2 * C.NODE + (_elems(shape) + _elems(out_shape)) * 2 * itemsize / C.BANDWIDTH
            return 2 * C.NODE + transposes + _gather_cost(moved, 1) + 2 * gathered * itemsize / C.BANDWIDTH
        # the [m, kmax] table inserts a dim: the contiguous block is still the dims after the axis
        g_shape = tuple(out_shape[: self.axis + 1]) + (kmax,) + tuple(out_shape[self.axis + 1:])
        return 2 * C.NODE + _gather_cost(g_shape, self.axis + 1) + 2 * gathered * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        table = em.const("window_table", W.window_table(self.n, self.m))
        return gather_window_max(em, x, table, self.axis, len(shape))

    ops = ("Gather", "ReduceMax", "Transpose")


def gather_window_max(em: Emitter, x: str, table: str, axis: int, rank: int) -> str:
    """``ReduceMax(Gather(x, table, axis))`` over the window dim.

    onnxruntime's Gather along the LAST axis copies element by element (10x slower than along any other
    axis), so a last axis is first moved to the front, where every index copies one contiguous block, and
    moved back after the ReduceMax (measured 725 -> 309 us for 1x256x33x33 -> 8 along W).
    """
    if axis != rank - 1:
        g = em.op("Gather", [x, table], axis=axis)
        return em.reduce("ReduceMax", g, [axis + 1], keepdims=0)
    front = em.op("Transpose", [x], perm=[rank - 1] + list(range(rank - 1)))
    g = em.op("Gather", [front, table], axis=0)
    r = em.reduce("ReduceMax", g, [1], keepdims=0)
    return em.op("Transpose", [r], perm=list(range(1, rank)) + [0])


def run_cost(steps: Sequence[Step], shape: Shape, itemsize: int) -> float:
    total = 0.0
    for s in steps:
        total += s.cost(shape, itemsize)
        shape = s.out_shape(shape)
    return total


def emit_steps(em: Emitter, steps: Sequence[Step], x: str, y: str, shape: Shape, elem: int) -> Shape:
    """Emit ``steps`` from ``x``; the last node writes into ``y``. Returns the final shape."""
    cur = x
    for s in steps:
        cur = s.emit(em, cur, shape, elem)
        shape = s.out_shape(shape)
        if isinstance(s, CastStep):
            elem = s.to
    if cur == x:
        em.op("Identity", [x], out=y)
    else:
        last = em.nodes[-1]
        assert last.output[0] == cur
        em.taken.discard(cur)
        last.output[0] = y
    return shape


# ops whose onnxruntime CPU kernels are not torch's max on non-finite input (measured, onnxruntime 1.32):
# MaxPool/GlobalMaxPool give -FLT_MAX for a window of -inf (and for an all-NaN window with stride 1), and
# MaxPool/ReduceMax drop a NaN unless it comes last/first. torch: any NaN in the window -> NaN; all -inf -> -inf.
NON_FINITE_UNSAFE_MAX = frozenset({"MaxPool", "GlobalMaxPool", "ReduceMax"})


@dataclass(frozen=True)
class NonFiniteMaxStep(Step):
    """Wraps max steps so NaN and -inf come out as torch's.

    Exact form: the same steps also run on a per-element code (2 = NaN, 0 = -inf, 1 = anything else),
    whose window max says which windows hold a NaN (-> NaN) or only -inf (-> -inf); elsewhere the inner
    steps' value stands (exact for those windows). That doubles the pooling work, so with ``lazy`` (the
    onnxruntime target) it sits in the else-branch of an If whose condition is "the input's sum is
    finite" (one ReduceSum pass): finite inputs, nearly all of them, run only the plain steps. TensorRT
    gets the eager form (its If is a conditional layer that evaluates both branches anyway).
    Needs opset 9 (IsNaN, Where)."""

    inner: tuple[Step, ...]
    lazy: bool = False

    def out_shape(self, shape):
        for s in self.inner:
            shape = s.out_shape(shape)
        return shape

    def cost(self, shape, itemsize):
        if self.lazy:  # priced for the finite path: the plain steps + one read of x + If
            return run_cost(self.inner, shape, itemsize) + 4 * C.NODE + _elems(shape) * itemsize / C.BANDWIDTH
        out = _elems(self.out_shape(shape))
        return (2 * run_cost(self.inner, shape, itemsize) + 6 * C.NODE
                + _elems(shape) * (itemsize + 4 * 3) / C.BANDWIDTH + out * (4 + 3 * itemsize) / C.BANDWIDTH)

    @property
    def ops(self):
        extra = ("Cast", "IsNaN", "Less", "Where", "Greater") + (("ReduceSum", "Sub", "Not", "If") if self.lazy else ())
        return tuple(dict.fromkeys(op for s in self.inner for op in s.ops)) + extra

    def _plain(self, em, x, shape, elem):
        y, sh = x, shape
        for s in self.inner:
            y = s.emit(em, y, sh, elem)
            sh = s.out_shape(sh)
        return y

    def _exact(self, em, x, shape, elem):
        y = self._plain(em, x, shape, elem)
        f32 = TensorProto.FLOAT
        fdt = np_dtype(elem)
        one = em.const("code_one", np.array(1.0, np.float32))
        two = em.const("code_two", np.array(2.0, np.float32))
        zero = em.const("code_zero", np.array(0.0, np.float32))
        # the masks are taken in x's own dtype: a float64 value below float32's range is not -inf
        neg_inf = em.op("Less", [x, em.const("lowest", np.array(np.finfo(fdt).min, fdt))])
        code = em.op("Where", [em.op("IsNaN", [x]), two, em.op("Where", [neg_inf, zero, one])])
        code = self._plain(em, code, shape, f32)
        y = em.op("Where", [em.op("Less", [code, em.const("half", np.array(0.5, np.float32))]),
                            em.const("minus_inf", np.array(-np.inf, fdt)), y])
        return em.op("Where", [em.op("Greater", [code, em.const("one_half", np.array(1.5, np.float32))]),
                               em.const("nan", np.array(np.nan, fdt)), y])

    def emit(self, em, x, shape, elem):
        if not self.lazy:
            return self._exact(em, x, shape, elem)
        # sum(x) is finite iff x holds no NaN/inf (an overflowing sum only sends us down the exact branch);
        # float16 sums overflow early, so it is summed in float32
        xs = em.cast(x, TensorProto.FLOAT) if elem == TensorProto.FLOAT16 else x
        total = em.op("ReduceSum", [xs], keepdims=0)
        finite = em.op("Not", [em.op("IsNaN", [em.op("Sub", [total, total])])])
        then_branch = _branch(em, "finite_inputs", elem, lambda sub: self._plain(sub, x, shape, elem))
        else_branch = _branch(em, "non_finite_inputs", elem, lambda sub: self._exact(sub, x, shape, elem))
        return em.op("If", [finite], then_branch=then_branch, else_branch=else_branch)


def _branch(em: Emitter, hint: str, elem: int, build) -> GraphProto:
    """A subgraph for If, built by ``build(sub_emitter) -> output``; its constants live in the outer graph."""
    from onnx import helper

    sub = Emitter(em.prefix, em.taken, em.opset, constant_nodes=em.constant_nodes)
    out = build(sub)
    if out not in {o for n in sub.nodes for o in n.output}:  # a branch must produce its output itself
        out = sub.op("Identity", [out])
    em.initializers.extend(sub.initializers)
    return helper.make_graph(sub.nodes, em.fresh(hint), [], [helper.make_tensor_value_info(out, elem, None)])

"""The building blocks every lowering is made of, each with its cost and its emission.

A lowering is a list of :class:`Step` s applied in order to the pooled tensor. Each step knows how to
estimate its cost on a given shape (``cost``) and how to emit its ONNX nodes (``emit``), so the planner's
estimate and the emitted graph can never disagree about what runs.

Shapes here are tuples of ``int`` (static) or ``str``/``None`` (symbolic leading dims: a static lowering
only needs the pooled axes to be static; leading dims are copied with Reshape's ``0``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd, prod
from typing import ClassVar, Sequence

import numpy as np

from .. import windows as W
from ..graph.emit import Emitter
from . import cost as C

Shape = tuple


def numel(shape: Shape) -> int:
    return prod(d if isinstance(d, int) else 1 for d in shape)


def gather_cost(out_shape: Shape, axis: int) -> float:
    """A Gather along ``axis`` producing ``out_shape``: elements copied plus one block per contiguous run
    (the dims after the axis): a last-axis Gather copies element by element."""
    out = numel(out_shape)
    inner = numel(out_shape[axis + 1:]) if axis + 1 < len(out_shape) else 1
    return out / C.GATHER_RATE + out / max(inner, 1) * C.GATHER_BLOCK


def window_gather_cost(shape: Shape, out_shape: Shape, axis: int, kmax: int, itemsize: int,
                       before: float = 0.0) -> float:
    """A Gather of an ``[m, kmax]`` window table along ``axis`` and a reduction over the window dim, after
    ``before`` (the cost of what runs first); a last axis is moved to the front and back
    (:func:`~.max_steps.gather_window_max`)."""
    gathered = numel(out_shape) * kmax
    if axis == len(shape) - 1:  # moved to the front first: block = everything else
        moved = (out_shape[-1], kmax) + tuple(out_shape[:-1])
        transposes = 2 * C.NODE + (numel(shape) + numel(out_shape)) * 2 * itemsize / C.BANDWIDTH
        return before + transposes + 2 * C.NODE + gather_cost(moved, 1) + 2 * gathered * itemsize / C.BANDWIDTH
    # the [m, kmax] table inserts a dim: the contiguous block is still the dims after the axis
    g_shape = tuple(out_shape[: axis + 1]) + (kmax,) + tuple(out_shape[axis + 1:])
    return before + 2 * C.NODE + gather_cost(g_shape, axis + 1) + 2 * gathered * itemsize / C.BANDWIDTH


def gemm_seconds(macs: float, n_cols: int) -> float:
    """GEMM time: narrow outputs (fewer than NARROW_N columns) waste part of every column strip."""
    return macs / (C.MAC_RATE * min(1.0, max(n_cols, 1) / C.NARROW_N))


def reshape_keep(em: Emitter, x: str, keep: int, tail: Sequence[int]) -> str:
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

    def at(self, shape: Shape, itemsize: int, opset: int) -> "Step":
        """This step as it runs on ``shape`` (a variant where the input's size changes the best form)."""
        return self

    def mean_twin(self) -> "Step | None":
        """This max step averaging its windows instead, or None (the NaN carrier's pooling: max_steps.py)."""
        return None


@dataclass(frozen=True)
class WrappedSteps(Step):
    """Steps run as one, with something around them (the NaN/inf guards of lowering/max_steps.py and
    lowering/avg_non_finite.py): ``inner`` emitted in order by :meth:`plain`."""

    inner: tuple[Step, ...]

    def out_shape(self, shape):
        return chain_shape(self.inner, shape)

    def inner_ops(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(op for s in self.inner for op in s.ops))

    def plain(self, em: Emitter, x: str, shape: Shape, elem: int) -> str:
        return emit_chain(em, self.inner, x, shape, elem)


@dataclass(frozen=True)
class OneAxisStep(Step):
    """A step that pools one axis, ``n -> m``, and leaves the others."""

    axis: int
    n: int | None  # (None: read at run time, window_slices)
    m: int

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = self.m
        return tuple(out)


@dataclass(frozen=True)
class AllAxesStep(Step):
    """A step over every pooled axis at once: the axes from ``first_axis`` on, each ``n[j]`` -> ``m[j]``."""

    first_axis: int
    n: tuple[int, ...]
    m: tuple[int, ...]

    def out_shape(self, shape):
        return tuple(shape[: self.first_axis]) + self.m


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
        return C.NODE + numel(shape) * 6 / C.BANDWIDTH

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
        return C.NODE + numel(shape) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        return em.reduce(self.op_type, x, self.axes, keepdims=1)

    @property
    def ops(self):
        return (self.op_type,)

    def mean_twin(self):
        return replace(self, op_type="ReduceMean") if self.op_type == "ReduceMax" else None


@dataclass(frozen=True)
class PoolStep(Step):
    """One AveragePool/MaxPool over all spatial axes (input rank k+2): uniform windows on ``windows``'
    axes, kernel 1 stride 1 elsewhere. Exact because every window has one length and one stride."""

    op_type: str  # AveragePool | MaxPool
    first_spatial: int  # absolute index of the first spatial axis (always 2: N, C first)
    windows: tuple[tuple[int, W.Uniform], ...]  # (absolute axis, kernel/stride)

    def kernel_strides(self, shape):
        u = dict(self.windows)
        axes = range(self.first_spatial, len(shape))
        return [u[a].kernel if a in u else 1 for a in axes], [u[a].stride if a in u else 1 for a in axes]

    def out_shape(self, shape):
        k, s = self.kernel_strides(shape)
        out = list(shape)
        for j, a in enumerate(range(self.first_spatial, len(shape))):
            out[a] = (shape[a] - k[j]) // s[j] + 1
        return tuple(out)

    def cost(self, shape, itemsize):
        k, _ = self.kernel_strides(shape)
        out = numel(self.out_shape(shape))
        rate = C.POOL_RATE_3D if len(shape) - self.first_spatial >= 3 else C.POOL_RATE
        big = numel(shape) * C.POOL_OUT_OF_CACHE if numel(shape) * itemsize > C.CACHE_BYTES else 0.0
        return C.NODE + out * prod(k) / rate + big + (numel(shape) + out) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        k, s = self.kernel_strides(shape)
        return em.op(self.op_type, [x], kernel_shape=k, strides=s)

    @property
    def ops(self):
        return (self.op_type,)

    def mean_twin(self):
        return replace(self, op_type="AveragePool") if self.op_type == "MaxPool" else None


@dataclass(frozen=True)
class ResizeStep(Step):
    """Integer upsampling by ``q`` on some axes: nearest, asymmetric, floor (x_in = floor(i / q))."""

    factors: tuple[tuple[int, int], ...]  # (absolute axis, q)

    def out_shape(self, shape):
        f = dict(self.factors)
        return tuple(d * f[a] if a in f else d for a, d in enumerate(shape))

    def cost(self, shape, itemsize):
        return C.NODE + numel(self.out_shape(shape)) * itemsize * 2 / C.BANDWIDTH

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

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = len(self.indices)
        return tuple(out)

    def cost(self, shape, itemsize):
        return C.NODE + gather_cost(self.out_shape(shape), self.axis)

    def emit(self, em, x, shape, elem):
        idx = em.ints("upsample_indices", self.indices)
        return em.op("Gather", [x, idx], axis=self.axis)

    ops = ("Gather",)


# later dims of static product t <= this may go into one GEMM against kron(P^T, I_t) (MatMulStep, dynamic.py)
KRON_IDENTITY_MAX = 16


@dataclass(frozen=True)
class MatMulStep(OneAxisStep):
    """Average along one axis as ``P @ x``: the general exact form (any n -> m).

    Last axis: ``x @ P^T`` (one big GEMM). Second-to-last: ``P @ x`` (one GEMM per plane). Earlier axes:
    reshape so the axis is second-to-last, multiply, reshape back.

    Block form: with g = gcd(n, m) > 1 the windows repeat every p = n/g inputs and q = m/g outputs, and no
    window crosses a period (window i ends at ceil((i+1)p/q) <= p within its period), so P is
    block-diagonal, ``I_g (x) P[:q, :p]``. Reshaping the axis to [g, p] and multiplying by the small block
    does g times fewer multiply-adds (1D 1000 -> 30: 3.2 ms -> 2.0 ms). Used where the cost model says so.

    Kron form: an axis before the last whose later dims are static with a small product t (just pooled:
    7, 5x7) is flattened with them and multiplied by ``kron(P^T, I_t)``: one GEMM against a constant
    (prepacked) matrix, not one per plane packing x each call. 8x256x64x7 -> 5 along H: ~1.3 -> ~0.6 ms
    (profile); the dynamic lowering had it already (8x256x64x64 -> 5x7: 2.4 ms to this one's 3.4 ms).
    No zero-padding of a 5/7-column ``P^T`` to 8: re-measured 1.03-1.27x slower, 1.14-1.69x with the Slice.
    """

    def _tail(self, shape) -> int | None:
        """t, the product of the later dims, where a kron form may take them (static, small), else None."""
        later = shape[self.axis + 1:]
        if not later or not all(isinstance(d, int) for d in later) or prod(later) > KRON_IDENTITY_MAX:
            return None
        return prod(later)

    def _cost(self, shape, itemsize, g: int, kron: bool = False) -> float:
        pos = len(shape) - 1 - self.axis
        q = self.m // g
        out = numel(self.out_shape(shape))
        traffic = (numel(shape) + out) * itemsize / C.BANDWIDTH
        if kron:  # [.., g, p*t] @ [p*t, q*t]: every input element meets q*t columns, one GEMM
            t = self._tail(shape)
            return 3 * C.NODE + gemm_seconds(numel(shape) * q * t, q * t) + C.GEMM_CALL + traffic
        macs = numel(shape) * q  # every input element meets the q columns of its block
        # x @ P^T: q output columns; P @ x: the plane's columns, and x (the B operand) is packed per call
        cols = q if pos == 0 else numel(shape[self.axis + 1:])
        pack = 0.0 if pos == 0 else numel(shape) * C.PACK_ELEM
        calls = 1 if pos == 0 else numel(shape[: self.axis]) * g
        nodes = 1 if pos < 2 and g == 1 else 3
        return C.NODE * nodes + gemm_seconds(macs, cols) + pack + calls * C.GEMM_CALL + traffic

    def layout(self, shape) -> tuple[int, bool]:
        """``(g, kron)``: the period of the block form (1: the full matrix) and whether the later dims are
        taken into a kron form; whichever the cost model prefers."""
        g = gcd(self.n, self.m)
        options = [(1, False)] + ([(g, False)] if g > 1 else [])
        if len(shape) - 1 - self.axis > 0 and self._tail(shape) is not None:
            options += [(p, True) for p, _ in options]
        return min(options, key=lambda o: self._cost(shape, 4, *o))

    def cost(self, shape, itemsize):
        return self._cost(shape, itemsize, *self.layout(shape))

    def emit(self, em, x, shape, elem):
        g, kron = self.layout(shape)
        n, m = self.n // g, self.m // g
        p = W.pooling_matrix(self.n, self.m, dtype=np.float64)[:m, :n]  # written by em.weights, in elem
        pos = len(shape) - 1 - self.axis
        tail = list(shape[self.axis + 1:])
        if kron:
            t = self._tail(shape)
            blocks = reshape_keep(em, x, self.axis, ([g] if g > 1 else []) + [n * t])
            k = np.kron(p.T, np.eye(t, dtype=p.dtype))  # [n*t, m*t]: P's entries, copied exactly
            y = em.op("MatMul", [blocks, em.weights("kron_matrix_t", k, elem)])
            return reshape_keep(em, y, self.axis, [self.m] + tail)
        if g == 1 and pos == 0:
            return em.op("MatMul", [x, em.weights("pool_matrix_t", p.T, elem)])
        if g == 1 and pos == 1:
            return em.op("MatMul", [em.weights("pool_matrix", p, elem), x])
        if pos == 0:
            blocks = reshape_keep(em, x, self.axis, [g, n])
            y = em.op("MatMul", [blocks, em.weights("pool_block_t", p.T, elem)])
        else:
            # the tail's length spelled out, not -1: a copied 0 (a batch of 0) leaves -1 undetermined
            blocks = reshape_keep(em, x, self.axis, ([g] if g > 1 else []) + [n, numel(tail)])
            y = em.op("MatMul", [em.weights("pool_block" if g > 1 else "pool_matrix", p, elem), blocks])
        return reshape_keep(em, y, self.axis, [self.m] + tail)

    ops = ("MatMul",)


def chain_shape(steps: Sequence[Step], shape: Shape) -> Shape:
    """The shape ``steps`` make of ``shape``, applied in order."""
    for s in steps:
        shape = s.out_shape(shape)
    return shape


def emit_chain(em: Emitter, steps: Sequence[Step], x: str, shape: Shape, elem: int) -> str:
    """Emit ``steps`` from ``x`` in order, each on the shape (and dtype) the one before makes; returns the last
    output."""
    for s in steps:
        x = s.emit(em, x, shape, elem)
        shape = s.out_shape(shape)
        if isinstance(s, CastStep):
            elem = s.to
    return x


def run_cost(steps: Sequence[Step], shape: Shape, itemsize: int) -> float:
    total = 0.0
    for s in steps:
        total += s.cost(shape, itemsize)
        shape = s.out_shape(shape)
    return total


def emit_steps(em: Emitter, steps: Sequence[Step], x: str, y: str, shape: Shape, elem: int) -> None:
    """Emit ``steps`` from ``x``; the last node writes into ``y``."""
    cur = emit_chain(em, steps, x, shape, elem)
    if cur == x:
        em.op("Identity", [x], out=y)
    else:
        last = em.nodes[-1]
        assert last.output[0] == cur
        em.taken.discard(cur)
        last.output[0] = y

"""Adaptive max pooling WITH its indices output, exactly as torch computes it.

torch's index is the flat position inside the input's pooled plane (``d*H*W + h*W + w``) of the first
maximum in row-major scan order, except that a NaN is the maximum and a later NaN replaces an earlier one
(``val > maxval || isnan(val)``). Construction (:func:`emit_argmax`, shared with the dynamic lowering):

1. gather every window into one LEADING axis: the pooled axes are moved to the front (onnxruntime's Gather
   along the last axis copies element by element, 10-50x slower; in front every index copies a whole block
   of the other dims), then per pooled axis a Gather of the ``[m, kmax]`` window table (short windows padded
   by repeating their last index, which is always *after* the real element, so neither the first maximum
   nor the last NaN moves), laid out ``[output positions, kall, leading dims]`` (blocks of the leading dims
   move; onnxruntime reduces that middle axis 3-6x faster than a first or, element-wise, a last one);
2. first maximum = ArgMax with NaNs replaced by -inf; last NaN = the largest NaN position (ReduceMax of
   mask x position); for TensorRT, whose ArgMax is a TopK with undocumented ties, the first maximum is the
   smallest position equal to the ReduceMax. With the onnxruntime target (``lazy``) that NaN-aware choice
   sits in the else-branch of an If on "the windows' sum is finite": finite windows, nearly all of them,
   take a plain ArgMax (torch's first maximum), one ReduceSum pass instead of ~9 (measured: 1.8-2.4x faster);
3. values = GatherElements at the chosen position (so NaN and -0.0 come through bit for bit),
   indices = a table mapping (window element, output position) to the flat input index.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

import numpy as np
from onnx import TensorProto

from .. import windows as W
from ..graph.emit import np_dtype
from . import cost as C
from .base import Lowering, axis_windows, compute_dtype
from .first_max import FIRST_MAX_OPS, PooledAxis, emit_first_max, first_max_seconds, takes_first_max
from .first_max_windows import (
    FIRST_MAX_WINDOWS_OPS,
    emit_first_max_windows,
    first_max_windows_seconds,
    takes_whole_windows,
    whole_windows_apply,
    window_positions,
)
from .max_steps import branch, emit_if, finite_input
from .steps import AllAxesStep, numel


@dataclass(frozen=True)
class ArgMaxStep(AllAxesStep):
    want_indices: bool
    tie_safe: bool = False  # no ArgMax (TensorRT: see emit_both)
    lazy: bool = False  # the NaN-aware choice only for non-finite windows (an If; onnxruntime target)
    exact_non_finite = True  # NaN and all -inf windows as torch, without the NonFiniteMaxStep wrapper

    def cost(self, shape, isz):
        kmax = [W.max_window(n, m) for n, m in zip(self.n, self.m)]
        lead = numel(shape[: self.first_axis])
        if self.lazy and self.n != self.m:  # priced for finite inputs: the cheaper first-maximum construction
            return min(self._finite_costs(lead, kmax, isz).values())
        return argmax_seconds(lead, lead * prod(m * k for m, k in zip(self.m, kmax)), len(self.n), isz, self.lazy)

    def _finite_costs(self, lead: int, kmax: list[int], isz: int) -> dict[str, float]:
        """Estimated seconds of each construction the finite inputs may take: ``separable``
        (first_max.py) and, for the indices where it applies, ``whole_windows`` (first_max_windows.py)."""
        n, m = list(self.n), list(self.m)
        costs = {"separable": first_max_seconds(lead, n, m, kmax, isz, self.want_indices)}
        if self.want_indices and whole_windows_apply(self.n, self.m, kmax):
            costs["whole_windows"] = first_max_windows_seconds(lead, n, m, kmax, isz)
        return costs

    @property
    def ops(self):
        return tuple(dict.fromkeys(ARGMAX_OPS + (("Equal", "ReduceMin") if self.tie_safe else ("ArgMax",))
                                   + (LAZY_OPS if self.lazy else ())))

    def emit_both(self, em, x, shape, elem, y, indices):
        tables = [W.window_table(n, m) for n, m in zip(self.n, self.m)]
        kmax = [t.shape[1] for t in tables]
        # flat input index of every (output position, window element), output-major
        positions = window_positions(self.n, tables) if indices else None
        flat = positions.reshape(-1) if indices else None  # (tables and flat index: made where they are read)
        separable = [PooledAxis(None if n == m else t, t.shape[1], m, n) for n, m, t in zip(self.n, self.m, tables)]
        costs = self._finite_costs(numel(shape[: self.first_axis]), kmax, np_dtype(elem).itemsize)
        whole = positions if indices and min(costs, key=costs.get) == "whole_windows" else None
        emit_argmax(em, x, len(shape), tables,
                    prod(kmax), prod(self.m), elem, self.tie_safe, y, indices, flat, lazy=self.lazy,
                    separable=separable if any(a.table is not None for a in separable) else None,
                    whole_windows=whole,
                    out_dims=list(self.m) + [d if isinstance(d, int) else None for d in shape[: self.first_axis]])


def argmax_seconds(lead: int, gathered: int, gathers: int, itemsize: int, lazy: bool = False) -> float:
    """Estimated seconds of :func:`emit_argmax`: ``gathered`` window elements (``lead`` leading elements per
    output position and window element), ``gathers`` blocked Gathers (one per pooled axis), ~14 nodes and
    ``C.ARGMAX_PASSES`` passes over the windows (``C.ARGMAX_PASSES_LAZY`` on the finite path of ``lazy``;
    cost.py: the fit)."""
    blocks = gathered / max(lead, 1) * gathers  # each Gather copies whole blocks of the leading dims
    passes = C.ARGMAX_PASSES_LAZY if lazy else C.ARGMAX_PASSES
    if gathered * itemsize > C.CACHE_BYTES:  # 8x256x64x64 -> 5x7 (40 MB of windows): ~4x the in-cache estimate
        passes *= C.ARGMAX_OUT_OF_CACHE
    return (14 * C.NODE + gathered / C.GATHER_RATE * gathers + blocks * C.GATHER_BLOCK
            + passes * gathered * itemsize / C.BANDWIDTH)


#: what emit_argmax emits besides the first-maximum ops (ArgMax, or Equal/ReduceMin for TensorRT)
ARGMAX_OPS = ("Transpose", "Gather", "Shape", "IsNaN", "Where", "Cast", "ReduceMax", "Mul", "Greater",
              "GatherElements", "Reshape", "Concat", "Unsqueeze", "Add", "Range")
#: what the ``lazy`` form adds: the finiteness test, the If and the finite inputs' construction
LAZY_OPS = ("ReduceSum", "Sub", "Equal", "Not", "If", "Constant") + FIRST_MAX_OPS + FIRST_MAX_WINDOWS_OPS


def emit_argmax(em, x: str, rank: int, tables: Sequence[str | np.ndarray | None], kall: int | str, n_out: int | str,
                elem: int, tie_safe: bool, y: str, indices: str | None, flat_index: str | np.ndarray | None, *,
                lazy: bool = False,
                separable: list[PooledAxis] | None = None, whole_windows: np.ndarray | str | None = None,
                whole_windows_max: int = 0, out_dims: Sequence[int | None] | None = None) -> None:
    """Values (into ``y``) and torch's indices (into ``indices``) of max pooling ``x``'s last ``len(tables)``
    axes, each with its ``[m, kmax]`` window table (None: the axis keeps its length, its window is the
    element itself). ``kall`` is the window size (the product of the kmax), ``n_out`` the number of output
    positions per plane (the product of the m): ints, or names of 0-d int64 tensors. ``flat_index`` (1-D,
    ``[n_out * kall]``): the flat input index of each (output position, window element), output-major.
    ``lazy`` (not with ``tie_safe``): the NaN-aware construction runs only when the input is not all finite;
    with ``separable`` (the same axes for :func:`~.first_max.emit_first_max`) finite inputs take that
    construction, else only the choice inside the windows is guarded; with ``whole_windows`` too (the
    ``[O, K]`` flat positions of every window element, or the name of ``flat_index`` where they are built at
    run time) they take :func:`~.first_max_windows.emit_first_max_windows` instead (built at run time: an
    inner If takes it where the windows hold at most ``whole_windows_max`` elements and the plane at most
    2**24, else the separable one).
    """
    if lazy and not tie_safe and separable is not None:
        outputs = [(y, elem)] + ([(indices, TensorProto.INT64)] if indices else [])

        def whole(sub, outs):
            emit_first_max_windows(sub, x, rank, separable, whole_windows, kall, outs[0], outs[1])

        def parts(sub, outs):
            emit_first_max(sub, x, rank, separable, outs[0], outs[1] if indices else None)

        def finite_path(sub, outs):
            if isinstance(whole_windows, str):  # runtime sizes: chosen at run time
                inner = [(outs[0], elem)] + ([(outs[1], TensorProto.INT64)] if indices else [])
                sub.op("If", [takes_whole_windows(sub, x, rank, len(separable), kall, whole_windows_max)],
                       out=[name for name, _ in inner], then_branch=branch(sub, "small_windows", inner, whole),
                       else_branch=branch(sub, "large_windows", inner, parts))
            elif whole_windows is not None:
                whole(sub, outs)
            else:
                parts(sub, outs)

        def exact_path(sub, outs):
            emit_argmax(sub, x, rank, tables, kall, n_out, elem, False, outs[0], outs[1] if indices else None,
                        flat_index, out_dims=out_dims)

        em.op("If", [takes_first_max(em, x, elem, separable)], out=[name for name, _ in outputs],
              then_branch=branch(em, "finite_inputs", outputs, finite_path),
              else_branch=branch(em, "non_finite_inputs", outputs, exact_path))
        return
    # constants made here, by the emitter that reads them (inside an If branch: the branch's own, which onnx2tf
    # keeps; it drops a branch's reads of the outer graph's initializers)
    tables = [em.const(f"window_table_{j}", t) if isinstance(t, np.ndarray) else t for j, t in enumerate(tables)]
    if isinstance(flat_index, np.ndarray):
        flat_index = em.const("flat_index", flat_index)
    k = len(tables)
    lead = rank - k
    # the pooled axes first: every Gather below then copies whole blocks of the leading dims
    g = em.op("Transpose", [x], perm=list(range(lead, rank)) + list(range(lead)))
    pos, out_pos, win_pos = 0, [], []
    for t in tables:
        out_pos.append(pos)
        if t is None:
            pos += 1
            continue
        g = em.op("Gather", [g, t], axis=pos)
        win_pos.append(pos + 1)
        pos += 2
    lead_pos = list(range(pos, pos + lead))
    # the output's shape, [lead..., m...] (``out_dims`` is [m..., lead...])
    if out_dims is not None and None not in out_dims:  # every dim static: a constant (TVM's Relax takes no other;
        keep_shape = em.ints("values_shape", list(out_dims[k:]) + list(out_dims[:k]))  # a -1 would stop at batch 0)
    else:
        keep_shape = em.op("Gather", [em.op("Shape", [g]), em.ints("lead_and_out", lead_pos + out_pos)], axis=0)
    if win_pos:
        g = em.op("Transpose", [g], perm=out_pos + win_pos + lead_pos)  # moves whole blocks of the leading dims
    # [output positions, kall, leading dims]: onnxruntime reduces a middle axis 3-6x faster than a first one
    dims = [em.unsqueeze(v if isinstance(v, str) else em.const("dim", np.array(v, np.int64)), [0])
            for v in (n_out, kall)] if isinstance(n_out, str) or isinstance(kall, str) else None
    target = (em.op("Concat", dims + [em.ints("rest", [-1])], axis=0) if dims else
              em.ints("windows_shape", [n_out, kall, -1]))
    w = em.op("Reshape", [g, target], hint="windows")
    if lazy and not tie_safe:  # [output positions, 1, leading dims]
        choice = lazy_window_choice(em, w, kall, elem)
    else:
        choice = window_choice(em, w, kall, elem, tie_safe)
    # [P, 1, R] -> [R, 1, P] -> [lead..., m...]: the leading dims first in the Reshape's target, where a batch of 0
    # is the 0 its first dim copies (a Reshape reads 0 as "copy the input's dim" below opset 14's allowzero; with
    # the pooled dims first, a 0 batch copied a dim that is not 0, or one past the input's rank: review35)
    values = em.op("Transpose", [em.op("GatherElements", [w, choice], axis=1)], perm=[2, 1, 0])
    em.op("Reshape", [values, keep_shape], out=y)
    if indices:
        if isinstance(n_out, int) and isinstance(kall, int):
            base = em.const("window_base", (np.arange(n_out, dtype=np.int64) * kall).reshape(n_out, 1, 1))
        else:
            count = n_out if isinstance(n_out, str) else em.const("output_positions", np.array(n_out, np.int64))
            step = kall if isinstance(kall, str) else em.const("window_elements", np.array(kall, np.int64))
            base = em.unsqueeze(em.op("Mul", [em.op("Range", [em.const("zero", np.array(0, np.int64)), count,
                                                              em.const("one", np.array(1, np.int64))]), step]), [1, 2])
        lin = em.op("Add", [choice, base])  # output position * kall + window element
        picked = em.op("Transpose", [em.op("Gather", [flat_index, lin], axis=0)], perm=[2, 1, 0])
        em.op("Reshape", [picked, keep_shape], out=indices)


def lazy_window_choice(em, w: str, kall: int | str, elem: int) -> str:
    """:func:`window_choice` behind an If on :func:`~.max_steps.finite_input`: finite windows take torch's choice,
    the first maximum, a plain ArgMax (onnxruntime's ArgMax takes the first of equal values, ``select_last_index``
    0); the others the NaN-aware choice."""
    return emit_if(em, finite_input(em, w, elem), TensorProto.INT64,
                   ("finite_windows", lambda sub: sub.op("ArgMax", [w], axis=1, keepdims=1)),
                   ("non_finite_windows", lambda sub: window_choice(sub, w, kall, elem, False)))


def window_choice(em, w: str, kall: int | str, elem: int, tie_safe: bool) -> str:
    """Position (int64, ``[P, 1, rest]``) along axis 1 of the ``[P, kall, rest]`` windows ``w`` (each
    window's elements row-major, padding after the real ones) of torch's choice: the last NaN if the window
    holds one, else the first maximum.

    ``kall`` is the window length: an int, or (the dynamic lowering) the name of a 0-d int64 tensor.
    """
    axis = 1
    fdt = np_dtype(elem)
    nan = em.is_nan(w, fdt)
    filled = em.op("Where", [nan, em.const("minus_inf", np.array(-np.inf, dtype=fdt)), w])
    if tie_safe:
        return _tie_safe_choice(em, filled, nan, kall)
    nanf = em.zero_one(nan, TensorProto.FLOAT)
    pos = _positions(em, kall, np.float32)
    first_max = em.op("ArgMax", [filled], axis=axis, keepdims=1)
    # the last NaN: the largest NaN position (a reversal, a Gather along the window axis, is 10-50x slower
    # in onnxruntime where that axis is the last, and a runtime one's Range(kall - 1, -1, -1) is what
    # onnxruntime's Gather-to-Slice fusion gets wrong)
    last_nan = em.cast(em.reduce("ReduceMax", em.op("Mul", [nanf, pos]), [axis], keepdims=1), TensorProto.INT64)
    most_nan = em.reduce("ReduceMax", nanf, [axis], keepdims=1)  # 1.0 or 0.0
    if em.equal_nan:  # MNN 3.6 compares bits: Greater(x, 0) is wrong, Equal right
        any_nan = em.op("Equal", [most_nan, em.const("one", np.array(1, dtype=np.float32))])
    else:
        any_nan = em.op("Greater", [most_nan, em.const("zero", np.array(0, dtype=np.float32))])
    return em.op("Where", [any_nan, last_nan, first_max])


def _tie_safe_choice(em, filled: str, nan: str, kall: int | str) -> str:
    """:func:`window_choice` without ArgMax: TensorRT imports ArgMax as TopK(k=1), whose choice among equal
    values is not documented, so the first maximum is the smallest position holding the maximum. The
    positions are int64 throughout (Where, ReduceMin/ReduceMax on INT64: TensorRT 10's table takes both):
    onnxruntime's quantize_static, the QDQ step before a TensorRT int8 engine, quantizes the float inputs of
    a Where, and float positions came back 1.004, 2.0, 3.01 and were truncated by the Cast to int64 (indices
    wrong, values 1.5 off: measured on max2d)."""
    axis = 1
    pos = _positions(em, kall, np.int64)
    past_end = kall if isinstance(kall, str) else em.const("past_end", np.array(kall, np.int64))
    is_max = em.op("Equal", [filled, em.reduce("ReduceMax", filled, [axis], keepdims=1)])
    first_max = em.reduce("ReduceMin", em.op("Where", [is_max, pos, past_end]), [axis], keepdims=1)
    none = em.const("no_position", np.array(-1, np.int64))
    last_nan = em.reduce("ReduceMax", em.op("Where", [nan, pos, none]), [axis], keepdims=1)  # -1: no NaN
    return em.op("Where", [em.op("Greater", [last_nan, none]), last_nan, first_max])


def _positions(em, kall: int | str, dtype) -> str:
    """The window positions ``0 .. kall - 1`` (``dtype``: np.float32 or np.int64) as a ``[kall, 1]`` column."""
    if isinstance(kall, int):
        return em.const("position", np.arange(kall, dtype=dtype).reshape(kall, 1))
    pos = em.op("Range", [em.const("zero", np.array(0, np.int64)), kall, em.const("one", np.array(1, np.int64))])
    return em.unsqueeze(pos if dtype == np.int64 else em.cast(pos, TensorProto.FLOAT), [1])


class ArgMaxLowering(Lowering):
    name = "argmax"
    summary = "gather every window, ArgMax (NaN-aware) + GatherElements: values and torch's indices"
    kinds = frozenset({"max"})
    computes_indices = True
    min_opset = 11  # GatherElements

    def _check(self, spec):
        if all(a.keep for a in axis_windows(spec)) and not spec.node.indices_output:
            return "nothing to pool (every size is kept)"
        return None

    def _steps(self, spec):
        return [ArgMaxStep(spec.ndim - spec.k, spec.in_sizes, spec.out_sizes, spec.node.indices_output is not None,
                           tie_safe=spec.target == "tensorrt", lazy=spec.target == "onnxruntime")]

    def build(self, em, spec, x, y, indices=None):
        build_with_indices(em, spec, self._steps(spec)[0], x, y, indices)


def build_with_indices(em, spec, step, x, y, indices) -> None:
    """Emit ``step.emit_both`` (values into ``y``, indices into ``indices``) in the compute dtype."""
    work = compute_dtype(spec)
    src, dst = x, y
    if work != spec.dtype:
        src = em.cast(x, work)
        dst = em.fresh("values_float")
    step.emit_both(em, src, spec.input_shape, work, dst, indices)
    if work != spec.dtype:
        em.cast(dst, spec.dtype, out=y)

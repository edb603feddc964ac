"""Adaptive max pooling WITH its indices output, exactly as torch computes it.

torch's index is the flat position inside the input's pooled plane (``d*H*W + h*W + w``) of the first
maximum in row-major scan order, except that a NaN is the maximum and a later NaN replaces an earlier one
(``val > maxval || isnan(val)``). Construction:

1. gather every window into one trailing axis: per pooled axis, Gather the ``[m, kmax]`` window table
   (short windows padded by repeating their last index, which is always *after* the real element, so
   neither the first maximum nor the last NaN moves), transpose the window dims to the end, flatten them;
2. first maximum = ArgMax with NaNs replaced by -inf; last NaN = ArgMax of the reversed NaN mask (for
   TensorRT, whose ArgMax is a TopK with undocumented ties: the smallest position equal to the ReduceMax,
   and the largest NaN position);
3. values = GatherElements at the chosen position (so NaN and -0.0 come through bit for bit),
   indices = a constant table mapping (output position, window element) to the flat input index.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
from onnx import TensorProto

from .. import windows as W
from ..emit import np_dtype
from . import cost as C
from .base import Lowering, axis_windows, compute_dtype
from .steps import Step, _elems


@dataclass(frozen=True)
class ArgMaxStep(Step):
    first_axis: int
    n: tuple[int, ...]
    m: tuple[int, ...]
    want_indices: bool
    tie_safe: bool = False  # no ArgMax (TensorRT: see emit_both)
    exact_non_finite = True  # NaN and all -inf windows as torch, without the NonFiniteMaxStep wrapper

    def out_shape(self, shape):
        return tuple(shape[: self.first_axis]) + self.m

    def cost(self, shape, isz):
        kmax = [W.max_window(n, m) for n, m in zip(self.n, self.m)]
        gathered = _elems(shape[: self.first_axis]) * prod(m * k for m, k in zip(self.m, kmax))
        rows = _elems(shape[: self.first_axis]) * prod(self.m)
        # one Gather per axis, the last one element by element; ~10 elementwise passes; ArgMax per row (x2)
        return (14 * C.NODE + gathered / C.GATHER_RATE * len(self.n) + gathered * C.GATHER_BLOCK
                + 10 * gathered * isz / C.BANDWIDTH + 2 * rows * C.ARGMAX_ROW)

    @property
    def ops(self):
        common = ("Gather", "Transpose", "Reshape", "IsNaN", "Where", "Cast", "ReduceMax", "Greater",
                  "GatherElements", "Squeeze", "Add")
        return common + (("Equal", "ReduceMin", "Mul") if self.tie_safe else ("ArgMax", "Sub"))

    def emit_both(self, em, x, shape, elem, y, indices):
        lead = self.first_axis
        k = len(self.n)
        tables = [W.window_table(n, m) for n, m in zip(self.n, self.m)]
        g = x
        for j, t in enumerate(tables):
            g = em.op("Gather", [g, em.const(f"window_table_{j}", t)], axis=lead + 2 * j)
        perm = list(range(lead)) + [lead + 2 * j for j in range(k)] + [lead + 2 * j + 1 for j in range(k)]
        g = em.op("Transpose", [g], perm=perm)
        w = em.op("Reshape", [g, em.ints("shape", [0] * lead + list(self.m) + [-1])])
        kall = prod(t.shape[1] for t in tables)

        # flat input index for every (output position, window element), row-major in both
        strides = [prod(self.n[j + 1:]) for j in range(k)]
        flat = np.zeros(tuple(self.m) + tuple(t.shape[1] for t in tables), dtype=np.int64)
        for j, t in enumerate(tables):
            shp = [1] * (2 * k)
            shp[j], shp[k + j] = t.shape
            flat = flat + (t * strides[j]).reshape(shp)  # m_j on dim j, kmax_j on dim k + j
        flat = flat.reshape(tuple(self.m) + (kall,))

        choice = window_choice(em, w, lead + k, kall, elem, self.tie_safe)
        em.squeeze(em.op("GatherElements", [w, choice], axis=-1), [-1], out=y)
        if indices:
            base = (np.arange(prod(self.m), dtype=np.int64) * kall).reshape(tuple(self.m) + (1,))
            lin = em.op("Add", [choice, em.const("window_base", base)])
            picked = em.op("Gather", [em.const("flat_index", flat.reshape(-1)), lin], axis=0)
            em.squeeze(picked, [-1], out=indices)


def window_choice(em, w: str, axis: int, kall: int | str, elem: int, tie_safe: bool) -> str:
    """Position (int64, keepdims) along ``w``'s last axis ``axis`` (windows laid out row-major, padding after
    the real elements) of torch's choice: the last NaN if the window holds one, else the first maximum.

    ``kall`` is the window axis' length: an int, or (the dynamic lowering) the name of a 0-d int64 tensor.
    """
    fdt = np_dtype(elem)
    runtime = isinstance(kall, str)
    nan = em.op("IsNaN", [w])
    filled = em.op("Where", [nan, em.const("minus_inf", np.array(-np.inf, dtype=fdt)), w])
    nanf = em.cast(nan, TensorProto.FLOAT)
    if runtime:
        pos = em.cast(em.op("Range", [em.const("zero", np.array(0, np.int64)), kall,
                                      em.const("one", np.array(1, np.int64))]), TensorProto.FLOAT)
        past_end = em.cast(kall, TensorProto.FLOAT)
    else:
        pos = em.const("position", np.arange(kall, dtype=np.float32))
        past_end = em.const("past_end", np.array(kall, dtype=np.float32))
    if tie_safe:
        # TensorRT imports ArgMax as TopK(k=1), whose choice among equal values is not documented: the
        # first maximum by position instead (float positions: exact below 2**24)
        is_max = em.op("Equal", [filled, em.reduce("ReduceMax", filled, [axis], keepdims=1)])
        first_max = em.cast(em.reduce("ReduceMin", em.op("Where", [is_max, pos, past_end]), [axis], keepdims=1),
                            TensorProto.INT64)
    else:
        first_max = em.op("ArgMax", [filled], axis=-1, keepdims=1)
    if tie_safe or runtime:
        # the last NaN: the largest NaN position (a runtime reversal, Gather of Range(kall - 1, -1, -1), is
        # what onnxruntime's Gather-to-Slice fusion gets wrong: its ArgMax then fails at run time)
        last_nan = em.cast(em.reduce("ReduceMax", em.op("Mul", [nanf, pos]), [axis], keepdims=1), TensorProto.INT64)
    else:
        reversed_nan = em.op("Gather", [nanf, em.ints("reverse", range(kall - 1, -1, -1))], axis=-1)
        last_nan = em.op("Sub", [em.const("last", np.array(kall - 1, dtype=np.int64)),
                                 em.op("ArgMax", [reversed_nan], axis=-1, keepdims=1)])
    any_nan = em.op("Greater", [em.reduce("ReduceMax", nanf, [axis], keepdims=1),
                                em.const("zero", np.array(0, dtype=np.float32))])
    return em.op("Where", [any_nan, last_nan, first_max])


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
        axes = axis_windows(spec)
        return [ArgMaxStep(spec.ndim - spec.k, tuple(a.n for a in axes), tuple(a.m for a in axes),
                           spec.node.indices_output is not None, tie_safe=spec.target == "tensorrt")]

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

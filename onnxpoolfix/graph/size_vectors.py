"""The one evaluator of ONNX size arithmetic in numpy (:func:`node_value`: the few ops it uses, with ONNX's semantics:
integer Div and Cast truncate, Mod follows ``fmod``), over two domains. Typed arrays with one trailing axis more,
one entry per input length: a size subgraph (:func:`~onnxpoolfix.graph.size_subgraph.size_subgraph`) at many
lengths at once (:func:`size_at_lengths`; onnxruntime runs one length per session run, ~20 us, which bounds how
far the float32 and double readings of a size can be compared: this reaches all 2**24 in a fraction of a
second). Object arrays of python ints, symbolic entries and None (not known): the sizes a graph computes from
its static shapes (:mod:`.shape_values`), int arithmetic entry by entry. Any other op is :class:`Unsupported`.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from . import attributes


class Unsupported(Exception):
    """An op (or a use of one) this evaluator does not take."""


_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
          TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_}


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.floating):
        return a / b
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _trunc(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


#: the arithmetic of the object domain, over python ints
_INT_OPS = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _trunc, "Equal": operator.eq}


def _entries(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``op`` entry by entry (broadcasting) over object arrays; an entry with an operand not an int is None."""
    if op not in _INT_OPS:
        raise Unsupported(f"{op} of unknown entries")
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape, dtype=object)
    for i in np.ndindex(a.shape):
        x, y = a[i], b[i]
        ok = isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer))
        out[i] = int(_INT_OPS[op](int(x), int(y))) if ok else None
    return out


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _trunc_div, "Max": np.maximum,
           "Min": np.minimum, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
           "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or}
_UNARY = {"Floor": np.floor, "Ceil": np.ceil, "Neg": np.negative, "Abs": np.abs, "Round": np.round, "Sign": np.sign,
          "Not": np.logical_not, "Identity": lambda a: a}


class Value:
    """A tensor at every length: ``batched`` ones have the trailing length axis."""

    __slots__ = ("a", "batched")

    def __init__(self, a: np.ndarray, batched: bool):
        self.a, self.batched = a, batched

    @property
    def rank(self) -> int:
        return self.a.ndim - self.batched

    def lifted(self, n: int) -> np.ndarray:
        return self.a if self.batched else np.broadcast_to(self.a[..., None], self.a.shape + (n,))

    def constant(self) -> np.ndarray:
        if self.batched:
            raise Unsupported("a length-dependent value where a constant is read")
        return self.a


def _axes(ins, at: int, attrs) -> list[int] | None:
    if len(ins) > at and ins[at] is not None:
        return [int(v) for v in ins[at].constant().reshape(-1)]
    return list(attrs["axes"]) if "axes" in attrs else None


def node_value(node: onnx.NodeProto, ins: list, n: int, shape: Callable[[onnx.NodeProto], Value]) -> Value:
    """``node``'s output from its inputs' values ``ins`` (None: omitted or unknown), at ``n`` lengths where batched;
    ``shape(node)`` is what a ``Shape`` node reads, before its ``start``/``end``."""
    op, at = node.op_type, attributes(node)
    if node.domain not in ("", "ai.onnx"):
        raise Unsupported(op)
    if op == "Constant":
        if "value" in at:
            if at["value"].data_location == TensorProto.EXTERNAL:
                raise Unsupported("a Constant in external data")
            return Value(numpy_helper.to_array(at["value"]), False)
        for key, dt in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                        ("value_ints", np.int64)):
            if key in at:
                return Value(np.array(at[key], dt), False)
        raise Unsupported("Constant")
    if op == "Shape":
        got = shape(node)
        return Value(got.a[at.get("start", 0):at.get("end", None)], got.batched)
    x = ins[0]
    if x is None:
        raise Unsupported(op)
    if op in _UNARY:
        return Value(_UNARY[op](x.a), x.batched)
    if op in ("Max", "Min") and len(ins) > 2:  # variadic: folded pairwise
        folded = x
        for y in ins[1:]:
            folded = node_value(onnx.helper.make_node(op, ["a", "b"], ["c"]), [folded, y], n, shape)
        return folded
    if op in _BINARY or op == "Mod":
        y = ins[1] if len(ins) == 2 else None
        if y is None:
            raise Unsupported(f"{op} of {len(ins)} inputs")
        # an unbatched operand gets the length axis as a 1: numpy then aligns the real dims as ONNX does
        a = x.a if x.batched or not y.batched else x.a[..., None]
        b = y.a if y.batched or not x.batched else y.a[..., None]
        if object in (a.dtype, b.dtype):
            return Value(_entries(op, a, b), x.batched or y.batched)
        out = (np.fmod if at.get("fmod", 0) else np.mod)(a, b) if op == "Mod" else _BINARY[op](a, b)
        return Value(np.asarray(out), x.batched or y.batched)
    if op == "Cast" and x.a.dtype == object:  # ints stay ints (symbolic entries too); no other type is read
        if at.get("to") not in (TensorProto.INT64, TensorProto.INT32):
            raise Unsupported(f"Cast of ints to {at.get('to')}")
        return x
    if op == "Cast":
        if at.get("to") not in _TYPES:
            raise Unsupported(f"Cast to {at.get('to')}")
        return Value(x.a.astype(_TYPES[at["to"]]), x.batched)
    if op == "Gather":
        axis, index = at.get("axis", 0) % max(x.rank, 1), ins[1].constant()
        got = np.take(x.a, index.astype(np.int64) if index.dtype == object else index, axis=axis)
        return Value(np.array(got, dtype=x.a.dtype) if not isinstance(got, np.ndarray) else got, x.batched)
    if op in ("Squeeze", "Unsqueeze"):
        axes = _axes(ins, 1, at)
        if op == "Squeeze":
            axes = [i for i in range(x.rank) if x.a.shape[i] == 1] if axes is None else [a % x.rank for a in axes]
            return Value(np.squeeze(x.a, axis=tuple(axes)), x.batched)
        out = x.a
        for a in sorted(a % (x.rank + len(axes)) for a in axes):
            out = np.expand_dims(out, a)
        return Value(out, x.batched)
    if op == "Concat":  # a scalar taken as one entry
        batched, axis = any(v.batched for v in ins), at.get("axis", 0)
        parts = [v.lifted(n) if batched else v.a for v in ins]
        parts = [p[None] if v.rank == 0 else p for p, v in zip(parts, ins)]
        if not -max(x.rank, 1) <= axis < max(x.rank, 1):
            raise Unsupported(f"Concat along axis {axis}")
        return Value(np.concatenate(parts, axis=axis % max(x.rank, 1)), batched)
    if op == "Slice":
        if len(ins) < 3:
            starts, ends = at["starts"], at["ends"]
            axes, steps = at.get("axes", list(range(len(starts)))), [1] * len(starts)
        else:
            starts, ends = ins[1].constant().reshape(-1), ins[2].constant().reshape(-1)
            axes = _axes(ins, 3, {}) or list(range(len(starts)))
            steps = ins[4].constant().reshape(-1) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        index = [slice(None)] * x.a.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[int(a) % x.rank] = slice(int(s), int(e), int(st))
        return Value(x.a[tuple(index)], x.batched)
    if op == "Reshape":
        target = [int(v) for v in ins[1].constant().reshape(-1)]
        real = x.a.shape[:x.rank]
        target = [real[i] if d == 0 and not at.get("allowzero", 0) else d for i, d in enumerate(target)]
        return Value(x.a.reshape(target + ([x.a.shape[-1]] if x.batched else [])), x.batched)
    if op == "Where":
        batched = any(v.batched for v in ins)
        parts = [v.lifted(n) if batched else v.a for v in ins]
        return Value(np.where(*parts), batched)
    if op == "ReduceProd" and x.a.dtype == object:  # of ints (a flatten's length)
        if _axes(ins, 1, at) is not None and x.rank > 1:
            raise Unsupported("ReduceProd along some axes")
        prod = math.prod(int(v) for v in x.a.reshape(-1))
        return Value(np.array(prod, dtype=object).reshape((1,) if at.get("keepdims", 1) else ()), x.batched)
    raise Unsupported(op)


def size_at_lengths(sub: onnx.ModelProto, base: Sequence[int], axis: int, index: int,
                    lengths: np.ndarray) -> np.ndarray:
    """Entry ``index`` of the size ``sub`` computes from its input's shape ``base`` with ``axis`` at each of
    ``lengths`` (int64), as one array; raises :class:`Unsupported`."""
    n = len(lengths)
    rows = np.repeat(np.asarray(base, np.int64)[:, None], n, axis=1)
    rows[axis] = lengths
    env: dict[str, Value] = {t.name: Value(numpy_helper.to_array(t), False) for t in sub.graph.initializer}
    for node in sub.graph.node:
        if node.op_type == "Shape" and node.input[0] != sub.graph.input[0].name:
            raise Unsupported("a Shape of another tensor")
        ins = [env.get(i) if i else None for i in node.input]
        if node.op_type != "Shape" and any(i and i not in env for i in node.input):
            raise Unsupported(f"{node.op_type} reads a tensor not computed here")
        env[node.output[0]] = node_value(node, ins, n, lambda _: Value(rows, True))
        if len([o for o in node.output if o]) > 1:
            raise Unsupported(f"{node.op_type} with several outputs")
    out = env[sub.graph.output[0].name]
    flat = out.lifted(n).reshape(-1, n)
    return flat[index].astype(np.int64)

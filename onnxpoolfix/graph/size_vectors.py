"""A size subgraph (:func:`~onnxpoolfix.graph.size_subgraph.size_subgraph`) evaluated at many input lengths at
once, in numpy: every tensor carries one trailing axis more, one entry per length. onnxruntime runs the
subgraph one length at a time (a session run each, ~20 us), which bounds how far the float32 and double
readings of a computed size can be compared; this reaches every length float32 counts exactly (2**24) in a
fraction of a second. Only the ops size arithmetic uses, with ONNX's semantics (integer Div and Cast truncate,
Mod follows ``fmod``); any other op is :class:`Unsupported`, and the caller keeps onnxruntime's reading alone.
"""
from __future__ import annotations

from collections.abc import Sequence

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


def _mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    return np.fmod(a, b) if fmod else np.mod(a, b)


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _trunc_div, "Max": np.maximum,
           "Min": np.minimum, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
           "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or}
_UNARY = {"Floor": np.floor, "Ceil": np.ceil, "Neg": np.negative, "Abs": np.abs, "Round": np.round, "Sign": np.sign,
          "Not": np.logical_not, "Identity": lambda a: a}


class _Value:
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


def _op(node: onnx.NodeProto, ins: list, n: int, shape_rows: np.ndarray) -> _Value:
    op, at = node.op_type, attributes(node)
    if node.domain not in ("", "ai.onnx"):
        raise Unsupported(op)
    if op == "Constant":
        if "value" in at:
            return _Value(numpy_helper.to_array(at["value"]), False)
        for key, dt in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                        ("value_ints", np.int64)):
            if key in at:
                return _Value(np.array(at[key], dt), False)
        raise Unsupported("Constant")
    if op == "Shape":
        return _Value(shape_rows[at.get("start", 0):at.get("end", None)], True)
    x = ins[0]
    if x is None:
        raise Unsupported(op)
    if op in _UNARY:
        return _Value(_UNARY[op](x.a), x.batched)
    if op in ("Max", "Min") and len(ins) > 2:  # variadic: folded pairwise
        folded = x
        for y in ins[1:]:
            folded = _op(onnx.helper.make_node(op, ["a", "b"], ["c"]), [folded, y], n, shape_rows)
        return folded
    if op in _BINARY or op == "Mod":
        y = ins[1] if len(ins) == 2 else None
        if y is None:
            raise Unsupported(f"{op} of {len(ins)} inputs")
        # an unbatched operand gets the length axis as a 1: numpy then aligns the real dims as ONNX does
        a = x.a if x.batched or not y.batched else x.a[..., None]
        b = y.a if y.batched or not x.batched else y.a[..., None]
        out = _mod(a, b, at.get("fmod", 0)) if op == "Mod" else _BINARY[op](a, b)
        return _Value(np.asarray(out), x.batched or y.batched)
    if op == "Cast":
        if at.get("to") not in _TYPES:
            raise Unsupported(f"Cast to {at.get('to')}")
        return _Value(x.a.astype(_TYPES[at["to"]]), x.batched)
    if op == "Gather":
        axis = at.get("axis", 0) % max(x.rank, 1)
        return _Value(np.take(x.a, ins[1].constant(), axis=axis), x.batched)
    if op in ("Squeeze", "Unsqueeze"):
        axes = _axes(ins, 1, at)
        if op == "Squeeze":
            axes = [i for i in range(x.rank) if x.a.shape[i] == 1] if axes is None else [a % x.rank for a in axes]
            return _Value(np.squeeze(x.a, axis=tuple(axes)), x.batched)
        out = x.a
        for a in sorted(a % (x.rank + len(axes)) for a in axes):
            out = np.expand_dims(out, a)
        return _Value(out, x.batched)
    if op == "Concat":
        batched = any(v.batched for v in ins)
        parts = [v.lifted(n) if batched else v.a for v in ins]
        return _Value(np.concatenate(parts, axis=at["axis"] % x.rank), batched)
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
        return _Value(x.a[tuple(index)], x.batched)
    if op == "Reshape":
        target = [int(v) for v in ins[1].constant().reshape(-1)]
        real = x.a.shape[:x.rank]
        target = [real[i] if d == 0 and not at.get("allowzero", 0) else d for i, d in enumerate(target)]
        return _Value(x.a.reshape(target + ([x.a.shape[-1]] if x.batched else [])), x.batched)
    if op == "Where":
        batched = any(v.batched for v in ins)
        parts = [v.lifted(n) if batched else v.a for v in ins]
        return _Value(np.where(*parts), batched)
    raise Unsupported(op)


def size_at_lengths(sub: onnx.ModelProto, base: Sequence[int], axis: int, index: int,
                    lengths: np.ndarray) -> np.ndarray:
    """Entry ``index`` of the size ``sub`` computes from its input's shape ``base`` with ``axis`` at each of
    ``lengths`` (int64), as one array; raises :class:`Unsupported`."""
    n = len(lengths)
    rows = np.repeat(np.asarray(base, np.int64)[:, None], n, axis=1)
    rows[axis] = lengths
    env: dict[str, _Value] = {t.name: _Value(numpy_helper.to_array(t), False) for t in sub.graph.initializer}
    for node in sub.graph.node:
        if node.op_type == "Shape" and node.input[0] != sub.graph.input[0].name:
            raise Unsupported("a Shape of another tensor")
        ins = [env.get(i) if i else None for i in node.input]
        if node.op_type != "Shape" and any(i and i not in env for i in node.input):
            raise Unsupported(f"{node.op_type} reads a tensor not computed here")
        env[node.output[0]] = _op(node, ins, n, rows)
        if len([o for o in node.output if o]) > 1:
            raise Unsupported(f"{node.op_type} with several outputs")
    out = env[sub.graph.output[0].name]
    flat = out.lifted(n).reshape(-1, n)
    return flat[index].astype(np.int64)

"""Locate PyTorch's leftover adaptive pooling nodes, in every encoding seen in the wild.

Two encodings exist (README.md, 'What it replaces'):

- ``aten-op``: op_type ``adaptive_{avg,max}_pool{1,2,3}d`` in domain ``org.pytorch.aten``
  (torch >= 1.13 with ONNX_FALLTHROUGH or ONNX_ATEN_FALLBACK).
- ``ATen-attr``: op_type ``ATen`` with string attribute ``operator`` naming the op (and ``overload_name``),
  in domain ``org.pytorch.aten`` or the default domain (older torch under ONNX_ATEN_FALLBACK).

The output size is the node's second input, traced back through Identity/Cast/Squeeze-free chains to a
Constant node or an initializer, or an ``output_size`` attribute. Anything unreadable raises
:class:`UnsupportedNodeError` naming the node.
"""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import InvalidModelError, UnsupportedNodeError
from ..graph import attributes, read_names
from ..spec import InputDim, PoolNode, RuntimeDim

ATEN_DOMAIN = "org.pytorch.aten"
# an output size beyond this is a corrupt constant (no real axis is 2**31 long), not something to lower
_MAX_SIZE = 2**31 - 1
_HINT_MALFORMED = "the node is not as torch exports it; re-export the model (torch.onnx.export with " \
                  "operator_export_type=ONNX_FALLTHROUGH) or fix the node"
_OP_RE = re.compile(r"^adaptive_(avg|max)_pool([123])d$")


def aten_operator(node: onnx.NodeProto) -> str | None:
    """The aten op a node stands for, or None if it is not an adaptive pooling leftover."""
    if node.domain == ATEN_DOMAIN and _OP_RE.match(node.op_type):
        return node.op_type
    if node.op_type == "ATen" and node.domain in ("", ATEN_DOMAIN, "ai.onnx"):
        for a in node.attribute:
            if a.name == "operator":
                op = a.s.decode("utf-8", "replace") if a.type == onnx.AttributeProto.STRING else ""
                if _OP_RE.match(op):
                    return op
    return None


def is_pool_leftover(node: onnx.NodeProto) -> bool:
    return aten_operator(node) is not None


class _NotConstant(Exception):
    """An output size that is not a constant; ``str(e)`` says why."""


class _Malformed(Exception):
    """An output size whose data cannot be read; ``str(e)`` says why."""


def _to_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - data that does not match dims/dtype, unknown dtype, ...
        raise _Malformed(f"{what} is malformed ({' '.join(str(e).split())[:120]})") from None


class _SizeEvaluator:
    """Evaluates an output-size tensor to a list of ints and :class:`InputDim` entries.

    Follows Constant, initializers, Identity, Cast, Concat, Unsqueeze, Squeeze, Reshape-to-1D and
    ``Gather(Shape(input), const)`` / ``Shape(input, start, end)`` where ``input`` is the pooled tensor.
    """

    def __init__(self, graph: onnx.GraphProto, opset: int | None = None, scope: Iterable[onnx.GraphProto] = ()):
        graphs = [*reversed(list(scope)), graph]  # a later one's names win: the body's own, then the outermost's
        self.producers = {o: n for g in graphs for n in g.node for o in n.output if o}
        self.initializers = {t.name: t for g in graphs for t in g.initializer}
        self.graph_inputs = {i.name for g in graphs for i in g.input}
        self.pooled_input = ""
        self.opset = opset

    def size(self, name: str, pooled_input: str) -> np.ndarray:
        """The output size ``name`` of a node pooling ``pooled_input``."""
        self.pooled_input = pooled_input
        return self.value(name)

    def constant(self, name: str, depth: int = 0) -> np.ndarray:
        value = self.value(name, depth)
        if any(isinstance(v, InputDim) for v in value.reshape(-1).tolist()):
            raise _NotConstant(f"'{name}' depends on the input's shape")
        return value

    def value(self, name: str, depth: int = 0) -> np.ndarray:
        """A numpy array (dtype object when it holds InputDim entries)."""
        if depth > 64:
            raise _NotConstant(f"'{name}' is too deep a computation")
        if name in self.initializers:
            t = self.initializers[name]
            if t.data_location == onnx.TensorProto.EXTERNAL:  # (load_model inlines small ones)
                raise _NotConstant(f"'{name}' is stored in external data")
            return _to_array(t, f"initializer '{name}'")
        node = self.producers.get(name)
        if node is None:
            kind = "a graph input" if name in self.graph_inputs else "not produced by any node"
            raise _NotConstant(f"'{name}' is {kind}")
        op = node.op_type
        attrs = attributes(node)
        d = depth + 1
        if op == "Constant":
            if "value" in attrs:
                if attrs["value"].data_location == onnx.TensorProto.EXTERNAL:
                    raise _NotConstant(f"the Constant '{node.name}' is stored in external data")
                return _to_array(attrs["value"], f"the Constant '{node.name or name}'")
            for key in ("value_ints", "value_int", "value_floats", "value_float"):
                if key in attrs:
                    return np.array(attrs[key])
            raise _NotConstant(f"the Constant '{node.name}' has no numeric value")
        if op in ("Identity", "Cast"):
            v = self.value(node.input[0], d)  # a Cast of constants cast as ONNX does (300 to uint8 is 44)
            return _fold(node, [v], name, self.opset) if op == "Cast" and v.dtype != object else v
        if op == "Shape" and node.input[0] == self.pooled_input:
            # opset 15 Shape has start/end attributes; the rank is resolved later, so keep axes symbolic
            start = attrs.get("start", 0)
            end = attrs.get("end")
            if start < 0 or (end is not None and end < 0):
                raise _NotConstant("a Shape slice with negative bounds")
            stop = end if end is not None else start + 8
            return np.array([InputDim(a) for a in range(start, stop)], dtype=object)
        if op == "Gather":
            data = self.value(node.input[0], d)
            idx = self.constant(node.input[1], d)
            if attrs.get("axis", 0) != 0 or data.ndim != 1:
                raise _NotConstant("a Gather other than along axis 0 of a 1D tensor")
            if data.dtype == object and np.any(idx < 0):
                # Gather(Shape(x), -1): resolve against the rank later, when shapes are known
                if not all(isinstance(v, InputDim) and v.axis == i for i, v in enumerate(data.tolist())):
                    raise _NotConstant("a negative Gather index into a sliced Shape")
                return np.vectorize(lambda i: InputDim(int(i)), otypes=[object])(idx)
            return np.asarray(data[idx])
        if op == "Concat":
            parts = [self.value(i, d).reshape(-1) for i in node.input]
            if any(p.dtype == object for p in parts):
                return np.concatenate([p.astype(object) for p in parts])
            return np.concatenate(parts)
        if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten"):
            v = self.value(node.input[0], d)
            return v.reshape(-1) if op != "Squeeze" or v.size != 1 else v.reshape(())
        if node.domain in ("", "ai.onnx") and node.input and not op.startswith(_NONDETERMINISTIC):
            # any other standard op over constants (F.interpolate(mode="area", scale_factor=...) at a static
            # size: Constant -> Floor -> Unsqueeze -> Concat) is folded with onnx's reference implementation
            try:
                args = [self.constant(i, d) if i else None for i in node.input]
            except _NotConstant:
                raise _NotConstant(f"'{name}' is computed at runtime by a {op} node") from None
            return _fold(node, args, name, self.opset)
        raise _NotConstant(f"'{name}' is computed at runtime by a {op} node")

    def from_shapes(self, name: str) -> bool:
        """``name`` is computed from tensor sizes (``Shape``) and constants only: what an exporter writes for
        a size computed from the input's size, never a data-dependent one (a graph input's values)."""
        seen: set[str] = set()
        pending = [name]
        while pending:
            t = pending.pop()
            if not t or t in seen:
                continue
            seen.add(t)
            if t in self.initializers:
                if self.initializers[t].data_location == onnx.TensorProto.EXTERNAL:
                    return False
                continue
            node = self.producers.get(t)
            if node is None or node.op_type.startswith(_NONDETERMINISTIC) or node.domain not in ("", "ai.onnx"):
                return False
            if node.op_type in ("Shape", "Size", "Constant"):
                continue
            if len(seen) > 256:
                return False
            pending.extend(node.input)
        return True

    def entries(self, name: str, rank: int) -> np.ndarray:
        """The ``rank`` entries of a size tensor the graph computes at run time: each one that can be read
        (a constant, or the input's own length) as :meth:`value` reads it, the others :class:`RuntimeDim`
        (read from ``name`` at run time). Entries are told apart through a Concat (of Unsqueezed scalars, as
        torch writes ``(x.shape[2] // 3 + 1, 5)``); any other computation makes every entry runtime."""
        top = name
        while top in self.producers and self.producers[top].op_type in ("Identity", "Cast"):
            top = self.producers[top].input[0]
        node = self.producers.get(top)
        runtime = np.array([RuntimeDim(name, j) for j in range(rank)], dtype=object)
        if node is None or node.op_type != "Concat":
            return runtime
        parts: list[np.ndarray | None] = []
        for i in node.input:
            try:
                parts.append(self.value(i).reshape(-1))
            except _NotConstant:
                parts.append(None)
        known = sum(len(p) for p in parts if p is not None)
        unknown = sum(p is None for p in parts)
        # one unknown part holds what the others leave; several hold one entry each where the count adds up
        width = rank - known if unknown == 1 else 1 if known + unknown == rank else 0
        if width < 1:
            return runtime
        out: list = []
        for p in parts:
            if p is None:
                out.extend(RuntimeDim(name, len(out) + j) for j in range(width))
            else:
                out.extend(p.tolist())
        return np.array(out, dtype=object) if len(out) == rank else runtime


_NONDETERMINISTIC = ("Random", "Bernoulli", "Multinomial")


def _fold(node: onnx.NodeProto, args: list, name: str, opset: int | None) -> np.ndarray:
    """``node``'s output ``name`` for constant inputs ``args`` (None: an omitted optional input)."""
    from onnx.reference import ReferenceEvaluator

    one = onnx.NodeProto()
    one.CopyFrom(node)
    one.name = "fold"
    del one.input[:]
    one.input.extend(f"arg{i}" if a is not None else "" for i, a in enumerate(args))
    graph = helper.make_graph([one], "size", [], [helper.make_empty_tensor_value_info(o) for o in node.output if o],
                              initializer=[numpy_helper.from_array(np.asarray(a), f"arg{i}")
                                           for i, a in enumerate(args) if a is not None])
    imports = [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
    try:
        outs = ReferenceEvaluator(helper.make_model(graph, opset_imports=imports)).run(None, {})
    except Exception as e:  # noqa: BLE001 - whatever the reference implementation objects to
        raise _NotConstant(f"'{name}' ({node.op_type} over constants) cannot be evaluated: "
                           f"{' '.join(str(e).split())[:100]}") from None
    return np.asarray(outs[[o for o in node.output if o].index(name)])


def find_pool_nodes(graph: onnx.GraphProto, opset: int | None = None, *,
                    scope: Iterable[onnx.GraphProto] = ()) -> list[PoolNode]:
    """Every leftover adaptive pooling node of ``graph`` itself, in graph order.

    Raises :class:`UnsupportedNodeError` for a leftover whose output size cannot be read. Leftovers inside
    its If/Loop/Scan bodies are :mod:`.bodies`'. ``scope``: the graphs enclosing ``graph`` (a body), whose
    constants and initializers an output size may be read from.
    """
    read = read_names(graph) | {o.name for o in graph.output}
    found: list[PoolNode] = []
    sizes = _SizeEvaluator(graph, opset, scope)  # its tables built once (a graph may hold hundreds of leftovers)
    for index, node in enumerate(graph.node):
        op = aten_operator(node)
        if op is None:
            continue
        m = _OP_RE.match(op)
        kind, rank = m.group(1), int(m.group(2))
        name = node.name or f"{op}_{index}"
        label = f"{op} node '{name}'"
        if not node.input or not node.input[0]:
            raise UnsupportedNodeError(f"{label} has no input tensor", _HINT_MALFORMED)
        size_attr = next((a for a in node.attribute if a.name == "output_size"), None)
        size_input = node.input[1] if len(node.input) > 1 and node.input[1] else None
        if size_input is not None:
            try:
                value = sizes.size(size_input, node.input[0])
            except _Malformed as e:
                raise InvalidModelError(f"{label}: its output size cannot be read: {e}",
                                        "the model is malformed; re-export it") from None
            except (ValueError, IndexError, TypeError, OverflowError) as e:  # e.g. a Gather index out of range
                raise UnsupportedNodeError(
                    f"{label}: its output size cannot be evaluated ({' '.join(str(e).split())[:120]})",
                    _HINT_MALFORMED) from None
            except _NotConstant as e:
                # a size the graph itself computes (by some node), as opposed to one that cannot be read at all
                # (external data, a corrupt chain)
                computed = "computed at runtime" in str(e) or "depends on the input's shape" in str(e)
                if not computed or not sizes.from_shapes(size_input):
                    raise UnsupportedNodeError(
                        f"{label}: its output size is not a constant ({e})",
                        "export with a fixed output size (ints, or None for 'same as input')",
                    ) from None
                # computed by the graph (from the input's size): the lowering reads it at run time
                value = sizes.entries(size_input, rank)
        elif size_attr is not None:
            value = np.array(list(size_attr.ints), dtype=np.int64)
        else:
            raise UnsupportedNodeError(
                f"{label} has no output size (neither a second input nor an output_size attribute)", _HINT_MALFORMED)
        output_size = _parse_size(value, rank, label)

        outputs = list(node.output)
        if not outputs or not outputs[0]:
            raise UnsupportedNodeError(f"{label} has no output", _HINT_MALFORMED)
        expected = 2 if kind == "max" else 1
        if len(outputs) > expected:
            raise UnsupportedNodeError(f"{label} has {len(outputs)} outputs; {op} has {expected}", _HINT_MALFORMED)
        indices = outputs[1] if len(outputs) > 1 and outputs[1] else None
        unused: tuple[str, ...] = ()
        if indices is not None and indices not in read:
            unused, indices = (indices,), None
        found.append(PoolNode(index, name, op, kind, rank,
                              "aten-op" if node.op_type != "ATen" else "ATen-attr",
                              node.input[0], outputs[0], indices, unused, output_size, size_input))
    return found


def _parse_size(value: np.ndarray, rank: int, label: str) -> tuple[int | InputDim | RuntimeDim, ...]:
    flat = np.asarray(value).reshape(-1).tolist()
    if len(flat) != rank:
        raise UnsupportedNodeError(
            f"{label}: output size {_short(flat)} has {len(flat)} entries; a {rank}D adaptive pool needs {rank}",
            _HINT_MALFORMED)
    out: list[int | InputDim] = []
    for v in flat:
        if isinstance(v, (InputDim, RuntimeDim)):
            out.append(v)
            continue
        if (isinstance(v, float) and not (np.isfinite(v) and v == round(v))) or isinstance(v, bool) \
                or not isinstance(v, (int, float)):
            raise UnsupportedNodeError(f"{label}: output size {_short(flat)} is not integer", _HINT_MALFORMED)
        if v < 1:
            raise UnsupportedNodeError(f"{label}: output size {_short(flat)} has a zero or negative entry",
                                       "every output size must be >= 1; re-export with the intended size")
        if v > _MAX_SIZE:
            raise UnsupportedNodeError(f"{label}: output size {_short(flat)} has an entry over {_MAX_SIZE}",
                                       "no tensor axis is that long; re-export with the intended size")
        out.append(int(v))
    return tuple(out)


def _short(values: list) -> str:
    text = str(values)
    return text if len(text) <= 80 else text[:77] + "..."

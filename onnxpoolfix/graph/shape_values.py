"""Sizes that a graph computes from static shapes, evaluated here where onnx's data propagation does not.

onnx propagates the values of ``Shape -> Slice -> Concat`` chains only from Shape-15 on, so an export at
opset 9-14 (the TorchScript exporter's ``x.flatten(2)``, ``x.view(n, c, -1)``: a Reshape to
``Concat(Slice(Shape(x)), [-1])``) leaves the Reshape's output, and every pool after it, of unknown shape.
Nor, before Unsqueeze-13/Concat-13, a static view's target built from constants with constant folding off
(``Concat(Unsqueeze(2), Unsqueeze(6), Unsqueeze(143))``). Nor, at any opset, a Reshape of a size: torch's
``f[:, :, : h // 4 * 4]`` ends its Slice at ``Reshape(h // 4 * 4, [1])``, and the Slice was unsized on every axis.
Where the shapes such a chain reads are static, :func:`fold_size_chains` computes its values with numpy
(:func:`~.size_vectors.node_value` over ints and symbolic entries) and hands them to a second inference as
initializers; an If whose condition they decide (torch's squeeze of a dim it did not know) is seen there as
the branch it takes. Only for shape inference: the model written is never changed (the If stays, exact).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from . import attributes, keep_only, subgraphs
from .size_vectors import Unsupported, Value, node_value

#: a folded value larger than this is no size vector
_MAX_ELEMENTS = 64
_INT_TYPES = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


class Dim:
    """Entry ``axis`` of ``Shape(tensor)`` where that dim is symbolic (a value only a Reshape can copy)."""

    __slots__ = ("tensor", "axis")

    def __init__(self, tensor: str, axis: int):
        self.tensor, self.axis = tensor, axis


def _evaluate(node: onnx.NodeProto, ins: list, dims: dict) -> np.ndarray | None:
    """``node``'s output (:func:`~.size_vectors.node_value` over object arrays); None where not known."""
    if node.op_type != "Shape" and (not ins or any(v is None for v in (ins[:3] if node.op_type == "Slice" else ins))):
        return None
    got = node_value(node, [None if v is None else Value(v, False) for v in ins], 1, lambda nd: _shape(nd, dims))
    return np.asarray(got.a, dtype=object)  # (an entry indexed out of a 0-d array, as an array)


def _constant(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.t.data_type in _INT_TYPES and not a.t.HasField("data_location"):
            return numpy_helper.to_array(a.t).astype(object)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=object)
        if a.name == "value_int":
            return np.array(a.i, dtype=object)
    return None


def _shape(node: onnx.NodeProto, dims: dict) -> Value:
    shape = dims.get(node.input[0])
    if shape is None:
        raise Unsupported("a Shape of a tensor whose rank is not known")
    out = np.empty(len(shape), dtype=object)
    out[:] = [d if isinstance(d, int) else Dim(node.input[0], a) for a, d in enumerate(shape)]
    return Value(out, False)


_FOLDED = {"Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Identity", "Add", "Sub", "Mul",
           "Div", "ReduceProd", "Constant", "Equal"}


def _known(v: np.ndarray) -> np.ndarray | None:
    """``v`` as int64 where every entry is known."""
    flat = list(v.reshape(-1))
    return np.array(flat, np.int64).reshape(v.shape) if all(isinstance(e, (int, np.integer)) for e in flat) else None


def _reshape_output(v: np.ndarray, data: str, allowzero: int, dims: dict, shaped: dict) -> list | None:
    """The output dims (int, symbol name or None) of a Reshape of ``data`` to the partly known target ``v``;
    None where its rank is not known either."""
    if v.ndim != 1:
        return None
    src, names = dims.get(data), _dim_names(shaped, data)
    out: list = []
    for a, e in enumerate(v):
        if isinstance(e, Dim):
            p = _dim_names(shaped, e.tensor)
            out.append(p[e.axis] if p and p[e.axis] else None)
        elif not isinstance(e, (int, np.integer)):
            out.append(None)
        elif e == 0 and not allowzero:  # copies the data's dim there
            if src is None or a >= len(src):
                return None
            out.append(src[a] if src[a] is not None else names[a])
        else:
            out.append(int(e))
    if out.count(-1) == 1:
        known = [d for d in out if isinstance(d, int) and d != -1]
        total = int(np.prod(src)) if src is not None and all(isinstance(d, int) for d in src) else None
        rest = int(np.prod(known)) if len(known) == len(out) - 1 else None
        out[out.index(-1)] = total // rest if total is not None and rest and total % rest == 0 else None
    return None if any(isinstance(d, int) and d < 0 for d in out) else out


def fold_size_chains(inferred: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``inferred`` (a light copy after one shape inference) whose nodes read the sizes computed
    from static shapes as initializers, and whose Reshapes to partly known targets (symbolic dims copied
    through) have their outputs declared (:func:`_reshape_output`), for inference to run again; None where
    no such size feeds a node of unknown output shape."""
    g = inferred.graph
    dims: dict[str, tuple] = {}
    typed: dict[str, onnx.TypeProto.Tensor] = {}  # the last declaration of each name, as below
    shaped: dict[str, onnx.TypeProto.Tensor] = {}
    for field in (g.input, g.value_info, g.output):
        for vi in field:
            if vi.type.HasField("tensor_type"):
                tt = typed[vi.name] = vi.type.tensor_type
                if tt.HasField("shape"):
                    shaped[vi.name] = tt
                    dims[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
    values: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t).astype(object) for t in g.initializer if
                                     t.data_type in _INT_TYPES and not t.HasField("data_location")
                                     and np.prod(t.dims) <= _MAX_ELEMENTS}
    measured: set[str] = set()  # values computed from a Shape
    computed: set[str] = set()  # and from constants, which onnx folds only from Unsqueeze-13/Concat-13 on
    conditions: set[str] = set()  # Equal of a value computed from a Shape
    for node in g.node:
        if node.op_type not in _FOLDED | {"Reshape"} or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        if node.op_type == "Constant":  # a malformed one raises: the caller keeps the first inference
            got = _constant(node)
        else:
            try:
                got = _evaluate(node, [values.get(x) if x else None for x in node.input], dims)
            except (Unsupported, ValueError, IndexError, KeyError, TypeError, ZeroDivisionError, AttributeError):
                got = None
        if got is not None and got.size <= _MAX_ELEMENTS:
            values[node.output[0]] = got
            if node.op_type == "Equal":  # a bool: only an If's condition here, never handed to inference
                if any(x in measured for x in node.input):
                    conditions.add(node.output[0])
            elif node.op_type == "Shape" or any(x in measured for x in node.input):
                measured.add(node.output[0])
            elif node.op_type != "Constant":
                computed.add(node.output[0])
    decided = {k: _taken(node, values) for k, node in enumerate(g.node) if node.op_type == "If" and node.domain
               in ("", "ai.onnx") and node.input[0] in conditions and not _sized(dims.get(node.output[0]))}
    decided = {k: b for k, b in decided.items() if b is not None}
    out = None  # copied only where something changes (most second rounds change nothing)
    if decided:
        out = onnx.ModelProto()
        out.CopyFrom(inferred)
        _inline_branches(out.graph, decided)
    added: dict[str, np.ndarray] = {}
    declared: dict[str, tuple[int, list]] = {}  # Reshape outputs sized here: (elem type, dims)
    edits: list[tuple[int, int, str]] = []  # (node, input, folded name)
    for k, node in enumerate(g.node if out is None else out.graph.node):
        if node.op_type in _FOLDED and node.output[0] in values or node.domain not in ("", "ai.onnx") or all(
                _sized(dims.get(o)) for o in node.output if o):
            continue  # a value folded here (its readers take it); onnx infers no other domain's nodes
        for j, x in enumerate(node.input):
            v = values.get(x) if x in measured or x in computed else None
            if v is None:
                continue
            target = _known(v)
            elem = typed[node.input[0]].elem_type if target is None and node.input[0] in typed else 0
            if elem and node.op_type == "Reshape" and j == 1:
                shape = _reshape_output(v, node.input[0], attributes(node).get("allowzero", 0), dims, shaped)
                if shape is not None:
                    declared[node.output[0]] = (elem, shape)
            if target is not None:
                name = f"{x}/onnxpoolfix_folded_{len(added)}"
                added[name] = target
                edits.append((k, j, name))
    if not added and not declared and not decided:
        return None
    if out is None:
        out = onnx.ModelProto()
        out.CopyFrom(inferred)
    for k, j, name in edits:
        out.graph.node[k].input[j] = name
    out.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in added.items())
    keep_only(out.graph.value_info, lambda vi: vi.name not in declared)
    for vi in out.graph.output:
        if vi.name in declared:
            vi.CopyFrom(onnx.helper.make_tensor_value_info(vi.name, *declared.pop(vi.name)))
    out.graph.value_info.extend(onnx.helper.make_tensor_value_info(n, e, d) for n, (e, d) in declared.items())
    return out


def _dim_names(shaped: dict, name: str) -> tuple | None:
    """The symbolic dims' names of a shaped tensor (``dims``' twin), read only for the few a Reshape needs."""
    tt = shaped.get(name)
    return None if tt is None else tuple(d.dim_param or None for d in tt.shape.dim)


def _taken(node: onnx.NodeProto, values: dict) -> onnx.GraphProto | None:
    """The branch an If takes at every size, where static dims decide its condition (none where a branch holds
    a subgraph of its own, which the inlining below does not rename into)."""
    cond = values.get(node.input[0])
    cond = None if cond is None or cond.size != 1 else _known(cond)
    if cond is None:
        return None
    branch = attributes(node).get("then_branch" if cond.reshape(-1)[0] else "else_branch")
    nested = any(subgraphs(n) for n in branch.node)
    return None if nested or len(branch.output) != len(node.output) else branch


def _inline_branches(graph: onnx.GraphProto, decided: dict[int, onnx.GraphProto]) -> None:
    """Each decided If of ``graph`` (index -> the branch it takes) replaced by that branch's nodes (its own names
    made unique), its outputs copied to the If's by Identity: what inference then sees (torch's squeeze of a dim
    it did not know, after a leftover, stopped inference at the If: ranks of the branches differ)."""
    nodes = []
    for k, node in enumerate(graph.node):
        branch = decided.get(k)
        if branch is None:
            nodes.append(node)
            continue
        own = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
        name = {x: f"{x}/onnxpoolfix_branch_{k}" for x in own}
        for t in branch.initializer:
            graph.initializer.append(t)
            graph.initializer[-1].name = name[t.name]
        for n in branch.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.input[:] = [name.get(x, x) for x in n.input]
            copy.output[:] = [name.get(x, x) for x in n.output]
            nodes.append(copy)
        nodes += [onnx.helper.make_node("Identity", [name.get(o.name, o.name)], [y])
                  for o, y in zip(branch.output, node.output)]
    del graph.node[:]
    graph.node.extend(nodes)


def _sized(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)

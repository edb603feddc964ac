"""The graph's own computation of an output size (:class:`~onnxpoolfix.spec.RuntimeDim`), cut out as a model
of its own: from the pooled tensor's ``Shape`` to the size tensor (``Floor(Shape(x)[2] * 0.6)``, torch's
``x.shape[2] // 3 + 1``). Used to fold a computed size where the input's size is static, by the check to
aim at sizes where the output is smaller, equal or larger, and by the window proof to know which output
sizes occur."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

from ..spec import RuntimeDim
from .shapes import type_dims


def size_subgraph(model: onnx.ModelProto, size_tensor: str, pooled: str | None, elem: int) -> onnx.ModelProto | None:
    """A model with input ``pooled`` (dtype ``elem``, any shape) and output ``size_tensor``, holding the nodes
    between them; None where the size reads anything but ``pooled``'s shape and constants. ``pooled`` None: the
    one tensor whose shape the size reads, whichever it is (a dynamo file reads the graph input's shape for a
    pool behind a convolution), its dtype looked up (``elem`` unused); None where it reads more than one."""
    producer = {o: nd for nd in model.graph.node for o in nd.output if o}
    inits = {t.name for t in model.graph.initializer}
    picked, pending, seen, read = {}, [size_tensor], set(), set()
    while pending:
        t = pending.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        if t in inits:
            continue
        nd = producer.get(t)
        if nd is None or nd.domain not in ("", "ai.onnx") or len(seen) > 512:
            return None
        if nd.op_type == "Shape":
            read.add(nd.input[0])
        picked[id(nd)] = nd
        if nd.op_type != "Shape":
            pending.extend(nd.input)
    if pooled is None and len(read) == 1:
        (pooled,) = read
        elem = value_type(model, pooled)[0] or 0
    if not elem or read - {pooled}:
        return None
    nodes = [nd for nd in model.graph.node if id(nd) in picked]
    graph = helper.make_graph(nodes, "size", [helper.make_tensor_value_info(pooled, elem, None)],
                              [helper.make_empty_tensor_value_info(size_tensor)],
                              initializer=[t for t in model.graph.initializer if t.name in seen])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub


def value_type(model: onnx.ModelProto, name: str) -> tuple[int, tuple | None]:
    """``name``'s element type and dims (:func:`~.shapes.type_dims`) as the model's inputs, value_info or
    outputs declare them; ``(0, None)`` where none does."""
    g = model.graph
    return next((type_dims(v.type) for v in (*g.input, *g.value_info, *g.output) if v.name == name), (0, None))


def fold_static_sizes(model: onnx.ModelProto, specs: list) -> list:
    """``specs`` with each computed output size folded to its constant where the pooled input's size is
    static (a dynamic export bound with ``--input-shape``): the static lowerings then apply, as for a size the
    exporter folded itself. A size that also reads a symbolic (batch) dim, or that is 0, stays computed."""
    from onnx.reference import ReferenceEvaluator  # (a slow import, for this one use)

    out = []
    for s in specs:
        if not s.runtime_sizes or not all(isinstance(d, int) for d in s.in_sizes):
            out.append(s)
            continue
        sizes = list(s.node.output_size)
        for tensor in {e.tensor for e in sizes if isinstance(e, RuntimeDim)}:
            sub = size_subgraph(model, tensor, s.node.input, s.dtype)
            values = []
            for lead in (1, 2):  # symbolic leading dims at two values: the size must not depend on them
                shape = [d if isinstance(d, int) else lead for d in s.input_shape]
                try:
                    run = ReferenceEvaluator(fed_by_shape(sub)).run(None, {_SHAPE: np.array(shape, np.int64)})
                    values.append(np.asarray(run[0]).reshape(-1))
                except Exception:  # noqa: BLE001 - no subgraph, or one the reference cannot run: stays computed
                    values = []
                    break
            if len(values) == 2 and np.array_equal(values[0], values[1]):
                sizes = [int(values[0][e.index]) if isinstance(e, RuntimeDim) and e.tensor == tensor
                         and values[0][e.index] >= 1 else e for e in sizes]
        if any(isinstance(e, RuntimeDim) for e in sizes):
            out.append(s)
            continue
        lead = len(s.input_shape) - s.k
        out.append(replace(s, node=replace(s.node, output_size=tuple(sizes)),
                           output_shape=tuple(s.output_shape[:lead]) + tuple(sizes)))
    return out


def fed_by_shape(sub: onnx.ModelProto) -> onnx.ModelProto:
    """``sub`` with its input's shape (int64) as the input in place of the tensor: each ``Shape`` of it a Slice
    of that vector. The lengths compared then cost nothing to feed (a tensor of 2048 x 4096 x 4096 zeros
    would not be allocated)."""
    out = onnx.ModelProto()
    out.CopyFrom(sub)
    x = out.graph.input[0].name
    out.graph.input[0].CopyFrom(helper.make_tensor_value_info(_SHAPE, onnx.TensorProto.INT64, None))
    for k, nd in enumerate(out.graph.node):
        if nd.op_type == "Shape" and nd.input[0] == x and not nd.attribute:  # the whole shape (any opset)
            out.graph.node[k].CopyFrom(helper.make_node("Identity", [_SHAPE], list(nd.output)))
        elif nd.op_type == "Shape" and nd.input[0] == x:  # start/end: opset 15 on, Slice takes inputs there
            at = {a.name: a.i for a in nd.attribute}
            bounds = [f"{nd.output[0]}_{b}" for b in ("start", "end")]
            for name, v in zip(bounds, (at.get("start", 0), at.get("end", 2 ** 62))):
                out.graph.initializer.append(helper.make_tensor(name, onnx.TensorProto.INT64, [1], [v]))
            out.graph.node[k].CopyFrom(helper.make_node("Slice", [_SHAPE, *bounds], list(nd.output)))
    return out


_SHAPE = "onnxpoolfix_input_shape"


def sizes_at(sess, base: list[int], axis: int, index: int, lengths):
    """Entry ``index`` of the size a :func:`fed_by_shape` session computes, ``axis`` of ``base`` at each length:
    ``(n, size)`` pairs, ``size`` None where the subgraph fails at that length."""
    for n in lengths:
        shape = list(base)
        shape[axis] = n
        try:
            (value,) = sess.run(None, {_SHAPE: np.array(shape, np.int64)})
        except Exception:  # noqa: BLE001 - a length the size arithmetic refuses
            yield n, None
            continue
        yield n, int(np.asarray(value).reshape(-1)[index])

"""The graph's own computation of an output size (:class:`~onnxpoolfix.spec.RuntimeDim`), cut out as a model
of its own: from the pooled tensor's ``Shape`` to the size tensor (``Floor(Shape(x)[2] * 0.6)``, torch's
``x.shape[2] // 3 + 1``). Used to fold a computed size where the input's size is static, by the check to
aim at sizes where the output is smaller, equal or larger, and by the window proof to know which output
sizes occur."""
from __future__ import annotations

import onnx
from onnx import helper


def size_subgraph(model: onnx.ModelProto, size_tensor: str, pooled: str, elem: int) -> onnx.ModelProto | None:
    """A model with input ``pooled`` (dtype ``elem``, any shape) and output ``size_tensor``, holding the nodes
    between them; None where the size reads anything but ``pooled``'s shape and constants."""
    producer = {o: nd for nd in model.graph.node for o in nd.output if o}
    inits = {t.name for t in model.graph.initializer}
    picked, pending, seen = {}, [size_tensor], set()
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
        if nd.op_type == "Shape" and nd.input[0] != pooled:
            return None
        picked[id(nd)] = nd
        if nd.op_type != "Shape":
            pending.extend(nd.input)
    nodes = [nd for nd in model.graph.node if id(nd) in picked]
    graph = helper.make_graph(nodes, "size", [helper.make_tensor_value_info(pooled, elem, None)],
                              [helper.make_empty_tensor_value_info(size_tensor)],
                              initializer=[t for t in model.graph.initializer if t.name in seen])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub


def fold_static_sizes(model: onnx.ModelProto, specs: list) -> list:
    """``specs`` with each computed output size folded to its constant where the pooled input's size is
    static (a dynamic export bound with ``--input-shape``): the static lowerings then apply, as for a size the
    exporter folded itself. A size that also reads a symbolic (batch) dim, or that is 0, stays computed."""
    from dataclasses import replace

    import numpy as np
    from onnx.reference import ReferenceEvaluator

    from ..spec import RuntimeDim

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
                    x = np.zeros(shape, onnx.helper.tensor_dtype_to_np_dtype(s.dtype))
                    values.append(np.asarray(ReferenceEvaluator(sub).run(None, {s.node.input: x})[0]).reshape(-1))
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

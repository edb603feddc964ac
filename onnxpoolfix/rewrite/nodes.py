"""Graph surgery: put each plan's nodes where the leftover was, then tidy up.

- The replacement nodes take the leftover's place in graph.node, so topological order holds.
- The last replacement node writes into the ORIGINAL output tensor: downstream names, graph outputs and
  anything that refers to the tensor by name keep working.
- The output gets value_info (and a graph output its corrected shape), so shape inference flows past it.
- Constants that only fed output sizes, and the ``org.pytorch.aten`` opset import, go once unused.
"""
from __future__ import annotations

import logging
from typing import Sequence

import onnx

from ..frontends.leftovers import ATEN_DOMAIN
from ..graph import arrange, drop_unread, keep_only, nodes_deep, subgraphs
from ..graph.emit import Emitter, mark_emitted, op_types
from ..graph.shapes import PoolSpec, infer, make_value_info, type_dims
from ..plan.planner import Plan
from ..plan.pyramid import GroupPlan
from .pyramid import build_group

logger = logging.getLogger(__name__)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    """Every node and tensor name of the graph and of its subgraphs (If/Loop bodies): a fresh name must not
    shadow or duplicate one defined in a body either."""
    names = {n.name for n in graph.node if n.name}
    names.update(o for n in graph.node for o in n.output)
    names.update(i for n in graph.node for i in n.input)
    names.update(t.name for t in graph.initializer)
    names.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    for n in graph.node:
        for sub in subgraphs(n):
            names |= _all_names(sub)
    return names


def apply_plans(model: onnx.ModelProto, plans: Sequence[Plan], groups: Sequence[GroupPlan] = (), *,
                graph: onnx.GraphProto | None = None) -> tuple[list[list[str]], list[list[str]]]:
    """Rewrite ``model`` in place. Returns the op types emitted per plan, and per group level.

    A group's nodes all go where its earliest member was (its members' input exists there, and each
    member's output is read only after the member's own position); its other members' places go empty.
    ``graph``: the graph holding the plans' nodes, when it is a body (If branch, Loop body) of ``model``.
    """
    taken = _all_names(model.graph)  # fresh names unique in the whole model: a body must not shadow any
    graph = model.graph if graph is None else graph
    replacement: dict[int, list[onnx.NodeProto]] = {}
    emitted_ops: list[list[str]] = []
    constant_nodes = model.ir_version < 4  # IR 3 lists every initializer as a graph input: Constant nodes instead
    specs = [p.spec for p in plans] + [lv.spec for g in groups for lv in g.levels]
    if constant_nodes and graph is model.graph and any(s.opset < 9 for s in specs):
        # before opset 9 Constant holds float types only (the window tables are int64): IR 4, where an
        # initializer need not be an input and nothing else changes, takes them as initializers
        model.ir_version, constant_nodes = 4, False
    for p in plans:
        node = p.spec.node
        em = Emitter(node.name, taken, p.spec.opset, constant_nodes=constant_nodes,
                     target=p.spec.target)
        if node.input_perm is not None:
            em.op("Transpose", [node.input_perm[0]], out=node.input, perm=list(node.input_perm[1]))
        p.lowering.build(em, p.spec, node.input, node.output, node.indices_output)
        mark_emitted(em.nodes, f"'{p.lowering.name}' lowering of {node.label}")
        replacement[node.index] = em.nodes
        for other in node.replaces:  # its outputs are the lowering's now
            replacement[other] = []
        graph.initializer.extend(em.initializers)
        emitted_ops.append(op_types(em.nodes))
    group_ops: list[list[str]] = []
    for g in groups:
        new, inits, ops = build_group(g, taken, g.levels[0].spec.opset, constant_nodes)
        mark_emitted(new, "'pyramid' lowering of " + ", ".join(lv.spec.node.label for lv in g.levels))
        for lv in g.levels:
            replacement[lv.spec.node.index] = []
        replacement[g.index] = new
        graph.initializer.extend(inits)
        group_ops.extend(ops)

    # the new nodes are appended, then every node moves into place by pointer (nothing copied: linear time)
    n_old = len(graph.node)
    graph.node.extend(n for i in sorted(replacement) for n in replacement[i])
    items = list(graph.node)
    added = iter(items[n_old:])
    arrange(graph.node, [x for i, n in enumerate(items[:n_old])
                         for x in ([next(added) for _ in replacement[i]] if i in replacement else [n])])

    _set_output_types(graph, specs)
    if graph is model.graph:
        _relax_stale_downstream_outputs(model, specs)
    drop_dead_size_constants(graph, [s.node.size_input for s in specs if s.node.size_input])
    _drop_unused_aten_import(model)
    return emitted_ops, group_ops


def _set_output_types(graph: onnx.GraphProto, specs: Sequence[PoolSpec]) -> None:
    typed = {name: make_value_info(name, *t) for s in specs for name, t in s.output_types.items()}
    dropped = {o for s in specs for o in s.node.unused_outputs}
    # Below a node with symbolic pooled axes, value_info the exporter wrote holds the traced sizes: stale
    # at any other size, so it goes (it is optional; onnx shape inference recomputes it).
    stale = _downstream(graph, [s.node.output for s in specs if not s.static])
    keep_only(graph.value_info, lambda v: v.name not in typed and v.name not in dropped and v.name not in stale)
    for n in graph.node:  # so are the body outputs of an If below it (torch's squeeze(2): If(dim == 1, Squeeze))
        for body in subgraphs(n) if any(o in stale for o in n.output) else ():
            for o in body.output:
                if o.type.HasField("tensor_type"):
                    o.type.tensor_type.ClearField("shape")
            keep_only(body.value_info, lambda v: False)
    for name, vi in typed.items():
        declared = [o for o in graph.output if o.name == name]
        for o in declared:
            _merge_declared_dims(vi, o)
            o.type.CopyFrom(vi.type)
        if not declared:
            graph.value_info.append(vi)


def _relax_stale_downstream_outputs(model: onnx.ModelProto, specs: Sequence[PoolSpec]) -> None:
    """Graph outputs computed from a replaced node's output keep the shape the exporter declared, with the
    traced size where a dim is symbolic (batch 1 for a batch-dynamic export: onnxruntime then warns at
    every other batch). Where shape inference of the patched graph gives such a dim as a symbol or
    unknown, the declared int goes (a symbol inference found replaces it). Static models are left alone.
    Inference starts from the replaced nodes' own shapes: onnx cannot always infer through the lowerings
    (the NaN guard's If of a dynamic max pool at opset 18+ comes out without a shape), and an output it
    then leaves unknown would keep its declared, stale int."""
    graph = model.graph
    if all(isinstance(d, int) for vi in graph.input for d in (type_dims(vi.type)[1] or ())):
        return
    down = _downstream(graph, [s.node.output for s in specs])
    outputs = [o for o in graph.output if o.name in down and o.type.tensor_type.HasField("shape")]
    if not outputs:
        return
    seeds = {s.node.output: (s.dtype, tuple(s.output_shape)) for s in specs}
    seeds.update({s.node.indices_output: (onnx.TensorProto.INT64, tuple(s.output_shape)) for s in specs
                  if s.node.indices_output})
    # onnx's answer alone: where it knows no shape (an If whose branches differ in rank, torch's squeeze(2)),
    # every declared int is the traced size's claim, and goes
    inferred = infer(model, {k: v for k, v in seeds.items() if k not in {o.name for o in graph.output}},
                     declared=False)
    for o in outputs:
        declared = o.type.tensor_type.shape.dim
        _, dims = inferred.get(o.name, (0, None))
        dims = (None,) * len(declared) if dims is None else dims
        if len(dims) != len(declared):
            continue
        for dim, d in zip(declared, dims):
            if dim.HasField("dim_value") and not isinstance(d, int):
                dim.Clear()
                if isinstance(d, str):
                    dim.dim_param = d


def _merge_declared_dims(computed: onnx.ValueInfoProto, declared: onnx.ValueInfoProto) -> None:
    """Where the computed shape has an unknown dim, keep the declared dim if it is a name (``N``); a
    declared int there is the exporter's traced size (stale), so the dim stays unknown."""
    ours = computed.type.tensor_type.shape.dim
    theirs = declared.type.tensor_type.shape.dim if declared.type.tensor_type.HasField("shape") else []
    if len(ours) != len(theirs):
        return
    for o, t in zip(ours, theirs):
        if not o.HasField("dim_value") and not o.dim_param and t.dim_param:
            o.dim_param = t.dim_param


def _downstream(graph: onnx.GraphProto, sources: Sequence[str]) -> set[str]:
    """Every tensor computed (transitively) from ``sources``, not counting the sources themselves."""
    reached, out = set(sources), set()
    for n in graph.node:  # graph.node is topologically sorted
        if any(i in reached for i in n.input):
            out.update(o for o in n.output if o)
            reached.update(o for o in n.output if o)
    return out


def drop_dead_size_constants(graph: onnx.GraphProto, names: Sequence[str]) -> None:
    """Remove the nodes/initializers that computed output sizes, now that nothing reads them (an initializer
    also listed as a graph input, as IR 3 and keep_initializers_as_inputs write them, loses that entry too:
    it would otherwise become an input the caller must feed)."""
    drop_unread(graph, names, lambda n: sum(1 for o in n.output if o) == 1)


def _drop_unused_aten_import(model: onnx.ModelProto) -> None:
    if any(n.domain == ATEN_DOMAIN for n in nodes_deep(model.graph.node)) or any(
            n.domain == ATEN_DOMAIN for f in model.functions for n in f.node):
        return
    keep_only(model.opset_import, lambda o: o.domain != ATEN_DOMAIN)

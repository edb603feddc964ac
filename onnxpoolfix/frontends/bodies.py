"""Leftovers inside control flow (If branches, Loop and Scan bodies, nested at any depth), found and typed.

A ``torch.jit.script``ed model with control flow, exported with ONNX_FALLTHROUGH, puts its leftovers in the
bodies of If/Loop nodes. Each found node's ``body`` is its graph's path (:data:`~onnxpoolfix.spec.BodyPath`),
and the main path does the rest: planned one by one (no pyramids), written deepest body first
(:mod:`onnxpoolfix.rewrite.model`), each replaced subgraph checked alone (:mod:`onnxpoolfix.check.bodies`: a
random input takes one branch only). Here: find (:func:`~.leftovers.find_pool_nodes` with the enclosing graphs
as the scope the output sizes are read from) and shapes (onnx's inference runs the bodies too; torch's
untyped body outputs, ``type {}``, are cleared for it and filled in OUT: :func:`fill_untyped`).
"""
from __future__ import annotations

import copy
import logging
from dataclasses import replace
from typing import Iterator, Sequence

import onnx

from ..errors import PoolFixError
from ..graph import keep_only
from ..graph.shapes import (
    light_copy,
    make_value_info,
    model_opset,
    onnx_inferred,
    resolve_specs,
    seed_types,
    type_dims,
)
from ..spec import BodyPath, Dim, PoolNode, PoolSpec
from .base import FrontEndResult, PlanOptions
from .exporter_pools import STANDARD
from .leftovers import find_pool_nodes, is_pool_leftover

logger = logging.getLogger(__name__)


def walk(graph: onnx.GraphProto, path: BodyPath = (), outer: tuple[onnx.GraphProto, ...] = ()
         ) -> Iterator[tuple[BodyPath, onnx.GraphProto, tuple[onnx.GraphProto, ...]]]:
    """Every body under ``graph`` (pre-order): its path, the body, and its enclosing graphs (outermost first)."""
    for ni, node in enumerate(graph.node):
        for ai, a in enumerate(node.attribute):
            bodies = ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                      a.graphs if a.type == onnx.AttributeProto.GRAPHS else [])
            for gi, body in enumerate(bodies):
                yield path + ((ni, ai, gi),), body, outer + (graph,)
                yield from walk(body, path + ((ni, ai, gi),), outer + (graph,))


def graph_at(model: onnx.ModelProto, path: BodyPath) -> onnx.GraphProto:
    """The (live) body at ``path``; the top-level graph for ``()``."""
    g = model.graph
    for ni, ai, gi in path:
        a = g.node[ni].attribute[ai]
        g = a.g if a.type == onnx.AttributeProto.GRAPH else a.graphs[gi]
    return g


def describe_path(model: onnx.ModelProto, path: BodyPath) -> str:
    """``path`` as a reader finds it: each enclosing node and its attribute, outermost first, e.g.
    ``Loop '/Loop' body > If '/If' then_branch`` (``[k]`` after a GRAPHS attribute's name)."""
    steps = []
    for i, (ni, ai, gi) in enumerate(path):
        node = graph_at(model, path[:i]).node[ni]
        a = node.attribute[ai]
        name = node.name or f"{node.op_type}_{ni}"
        steps.append(f"{node.op_type} '{name}' {a.name}" + (f"[{gi}]" if a.type == onnx.AttributeProto.GRAPHS else ""))
    return " > ".join(steps)


def nested_leftover_nodes(model: onnx.ModelProto) -> Iterator[tuple[BodyPath, int, onnx.NodeProto]]:
    """Every leftover inside a body, unread (no output size evaluated): its body's path, its index there."""
    for path, body, _ in walk(model.graph):
        for i, n in enumerate(body.node):
            if is_pool_leftover(n):
                yield path, i, n


def has_nested_leftovers(model: onnx.ModelProto) -> bool:
    return any(is_pool_leftover(n) for _, body, _ in walk(model.graph) for n in body.node)


def _clear_empty_types(graph: onnx.GraphProto) -> None:
    """torch's untyped body outputs (``type {}``, no value case) mean "not known": say so to inference."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.HasField("type") and vi.type.WhichOneof("value") is None:
            vi.ClearField("type")


def find_nested(model: onnx.ModelProto, opset: int) -> list[PoolNode]:
    """The leftovers inside bodies, each with its ``body``."""
    return [replace(n, body=path) for path, body, outer in walk(model.graph)
            if any(is_pool_leftover(node) for node in body.node)  # (else no size tables to build)
            for n in find_pool_nodes(body, opset, scope=outer)]


def _scoped_info(model: onnx.ModelProto, path: BodyPath) -> dict[str, tuple[int, tuple[Dim, ...] | None]]:
    """Types and shapes visible inside the body at ``path``: its own, then its enclosing graphs'."""
    info: dict[str, tuple[int, tuple[Dim, ...] | None]] = {}
    graphs = [graph_at(model, path[:i]) for i in range(len(path) + 1)]
    for g in graphs:  # outermost first: an inner name (none shadow in a valid model) would win
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            elem, dims = type_dims(vi.type)
            if elem:
                info[vi.name] = (elem, dims)
        for t in g.initializer:
            info[t.name] = (t.data_type, tuple(int(d) for d in t.dims))
    return info


def _infer(model: onnx.ModelProto, seeds: dict[BodyPath, dict[str, tuple[int, tuple[Dim, ...]]]]) -> onnx.ModelProto:
    light = light_copy(model)
    for g in [light.graph, *(body for _, body, _ in walk(light.graph))]:
        _clear_empty_types(g)
    relax_loop_carried(light)
    for path, named in seeds.items():
        seed_types(graph_at(light, path), named)
    inferred = onnx_inferred(light, " of the bodies")
    if inferred is None:
        return light  # what onnx cannot infer stays unknown (ShapeError below)
    if not _seed_untyped_loop_state(light, inferred):
        return inferred
    # the seeds are a guess: without them, what the first pass found
    return onnx_inferred(light, " with the loop states' ranks") or inferred


def relax_loop_carried(light: onnx.ModelProto) -> None:
    """torch declares a Loop body's carried inputs with their first pass's shape; a pool of a carried value
    (``y = pool(y, [6, 5])`` in a scripted loop, 10x13 then 6x5) would be built for that shape alone. For
    inference (``light`` a copy) and in OUT's bodies, each carried input, body output and declared value_info of
    a Loop body keeps its dtype and rank, every dim unknown (all of them: which derive from the carried values
    is not worth tracing, and onnx's inference gives the rest back)."""
    for _, _, body in _loops(light):
        for vi in [*body.input[2:], *body.output[1:], *body.value_info]:  # every dim torch declared in it
            elem, dims = type_dims(vi.type)
            if elem and dims is not None:
                vi.CopyFrom(make_value_info(vi.name, elem, (None,) * len(dims)))


def _loops(model: onnx.ModelProto) -> list[tuple[BodyPath, onnx.NodeProto, onnx.GraphProto]]:
    """Every Loop node at any depth, the top level's first: its graph's path, the node, its body."""
    return [(path, node, next(a.g for a in node.attribute if a.name == "body"))
            for path in [()] + [p for p, _, _ in walk(model.graph)]
            for node in graph_at(model, path).node if node.op_type == "Loop"]


def _seed_untyped_loop_state(light: onnx.ModelProto, inferred: onnx.ModelProto) -> bool:
    """torch declares no type on a Loop body's state input when the state's initial value is a leftover's
    output (a pool torch hoisted out of the Loop), and onnx's Loop inference passes on the dtype only: the
    body's result, hence the Loop's, then has no rank. For inference only (``light`` is a copy), such an
    input gets its initial value's dtype and rank, every dim unknown; :func:`_fill_loop_carried` still keeps
    a rank only where the body's result agrees."""
    seeded = False
    for path, node, body in _loops(light):
        known = _scoped_info(inferred, path)
        for k, init in enumerate(node.input[2:]):
            if 2 + k >= len(body.input) or body.input[2 + k].type.WhichOneof("value") is not None:
                continue
            elem, dims = known.get(init, (0, None))
            if elem and dims is not None:
                name = body.input[2 + k].name
                body.input[2 + k].CopyFrom(make_value_info(name, elem, (None,) * len(dims)))
                seeded = True
    return seeded


def body_leftover_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()
                        ) -> FrontEndResult:
    """The last front end: every leftover inside a body (its node's ``body`` says which), the output types of
    the required nodes the front ends before it found seeded (a body may pool one)."""
    nodes = find_nested(model, opset := model_opset(model))
    outer = {name: t for s in found if s.node.encoding != STANDARD for name, t in s.output_types.items()}
    return FrontEndResult(resolve_specs(model, nodes, opset=opset, target=options.target, visible=_visible(model),
                                        seeds={(): outer} if outer else None) if nodes else [])


def _visible(model: onnx.ModelProto):
    """:func:`~onnxpoolfix.graph.shapes.resolve_specs`' ``visible`` for leftovers in bodies."""
    def at(seeds):
        inferred, infos = _infer(model, seeds), {}
        return lambda path: infos[path] if path in infos else infos.setdefault(path, _scoped_info(inferred, path))
    return at


def _incomplete(vi: onnx.ValueInfoProto) -> bool:
    """Untyped (``type {}``), a tensor without a shape, or a shape without an element type (an If's result
    where one branch returns its input as it is): what torch writes for If/Loop results."""
    if not vi.HasField("type"):
        return False
    which = vi.type.WhichOneof("value")
    t = vi.type.tensor_type
    return which is None or (which == "tensor_type" and (not t.HasField("shape") or not t.elem_type))


def fill_untyped(model: onnx.ModelProto) -> None:
    """Give every output and value_info that torch left untyped or without a shape (If/Loop results, body
    outputs) the type and shape inference finds, in the top-level graph and every body. An empty type
    inference cannot fill is cleared (absent: unknown); a shapeless tensor type it cannot fill stays."""
    paths = [()] + [p for p, _, _ in walk(model.graph)]
    for _ in range(max(len(p) for p in paths) + 1):  # a body's outputs first, then the If/Loop around it
        graphs = [graph_at(model, p) for p in paths]
        if not any(_incomplete(vi) for g in graphs for vi in list(g.output) + list(g.value_info)):
            return
        inferred = _infer(model, {})
        changed = False
        for path, g in zip(paths, graphs):
            known = _scoped_info(inferred, path)
            for vi in list(g.output) + list(g.value_info):
                if not _incomplete(vi):
                    continue
                elem, dims = known.get(vi.name, (0, None))
                had = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else 0
                if elem and (dims is not None or not had):
                    vi.CopyFrom(make_value_info(vi.name, elem, dims))
                    changed = True
                elif not had:
                    vi.ClearField("type")
                    changed = True
            changed |= _fill_loop_carried(g, path, inferred)
        if not changed:
            return


def _fill_loop_carried(graph: onnx.GraphProto, path: BodyPath, inferred: onnx.ModelProto) -> bool:
    """onnx's Loop inference gives a loop-carried result its dtype only (its shape could change across
    iterations); torch declares no more, and the ONNX checker wants a shape on top-level outputs. Where the
    initial value and the body's result agree on the rank, the result has that rank, each dim kept where
    the two agree (a state of one shape through every iteration)."""
    declared = {vi.name: vi for vi in list(graph.output) + list(graph.value_info) if _incomplete(vi)}
    known = _scoped_info(inferred, path)
    changed = False
    for ni, node in enumerate(graph.node):
        if node.op_type != "Loop" or not any(o in declared for o in node.output):
            continue
        ai = next(i for i, a in enumerate(node.attribute) if a.name == "body")
        body_path = path + ((ni, ai, 0),)
        body = graph_at(inferred, body_path)
        inner = _scoped_info(inferred, body_path)
        for k, init in enumerate(node.input[2:]):
            out = node.output[k] if k < len(node.output) else ""
            if out not in declared or 1 + k >= len(body.output):
                continue
            elem, a = known.get(init, (0, None))
            _, b = inner.get(body.output[1 + k].name, (0, None))
            if elem and a is not None and b is not None and len(a) == len(b):
                dims = tuple(x if x == y else None for x, y in zip(a, b))
                declared[out].CopyFrom(make_value_info(out, elem, dims))
                changed = True
    return changed


def type_bodies(model: onnx.ModelProto) -> bool:
    """Declare, in place, the types torch leaves out around leftovers in bodies: the leftovers' outputs,
    the untyped body outputs and If/Loop results, so that inference flows past them (the ONNX checker;
    a top-level leftover pooling an If's result). False (nothing changed) when their shapes cannot be
    found yet, e.g. a body pooling a top-level leftover's output."""
    opset = model_opset(model)
    try:
        found = find_nested(model, opset)
        specs = resolve_specs(model, found, opset=opset, target="onnxruntime", visible=_visible(model))
    except PoolFixError as e:
        logger.debug("cannot type the leftovers in bodies yet: %s", e)
        return False
    for s in specs:
        body = graph_at(model, s.node.body)
        typed = {name: make_value_info(name, *t) for name, t in s.output_types.items()}
        for o in body.output:
            if o.name in typed:
                o.CopyFrom(typed.pop(o.name))
        keep_only(body.value_info, lambda vi: vi.name not in typed)
        body.value_info.extend(typed.values())
    fill_untyped(model)
    return True


def _type_top_level_leftovers(model: onnx.ModelProto) -> bool:
    """Declare, in place, the top-level leftovers' outputs and fill the types torch left out around them.
    torch moves a loop-invariant pool out of a Loop: the leftover is then the Loop's initial value (and read
    in the body), and the Loop's result is left untyped as for leftovers in bodies."""
    opset = model_opset(model)
    try:
        nodes = find_pool_nodes(model.graph, opset)
        specs = resolve_specs(model, nodes, opset=opset, target="onnxruntime") if nodes else []
    except PoolFixError as e:
        logger.debug("cannot type the top-level leftovers: %s", e)
        return False
    if not specs:
        return False
    model.graph.value_info.extend(make_value_info(name, *t) for s in specs for name, t in s.output_types.items())
    fill_untyped(model)
    return True


def typed_copy(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` typed by :func:`type_bodies`, for the ONNX checker to judge such a real export;
    None when the model has no control flow, or the leftovers' shapes cannot be found."""
    nested = has_nested_leftovers(model)
    if not nested and next(walk(model.graph), None) is None:
        return None
    work = copy.deepcopy(model)
    top = _type_top_level_leftovers(work)  # may fail where a top-level one pools a body's result
    typed = type_bodies(work) if nested else top
    return work if typed else None

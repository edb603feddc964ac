"""Leftovers inside If/Loop/Scan bodies, replaced: after the top-level graph is patched, each body
leftover (found and typed by :mod:`onnxpoolfix.frontends.bodies`) is planned node by node (no pyramid
grouping across or within bodies) and written by :func:`~onnxpoolfix.rewrite.apply_plans` into its body,
deepest bodies first (a body rewritten later copies the already patched bodies inside it)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import onnx

from .check.runner import isolate
from .frontends.bodies import BodyPath, fill_untyped, find_nested, graph_at, resolve_nested, walk
from .rewrite import apply_plans, drop_dead_size_constants
from .spec import PoolSpec

logger = logging.getLogger(__name__)


@dataclass
class NestedPatch:
    """One replaced leftover in a body: where, what, how."""

    path: BodyPath  # where the body was found (node indices shift as outer graphs are rewritten)
    spec: PoolSpec
    lowering: str
    why: str
    ops: list[str]
    alone: onnx.ModelProto | None  # the replacement as a model of its own (None: it reads other tensors)


def patch_nested(model: onnx.ModelProto, *, opset: int, target: str, plan_one: Callable) -> list[NestedPatch]:
    """Replace every leftover inside the bodies of ``model`` (in place). ``plan_one(spec)`` -> a Plan."""
    found = find_nested(model, opset)
    if not found:
        return []
    specs = resolve_nested(model, found, opset=opset, target=target)
    plans = [plan_one(s) for s in specs]
    by_path: dict[BodyPath, list[int]] = {}
    for i, f in enumerate(found):
        by_path.setdefault(f.path, []).append(i)
    done: dict[int, NestedPatch] = {}
    for path in sorted(by_path, key=len, reverse=True):  # deepest first: see the module docstring
        members = by_path[path]
        body = graph_at(model, path)
        emitted, _ = apply_plans(model, [plans[i] for i in members], graph=body)
        view = onnx.ModelProto()  # the body as a model, to cut each replacement out of for the check
        view.ir_version = model.ir_version
        view.opset_import.extend(model.opset_import)
        view.graph.CopyFrom(body)
        for i, ops in zip(members, emitted):
            done[i] = NestedPatch(path, specs[i], plans[i].lowering.name, plans[i].why, ops, isolate(view, specs[i]))
    # the size constants torch wrote in an outer graph go once no body reads them. The paths found above are
    # stale now (a replacement is several nodes), so the graphs are walked afresh, deepest first: a removal
    # copies a graph's nodes, which only invalidates references to bodies inside it, already done
    sizes = [f.node.size_input for f in found if f.node.size_input]
    graphs = [(len(p), b) for p, b, _ in walk(model.graph)] + [(0, model.graph)]
    for _, g in sorted(graphs, key=lambda d: -d[0]):
        drop_dead_size_constants(g, sizes)
    fill_untyped(model)
    return [done[i] for i in range(len(found))]

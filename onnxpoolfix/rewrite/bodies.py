"""Leftovers inside If/Loop/Scan bodies, replaced. :func:`onnxpoolfix.plan.model.plan_model` finds them
(:mod:`onnxpoolfix.frontends.bodies`) and plans them node by node (no pyramid grouping across or within
bodies); :func:`~onnxpoolfix.rewrite.model.apply_model_plan` writes them here with
:func:`~onnxpoolfix.rewrite.nodes.apply_plans` into their bodies before the top-level graph, deepest bodies first
(a body rewritten later copies the already patched bodies inside it), and finishes after it."""
from __future__ import annotations

import logging
from typing import Sequence

import onnx

from ..frontends.bodies import fill_untyped, graph_at, relax_loop_carried, walk
from ..plan.planner import Plan
from ..spec import BodyPath, PoolSpec
from .nodes import apply_plans, drop_dead_size_constants

logger = logging.getLogger(__name__)


def apply_body_plans(model: onnx.ModelProto, plans: Sequence[Plan]
                     ) -> list[tuple[list[str], onnx.ModelProto | None]]:
    """Write each plan of a leftover in a body (its node's ``body``) into that body, in place, deepest bodies
    first: see the module docstring. Runs before the top-level graph is rewritten (the paths index its nodes
    as planned); :func:`finish_bodies` runs after it. Returns, per plan, the op types written and its body as
    written, as a model of its own (shared by the plans of one body), to cut the replacement out of for the
    check (a body's tensors cannot be fetched from a run of the whole model)."""
    by_path: dict[BodyPath, list[int]] = {}
    for i, p in enumerate(plans):
        by_path.setdefault(p.spec.node.body, []).append(i)
    done: dict[int, tuple[list[str], onnx.ModelProto | None]] = {}
    for path in sorted(by_path, key=len, reverse=True):
        members = by_path[path]
        body = graph_at(model, path)
        emitted, _ = apply_plans(model, [plans[i] for i in members], graph=body)
        view = onnx.ModelProto()
        view.ir_version = model.ir_version
        view.opset_import.extend(model.opset_import)
        view.graph.CopyFrom(body)
        for i, ops in zip(members, emitted):
            done[i] = (ops, view)
    return [done[i] for i in range(len(plans))]


def finish_bodies(model: onnx.ModelProto, specs: Sequence[PoolSpec]) -> None:
    """Once every graph is rewritten: the size constants torch wrote in an outer graph for the body
    leftovers ``specs`` go once nothing reads them, and the types torch left out are filled in."""
    # the paths are stale now (a replacement is several nodes), so the graphs are walked afresh, deepest
    # first: a removal copies a graph's nodes, which only invalidates references to bodies inside it, done
    sizes = [s.node.size_input for s in specs if s.node.size_input]
    graphs = [(len(p), b) for p, b, _ in walk(model.graph)] + [(0, model.graph)]
    for _, g in sorted(graphs, key=lambda d: -d[0]):
        drop_dead_size_constants(g, sizes)
    if specs:  # as they were read: a carried value's shape is its first pass's only, which onnxruntime would hold
        relax_loop_carried(model)
    fill_untyped(model)

"""The rewrite's entry point: a :class:`~onnxpoolfix.plan.model.ModelPlan` written into the model, in place.
Each graph's plans with :func:`.nodes.apply_plans`, deepest bodies first and the top level (with its pyramid
groups) last, so that every body's path (``PoolNode.body``) still indexes the graphs as planned; then what
the replaced decompositions leave dead (:mod:`.regions`) and, where bodies were rewritten, the size constants
torch wrote for them in outer graphs and the types torch left out (:mod:`onnxpoolfix.frontends.bodies`)."""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from ..frontends.bodies import fill_untyped, graph_at, relax_loop_carried, walk
from ..graph.shapes import PoolSpec
from ..plan.model import ModelPlan
from ..plan.pyramid import NAME as PYRAMID
from .nodes import apply_plans, drop_dead_size_constants
from .regions import drop_dead_region_nodes

__all__ = ["AppliedNode", "apply_model_plan"]


@dataclass(frozen=True)
class AppliedNode:
    spec: PoolSpec
    lowering: str
    why: str
    ops: list[str]

    @property
    def in_body(self) -> bool:
        """It was inside an If/Loop/Scan body (``spec.node.body``)."""
        return bool(self.spec.node.body)


def apply_model_plan(model: onnx.ModelProto, mp: ModelPlan) -> list[AppliedNode]:
    """Write ``mp``'s replacements into ``model`` (``mp.model`` or a copy of it), in place. Returns what
    replaced each node: the top-level graph's in graph order, then the bodies'."""
    in_bodies = [n.plan for n in mp.in_bodies]
    by_path: dict = {}
    for p in in_bodies:
        by_path.setdefault(p.spec.node.body, []).append(p)
    body_ops = {}
    for path in sorted(by_path, key=len, reverse=True):
        body_ops.update(zip(map(id, by_path[path]), apply_plans(model, by_path[path], graph=graph_at(model, path))[0]))
    emitted, group_ops = apply_plans(model, mp.separate, mp.groups)
    done = [AppliedNode(p.spec, p.lowering.name, p.why, ops) for p, ops in zip(mp.separate, emitted)]
    levels = [(g, lv) for g in mp.groups for lv in g.levels]
    done += [AppliedNode(lv.spec, PYRAMID, g.why(lv), ops) for (g, lv), ops in zip(levels, group_ops)]
    done.sort(key=lambda d: d.spec.node.index)
    if mp.found.regions:  # the rest of each replaced decomposition, where nothing reads it any more
        drop_dead_region_nodes(model, mp.found.regions)
    if in_bodies:  # the paths are stale now: every graph walked afresh, deepest first (a removal copies a graph)
        sizes = [p.spec.node.size_input for p in in_bodies if p.spec.node.size_input]
        for _, g in sorted([(len(p), b) for p, b, _ in walk(model.graph)] + [(0, model.graph)], key=lambda d: -d[0]):
            drop_dead_size_constants(g, sizes)
        relax_loop_carried(model)  # as they were read: a carried value's shape is its first pass's only
    if in_bodies or next(walk(model.graph), None) is not None:
        fill_untyped(model)  # a leftover torch hoisted out of a Loop left the Loop's result untyped too
    return done + [AppliedNode(p.spec, p.lowering.name, p.why, body_ops[id(p)]) for p in in_bodies]

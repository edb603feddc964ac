"""The rewrite's entry point: a :class:`~onnxpoolfix.plan.model.ModelPlan` written into the model, in place.
Bodies first (their paths index the top-level nodes as planned), then each separate plan and pyramid group
(:mod:`.nodes`), then what the replaced decompositions leave dead (:mod:`.regions`)."""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from ..frontends.bodies import BodyPath, fill_untyped, walk
from ..graph.shapes import PoolSpec
from ..plan.model import ModelPlan
from ..plan.pyramid import NAME as PYRAMID
from .bodies import apply_body_plans, finish_bodies
from .nodes import apply_plans
from .regions import drop_dead_region_nodes

__all__ = ["AppliedNode", "apply_model_plan"]


@dataclass(frozen=True)
class AppliedNode:
    spec: PoolSpec
    lowering: str
    why: str
    ops: list[str]
    body: BodyPath | None = None  # the body it was in (None: the top-level graph)
    alone: onnx.ModelProto | None = None  # a body's replacement as a model of its own, for its check


def apply_model_plan(model: onnx.ModelProto, mp: ModelPlan) -> list[AppliedNode]:
    """Write ``mp``'s replacements into ``model`` (``mp.model`` or a copy of it), in place. Returns what
    replaced each node: the top-level graph's in graph order, then the bodies'."""
    # bodies first: their paths index the top-level nodes as planned
    in_bodies = apply_body_plans(model, [(b.path, b.node.plan) for b in mp.body_nodes]) if mp.body_nodes else []
    emitted, group_ops = apply_plans(model, mp.separate, mp.groups)
    done = [AppliedNode(p.spec, p.lowering.name, p.why, ops) for p, ops in zip(mp.separate, emitted)]
    levels = [(g, lv) for g in mp.groups for lv in g.levels]
    done += [AppliedNode(lv.spec, PYRAMID, g.why(lv), ops) for (g, lv), ops in zip(levels, group_ops)]
    done.sort(key=lambda d: d.spec.node.index)
    if mp.found.regions:  # the rest of each replaced decomposition, where nothing reads it any more
        drop_dead_region_nodes(model, mp.found.regions)
    if mp.body_nodes:
        finish_bodies(model, [b.node.spec for b in mp.body_nodes])
    elif next(walk(model.graph), None) is not None:
        fill_untyped(model)  # a leftover torch hoisted out of a Loop left the Loop's result untyped
    done += [AppliedNode(p.spec, p.lowering, p.why, p.ops, body=p.path, alone=p.alone) for p in in_bodies]
    return done

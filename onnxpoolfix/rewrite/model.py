"""The rewrite's entry point: a :class:`~onnxpoolfix.plan.model.ModelPlan` written into the model, in place.
Bodies first (their paths index the top-level nodes as planned), then each separate plan and pyramid group
(:mod:`.nodes`), then what the replaced decompositions leave dead (:mod:`.regions`)."""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from ..frontends.bodies import fill_untyped, walk
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
    body_view: onnx.ModelProto | None = None  # its body as written, as a model (the check cuts it out of it)

    @property
    def in_body(self) -> bool:
        """It was inside an If/Loop/Scan body (``spec.node.body``)."""
        return bool(self.spec.node.body)


def apply_model_plan(model: onnx.ModelProto, mp: ModelPlan) -> list[AppliedNode]:
    """Write ``mp``'s replacements into ``model`` (``mp.model`` or a copy of it), in place. Returns what
    replaced each node: the top-level graph's in graph order, then the bodies'."""
    # bodies first: their paths index the top-level nodes as planned
    body_plans = [n.plan for n in mp.in_bodies]
    in_bodies = apply_body_plans(model, body_plans) if body_plans else []
    emitted, group_ops = apply_plans(model, mp.separate, mp.groups)
    done = [AppliedNode(p.spec, p.lowering.name, p.why, ops) for p, ops in zip(mp.separate, emitted)]
    levels = [(g, lv) for g in mp.groups for lv in g.levels]
    done += [AppliedNode(lv.spec, PYRAMID, g.why(lv), ops) for (g, lv), ops in zip(levels, group_ops)]
    done.sort(key=lambda d: d.spec.node.index)
    if mp.found.regions:  # the rest of each replaced decomposition, where nothing reads it any more
        drop_dead_region_nodes(model, mp.found.regions)
    if body_plans:
        finish_bodies(model, [p.spec for p in body_plans])
    elif next(walk(model.graph), None) is not None:
        fill_untyped(model)  # a leftover torch hoisted out of a Loop left the Loop's result untyped
    done += [AppliedNode(p.spec, p.lowering.name, p.why, ops, body_view=view)
             for p, (ops, view) in zip(body_plans, in_bodies)]
    return done

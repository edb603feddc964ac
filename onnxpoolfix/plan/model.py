"""The planning phase that ``patch`` and ``inspect`` share: :func:`plan_model` turns a model into a
:class:`ModelPlan` (every node found by the front ends, each lowering's cost or the reason it does not
apply, the chosen one, the pyramid groups, the blockers), and :func:`apply_model_plan` writes it.

    patch   = plan_model -> apply_model_plan -> check (onnxpoolfix.check) -> report
    inspect = plan_model -> format (and, for --target tensorrt, apply_model_plan on a copy -> lint)

Per node, the choice ("8 -> 6: which lowering?") is :func:`onnxpoolfix.plan.planner.plan`; nodes that pool one
tensor are grouped by :func:`onnxpoolfix.plan.pyramid.plan_groups`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import onnx

from ..errors import PoolFixError, UnsupportedNodeError
from ..frontends import FRONTENDS, PlanOptions
from ..frontends.base import REPAIRED, Region, Suspect
from ..frontends.bodies import BodyPath, body_specs, fill_untyped, has_nested_leftovers, walk
from ..frontends.exporter_pools import keeps_its_op
from ..frontends.functions import inline_functions_holding_leftovers
from ..frontends.leftovers import is_pool_leftover
from ..graph.shapes import PoolSpec, model_opset
from ..reason import opset_needed
from ..report import WarningNote
from ..rewrite.bodies import apply_body_plans, finish_bodies
from ..rewrite.nodes import apply_plans
from ..rewrite.regions import drop_dead_region_nodes
from .planner import AUTO, Candidate, Plan, candidates, plan
from .pyramid import NAME as PYRAMID
from .pyramid import GroupPlan, plan_groups

logger = logging.getLogger(__name__)

__all__ = ["PlanOptions", "NodePlan", "ModelPlan", "AppliedNode", "plan_model", "apply_model_plan",
           "no_lowering_hint", "BodyNodePlan"]


@dataclass
class NodePlan:
    """One node a front end found: its candidates, and the chosen plan or the planner's refusal."""

    spec: PoolSpec
    optional: bool  # from a front end whose nodes may stay as they are (the exporter's own pools)
    candidates: tuple[Candidate, ...]
    plan: Plan | None = None
    error: UnsupportedNodeError | None = None  # why no lowering was chosen (plan is None)
    repair: str | None = None  # what is wrong with it (FrontEndResult.repairs): replaced, never kept nor grouped


@dataclass
class BodyNodePlan:
    """A leftover inside an If/Loop/Scan body (``path``: see :mod:`onnxpoolfix.frontends.bodies`)."""

    path: BodyPath
    node: NodePlan


@dataclass
class ModelPlan:
    model: onnx.ModelProto  # the model planned (a new one when functions were inlined); plans index its nodes
    options: PlanOptions
    opset: int
    inlined: list[str] = field(default_factory=list)  # local functions inlined because they held leftovers
    leftovers: list[onnx.NodeProto] = field(default_factory=list)  # top-level leftover nodes, as found
    notes: list[str] = field(default_factory=list)  # from the front ends (e.g. input shapes kept as bound)
    blocker: PoolFixError | None = None  # a model-level problem: a front end could not read the model
    nodes: list[NodePlan] = field(default_factory=list)  # in front-end order, then graph order
    groups: list[GroupPlan] = field(default_factory=list)  # nodes planned together (pyramids)
    rest: list[Plan] = field(default_factory=list)  # plans replaced one by one
    kept: list[Plan] = field(default_factory=list)  # optional nodes whose best form is the node itself
    # leftovers inside If/Loop/Scan bodies (found only with options.patch_bodies; else the ATen front end
    # refuses them): planned one by one, written before the top level (onnxpoolfix.rewrite.bodies)
    bodies: bool = False
    body_nodes: list[BodyNodePlan] = field(default_factory=list)
    # the dynamo front end: the decompositions its specs stand for (their other nodes go once rewritten),
    # and what it suspected and left as it is, with why
    regions: list[Region] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)

    @property
    def blocked(self) -> list[NodePlan]:
        """Nodes that must be lowered and cannot be."""
        return [n for n in self.nodes + [b.node for b in self.body_nodes] if not n.optional and n.plan is None]

    @property
    def would_patch(self) -> bool:
        return self.blocker is None and not self.blocked


@dataclass(frozen=True)
class AppliedNode:
    spec: PoolSpec
    lowering: str
    why: str
    ops: list[str]
    body: BodyPath | None = None  # the body it was in (None: the top-level graph)
    alone: onnx.ModelProto | None = None  # a body's replacement as a model of its own, for its check


def plan_model(model: onnx.ModelProto, options: PlanOptions) -> ModelPlan:
    """Plan every node the front ends find in ``model``; never raises for what it can describe.

    ``model`` is modified only where ``options.input_shapes`` stays bound and, with
    ``options.patch_bodies``, where torch left the types around leftovers in bodies out (see the ATen front
    end); local functions holding leftovers are inlined into a new model (:attr:`ModelPlan.model`).
    """
    opset = model_opset(model)
    model, inlined = inline_functions_holding_leftovers(model)
    mp = ModelPlan(model=model, options=options, opset=opset, inlined=inlined,
                   leftovers=[n for n in model.graph.node if is_pool_leftover(n)],
                   bodies=options.patch_bodies and has_nested_leftovers(model))
    found: list[PoolSpec] = []
    for frontend in FRONTENDS:
        try:
            result = frontend.find(model, options, found)
        except PoolFixError as err:
            mp.blocker = err
            break
        found += result.specs
        mp.notes += result.notes
        mp.regions += result.regions
        mp.suspects += result.suspects
        # an optional node is planned as auto: a forced lowering is a comparison of the required nodes
        strategy = AUTO if frontend.optional else options.strategy
        mp.nodes += [_plan_node(s, strategy, frontend.optional, result.repairs.get(s.node.index))
                     for s in result.specs]
    mp.notes += [WarningNote(f"{n.spec.node.label} cannot run as written ({n.repair}), and no exact lowering "
                             "applies: left as it is") for n in mp.nodes if n.repair and n.plan is None]
    if mp.bodies and mp.blocker is None:  # even where a top-level node is blocked: inspect lists them all
        _plan_bodies(mp)
    if mp.would_patch:
        _group(mp)
    return mp


def _plan_bodies(mp: ModelPlan) -> None:
    """The leftovers in bodies, one by one (no pyramids), their shapes resolved with the top-level
    leftovers' outputs known (a body may pool one)."""
    tops = [n.spec for n in mp.nodes if not n.optional]
    try:
        found = body_specs(mp.model, opset=mp.opset, target=mp.options.target, outer_specs=tops)
    except PoolFixError as err:
        mp.blocker = err
        return
    mp.body_nodes = [BodyNodePlan(path, _plan_node(s, mp.options.strategy, False)) for path, s in found]


def _plan_node(spec: PoolSpec, strategy: str, optional: bool, repair: str | None = None) -> NodePlan:
    try:
        p = plan(spec, strategy)
    except UnsupportedNodeError as err:
        return NodePlan(spec, optional, candidates(spec), error=err, repair=repair)
    if repair:
        p = replace(p, why=f"{REPAIRED}{repair}; {p.why}")
    return NodePlan(spec, optional, p.candidates, plan=p, repair=repair)


def _group(mp: ModelPlan) -> None:
    plans = [n.plan for n in mp.nodes if n.plan is not None and not n.repair]
    if mp.options.strategy == AUTO:
        mp.groups, rest = plan_groups(plans)
    else:  # a forced lowering is a comparison of that lowering: no grouping
        mp.groups, rest = [], plans
    optional = {id(n.plan) for n in mp.nodes if n.optional and n.plan is not None}
    mp.kept = [p for p in rest if id(p) in optional and keeps_its_op(p.spec, p.lowering.name)]
    kept = {id(p) for p in mp.kept}
    # a repaired node: neither kept (it cannot run as written) nor grouped (its why says what was repaired)
    repaired = [n.plan for n in mp.nodes if n.plan is not None and n.repair]
    mp.rest = [p for p in rest if id(p) not in kept] + repaired


def apply_model_plan(model: onnx.ModelProto, mp: ModelPlan) -> list[AppliedNode]:
    """Write ``mp``'s replacements into ``model`` (``mp.model`` or a copy of it), in place. Returns what
    replaced each node: the top-level graph's in graph order, then the bodies'."""
    # bodies first: their paths index the top-level nodes as planned
    in_bodies = apply_body_plans(model, [(b.path, b.node.plan) for b in mp.body_nodes]) if mp.body_nodes else []
    emitted, group_ops = apply_plans(model, mp.rest, mp.groups)
    done = [AppliedNode(p.spec, p.lowering.name, p.why, ops) for p, ops in zip(mp.rest, emitted)]
    levels = [(g, lv) for g in mp.groups for lv in g.levels]
    done += [AppliedNode(lv.spec, PYRAMID, g.why(lv), ops) for (g, lv), ops in zip(levels, group_ops)]
    done.sort(key=lambda d: d.spec.node.index)
    if mp.regions:  # the rest of each replaced decomposition, where nothing reads it any more
        drop_dead_region_nodes(model, mp.regions)
    if mp.body_nodes:
        finish_bodies(model, [b.node.spec for b in mp.body_nodes])
    elif next(walk(model.graph), None) is not None:
        fill_untyped(model)  # a leftover torch hoisted out of a Loop left the Loop's result untyped
    done += [AppliedNode(p.spec, p.lowering, p.why, p.ops, body=p.path, alone=p.alone) for p in in_bodies]
    return done


def no_lowering_hint(spec: PoolSpec, cands: tuple[Candidate, ...]) -> str:
    """What would make some lowering apply to ``spec``: a newer opset (from the reasons' structured
    data), binding the symbolic dims, or neither."""
    opsets = sorted({n for n in map(opset_needed, (c.reason for c in cands)) if n is not None and n > spec.opset})
    bind = "bind the symbolic input dims with --input-shape NAME:D0,D1,... (a static lowering then applies)"
    if opsets:
        n = opsets[0]
        convert = (f"convert the model to opset {n} or newer first "
                   f"(onnx.version_converter.convert_version(model, {n}))")
        return f"{convert}, or {bind}" if not spec.static else convert
    if not spec.static:
        return bind
    return "this variant is not supported; please report it with the model (rerun with -v)"

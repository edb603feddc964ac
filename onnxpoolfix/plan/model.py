"""The planning phase that ``patch`` and ``inspect`` share, in two records: :func:`find` runs the front
ends into :class:`Found` (what they found: the nodes, regions, suspects, notes, a blocker), :func:`decide`
turns that into :class:`ModelPlan` (what the planner decided: each node's candidates with their costs or
the reasons they do not apply, the chosen one or the refusal, the pyramid groups, the nodes kept);
:func:`plan_model` is the two; :func:`onnxpoolfix.rewrite.model.apply_model_plan` writes the plan.

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
from ..frontends import FRONTENDS, FrontEnd, PlanOptions
from ..frontends.base import REPAIRED, Region, Suspect
from ..frontends.functions import inline_functions_holding_leftovers
from ..frontends.leftovers import is_pool_leftover
from ..graph.shapes import PoolSpec, model_opset
from ..lowering.calibration import in_use as costs_in_use
from ..progress import phase
from ..report import WarningNote
from ..words import BIND_SYMBOLIC_DIMS, VERBOSE, ref
from .planner import AUTO, Candidate, Plan, candidates, plan
from .pyramid import GroupPlan, plan_groups

logger = logging.getLogger(__name__)

__all__ = ["PlanOptions", "Found", "FoundNode", "NodePlan", "ModelPlan", "plan_model", "find", "decide",
           "no_lowering_hint"]


@dataclass(frozen=True)
class FoundNode:
    """One node a front end found: its spec, the front end (what the planner may do with it: lower, keep,
    repair; :mod:`onnxpoolfix.frontends.base`), and what is wrong with it as written, where it is repaired."""

    spec: PoolSpec
    frontend: FrontEnd
    repair: str | None = None  # FrontEndResult.repairs: replaced, never kept nor grouped

    @property
    def optional(self) -> bool:
        """It may stay as it is where no exact lowering applies (FrontEnd.optional)."""
        return self.frontend.optional


@dataclass
class Found:
    """What the front ends found in a model: the first half of :func:`plan_model`, before any choice.

    ``model`` is the model they read (a new one where local functions holding leftovers were ``inlined``):
    the found nodes index its graph. ``nodes`` are in front-end order, then graph order, then the leftovers
    inside If/Loop/Scan bodies (each node's ``body`` says where).
    ``regions`` are the nodes some specs stand for beyond their own (a dynamo decomposition: the rest goes
    once the spec is rewritten); ``suspects`` what looked like pooling and is left, with why; ``notes`` the
    front ends' (WarningNote: a warning). ``blocker``: a front end could not read the model, and nothing is
    planned. ``leftovers``: the top-level ATen leftover nodes as they stand, which ``inspect`` lists (and
    leaves out of its TensorRT lint of the original) even where the plan is blocked.
    """

    model: onnx.ModelProto
    opset: int
    inlined: list[str] = field(default_factory=list)
    leftovers: list[onnx.NodeProto] = field(default_factory=list)
    nodes: list[FoundNode] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    blocker: PoolFixError | None = None


@dataclass
class NodePlan:
    """What the planner decided for one found node: its candidates, and the chosen plan or the refusal."""

    found: FoundNode
    candidates: tuple[Candidate, ...]
    plan: Plan | None = None
    error: UnsupportedNodeError | None = None  # why no lowering was chosen (plan is None)
    keepable: bool = False  # its front end calls the plan the node itself (FrontEnd.keeps): kept unless grouped

    @property
    def spec(self) -> PoolSpec:
        return self.found.spec

    @property
    def optional(self) -> bool:
        return self.found.optional

    @property
    def repair(self) -> str | None:
        return self.found.repair


@dataclass
class ModelPlan:
    """What the planner decided for what the front ends ``found``: the second half of :func:`plan_model`.

    ``nodes`` has a :class:`NodePlan` per found node (same order; :attr:`top_level`, then :attr:`in_bodies`).
    Where the patch would go ahead, ``groups`` are the top-level nodes planned together (pyramids),
    ``separate`` the top-level plans written one by one and ``kept`` the plans of optional nodes whose best
    form is the node itself (left as they are). ``notes``: the planner's (a node that cannot run
    as written and that no lowering fixes, left), after the front ends' (``found.notes``).
    """

    found: Found
    options: PlanOptions
    nodes: list[NodePlan] = field(default_factory=list)
    groups: list[GroupPlan] = field(default_factory=list)
    separate: list[Plan] = field(default_factory=list)
    kept: list[Plan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def model(self) -> onnx.ModelProto:
        return self.found.model

    @property
    def top_level(self) -> list[NodePlan]:
        return [n for n in self.nodes if not n.spec.node.body]

    @property
    def in_bodies(self) -> list[NodePlan]:
        """The leftovers inside If/Loop/Scan bodies."""
        return [n for n in self.nodes if n.spec.node.body]

    @property
    def blocked(self) -> list[NodePlan]:
        """Nodes that must be lowered and cannot be."""
        return [n for n in self.nodes if not n.optional and n.plan is None]

    @property
    def would_patch(self) -> bool:
        return self.found.blocker is None and not self.blocked


def plan_model(model: onnx.ModelProto, options: PlanOptions) -> ModelPlan:
    """Plan every node the front ends find in ``model`` (:func:`find`, then :func:`decide`); never raises
    for what it can describe.

    ``model`` is modified only where ``options.input_shapes`` stays bound and where torch left the types
    around leftovers in bodies out (see the ATen front end); local functions holding leftovers are inlined
    into a new model (:attr:`Found.model`).
    """
    with phase("find"), costs_in_use(options.cost_model):  # the front ends plan too (the exporter's pools)
        return decide(find(model, options), options)


def find(model: onnx.ModelProto, options: PlanOptions) -> Found:
    """Run the front ends (:data:`~onnxpoolfix.frontends.FRONTENDS`, in order)."""
    opset = model_opset(model)
    model, inlined = inline_functions_holding_leftovers(model)
    found = Found(model, opset, inlined, leftovers=[n for n in model.graph.node if is_pool_leftover(n)])
    specs: list[PoolSpec] = []
    for frontend in FRONTENDS:
        try:
            result = frontend.find(model, options, specs)
        except PoolFixError as err:
            found.blocker = err
            return found
        specs += result.specs
        found.nodes += [FoundNode(s, frontend, result.repairs.get(s.node.index)) for s in result.specs]
        found.notes += result.notes
        found.regions += result.regions
        found.suspects += result.suspects
    return found


def decide(found: Found, options: PlanOptions) -> ModelPlan:
    """Plan every found node (the cheapest exact lowering, or the refusal), then, where the patch would go
    ahead, group the nodes that pool one tensor and keep the optional ones whose best form they are."""
    mp = ModelPlan(found, options)
    # an optional node is planned as auto: a forced lowering is a comparison of the required nodes
    mp.nodes = [_plan_node(n, AUTO if n.optional else options.strategy) for n in found.nodes]
    mp.notes = [WarningNote(f"{n.spec.node.label} cannot run as written ({n.repair}), and no exact lowering "
                            "applies: left as it is", "cannot-run-left", node=n.spec.node.label)
                for n in mp.nodes if n.repair and n.plan is None]
    if mp.would_patch:
        _group(mp)
    return mp


def _plan_node(node: FoundNode, strategy: str) -> NodePlan:
    spec, repair = node.spec, node.repair
    try:
        p = plan(spec, strategy)
    except UnsupportedNodeError as err:
        return NodePlan(node, candidates(spec), error=err)
    if repair:
        p = replace(p, why=f"{REPAIRED}{repair}; {p.why}")
    keepable = node.optional and not repair and node.frontend.keeps(spec, p.lowering.name)
    return NodePlan(node, p.candidates, plan=p, keepable=keepable)


def _group(mp: ModelPlan) -> None:
    top = mp.top_level
    plans = [n.plan for n in top if n.plan is not None and not n.repair]
    if mp.options.strategy == AUTO:
        mp.groups, rest = plan_groups(plans)
    else:  # a forced lowering is a comparison of that lowering: no grouping
        mp.groups, rest = [], plans
    keepable = {id(n.plan) for n in top if n.keepable}
    mp.kept = [p for p in rest if id(p) in keepable]
    # a repaired node: neither kept (it cannot run as written) nor grouped (its why says what was repaired)
    repaired = [n.plan for n in top if n.plan is not None and n.repair]
    mp.separate = [p for p in rest if id(p) not in keepable] + repaired


def no_lowering_hint(spec: PoolSpec, n: int | None) -> str:
    """What would make some lowering apply to ``spec``: opset ``n`` (the planner's error data, tried:
    :func:`~.planner.opset_that_would_do`), binding the symbolic dims, or neither."""
    bind = f"{BIND_SYMBOLIC_DIMS} (a static lowering then applies)"
    if n is not None:
        convert = ref("convert_opset", n)
        return f"{convert}, or {bind}" if not spec.static else convert
    if not spec.static:
        return bind
    return f"this variant is not supported; please report it with the model {VERBOSE}"

"""``onnxpoolfix inspect``: what a patch would do, and what blocks it, without writing anything.

For every leftover adaptive pooling node: its shapes, every lowering with its estimated cost or the reason
it does not apply, the one the planner would choose and why, and any blocker (a symbolic pooled axis no
lowering handles, a non-constant output size, an unsupported dtype, ...). With ``target="tensorrt"`` it
is also a TensorRT-readiness lint of the WHOLE graph (:func:`onnxpoolfix.tensorrt.lint_tensorrt`): when
every node can be lowered, the patched model is built in memory and linted (so the replacements are
linted too); otherwise the original graph is linted, minus the leftover nodes the patch would replace.

Leftovers inside If/Loop/Scan bodies are planned as the patch plans them (one by one, no pyramids) and
listed after the top-level ones, each with its body's path (:attr:`NodeInspection.body`); a blocked one
blocks the patch like a top-level one.

The verdict is :attr:`Inspection.exit_code`, a code of :data:`onnxpoolfix.errors.EXIT_CODES` (its
``inspect`` column: a blocker's own class's code, 4 for a blocked node, 7 for a TensorRT finding).

The records, their text and the ``--json`` schema are in :mod:`onnxpoolfix.inspection.report`.
"""
from __future__ import annotations

import copy
import logging
import os
from dataclasses import asdict, replace
from typing import Mapping, Sequence

import onnx
from onnx import TensorProto

from ..api import read_arguments
from ..errors import ArgumentError, InvalidModelError, PoolFixError
from ..frontends.bodies import describe_path, has_nested_leftovers, nested_leftover_nodes
from ..frontends.dynamo import frozen_error
from ..frontends.input_check import check_input_model
from ..frontends.leftovers import aten_operator, is_pool_leftover
from ..graph import nodes_deep
from ..graph.shapes import model_opset, validate_shapes
from ..lowering.base import axis_windows
from ..plan.model import PlanOptions, no_lowering_hint, plan_model
from ..plan.planner import plan_or_none
from ..plan.pyramid import NAME as PYRAMID
from ..report import Note, dim_label
from ..rewrite.model import apply_model_plan
from ..tensorrt import lint_tensorrt
from ..words import API, INPUT_SHAPES_FORM, TARGET_ONNXRUNTIME, render_all
from .report import (  # noqa: F401  (EXIT_*: re-exported)
    EXIT_BLOCKED,
    EXIT_OK,
    EXIT_TENSORRT,
    CandidateInfo,
    Inspection,
    NodeInspection,
    TensorRTLint,
    format_shape,
)

logger = logging.getLogger(__name__)


def inspect_model(model: onnx.ModelProto, *, target: str = "onnxruntime", strategy: str = "auto",
                  input_shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None,
                  optimize_exporter_pools: bool = False, seed: int = 0,
                  traced_shapes: Mapping[str, Sequence[int]] | None = None, allow_partial: bool = False,
                  model_dir: str | None = None, costs: str | os.PathLike | None = None, tune: bool = False,
                  tune_threads: int | None = None) -> Inspection:
    """What :func:`onnxpoolfix.patch` would do to ``model`` with these arguments, without doing it.

    Never raises for a model-level problem it can describe (non-constant output size, uninferable shape,
    unsupported dtype, bad ``input_shapes``): that becomes :attr:`Inspection.blocker`; a model the ONNX
    checker rejects raises the ``InvalidModelError`` the CLI exits 3 with
    (:func:`~onnxpoolfix.frontends.input_check.check_input_model`).
    ``model`` is not modified. The onnxruntime check is not run; ``seed`` is that of the dynamo front end's
    proof (as patch's); ``model_dir`` the folder of its external data, as patch's.
    """
    return render_all(inspect_as_written(**locals()), API)  # every argument as given


def inspect_as_written(model: onnx.ModelProto, *, target: str = "onnxruntime", strategy: str = "auto",
                       input_shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None,
                       optimize_exporter_pools: bool = False, seed: int = 0,
                       traced_shapes: Mapping[str, Sequence[int]] | None = None, allow_partial: bool = False,
                       model_dir: str | None = None, costs: str | os.PathLike | None = None, tune: bool = False,
                       tune_threads: int | None = None, input_checked: bool = False) -> Inspection:
    """:func:`inspect_model`, its texts as written (references unrendered: :mod:`onnxpoolfix.words`), for
    the CLI to say with its flags (``input_checked``: as :func:`~onnxpoolfix.api.patch_as_written`'s)."""
    cost_model, input_shapes, traced_shapes = read_arguments(  # (costs, tune: as patch's)
        "inspect_model", model, target, strategy, seed, costs, tune, tune_threads, input_shapes, traced_shapes,
        optimize_exporter_pools=optimize_exporter_pools, allow_partial=allow_partial, tune=tune)
    result = Inspection(target=target, strategy=strategy, model=name, opset=model_opset(model))
    if not model.HasField("graph"):  # as patch() says it
        err = InvalidModelError("the model has no graph", "the file is not a complete ONNX model; re-export it")
        result.blocker, result.hint, result.blocker_exit_code = err.text, err.hint_text, err.exit_code
        return result
    if not input_checked:
        check_input_model(model)  # raises the InvalidModelError the CLI exits 3 with
    try:  # as patch() does, before any work (an ArgumentError: exit 2)
        validate_shapes(model, input_shapes, traced_shapes)
    except ArgumentError as err:
        result.blocker, result.hint, result.blocker_exit_code = err.text, err.hint_text, err.exit_code
        return result
    # the planner binds the inputs, and types what torch left untyped around leftovers in bodies, in
    # place: not in the caller's model
    if input_shapes or has_nested_leftovers(model):
        model = copy.deepcopy(model)
    mp = plan_model(model, PlanOptions(strategy=strategy, target=target, input_shapes=input_shapes,
                                       optimize_exporter_pools=optimize_exporter_pools,
                                       seed=int(seed), traced_shapes=traced_shapes, model_dir=model_dir,
                                       cost_model=cost_model))
    found = mp.found
    if found.inlined:
        result.notes.append(Note(f"the local function(s) {', '.join(found.inlined)} hold leftovers or compute "
                                 "their output sizes: the patch inlines them", "inlined-functions"))
    result.notes.extend(found.notes + mp.notes)
    result.suspects = [asdict(s) for s in found.suspects]
    if found.blocker is None and not allow_partial:  # the refusal patch() gives (exit 4), with the same line
        err = frozen_error(found.suspects, traced=bool(traced_shapes))
        if err is not None:
            result.blocker, result.hint, result.blocker_exit_code = err.text, err.hint_text, err.exit_code
    if found.blocker is not None:
        err = found.blocker
        result.blocker, result.hint, result.blocker_exit_code = err.text, err.hint_text, err.exit_code
        tops = [((), i, n) for i, n in enumerate(mp.model.graph.node) if is_pool_leftover(n)]
        result.nodes = [_bare(n, i, describe_path(mp.model, p) or None)
                        for p, i, n in tops + [*nested_leftover_nodes(mp.model)]]
    for node_plan in mp.nodes if found.blocker is None else ():  # the top level, then the bodies (as patch reports)
        info = _inspect_node(node_plan, strategy)
        if node_plan.keepable:
            info.why = f"kept as it is unless it joins a pyramid ({info.why})"
        info.body = describe_path(mp.model, node_plan.spec.node.body) or None
        result.nodes.append(info)
    _inspect_groups(mp, result)
    if mp.in_bodies:
        result.notes.append(Note(f"{len(mp.in_bodies)} leftover(s) inside If/Loop/Scan bodies: each planned alone "
                                 "(no pyramids); the patch checks each replaced subgraph alone (an input takes one "
                                 "branch only)", "leftovers-in-bodies", count=len(mp.in_bodies)))
    if target == "tensorrt":
        result.tensorrt = _lint(mp, result)
    return result


def _inspect_groups(mp, result: Inspection) -> None:
    """Nodes that pool the same tensor and would be planned together (onnxpoolfix/pyramid.py)."""
    by_node = {n.spec.node.index: info for n, info in zip(mp.top_level, result.nodes)}  # (names may repeat)
    for g in mp.groups:
        for lv in g.levels:
            info = by_node[lv.spec.node.index]
            info.chosen, info.why = PYRAMID, g.why(lv)
        result.notes.append(Note(f"{len(g.levels)} nodes pool '{g.levels[0].spec.node.input}': planned together, "
                                 f"the input read once (est. {g.cost * 1e6:.0f} us vs {g.separate_cost * 1e6:.0f} us)",
                                 "pyramid", input=g.levels[0].spec.node.input, nodes=len(g.levels)))


def _bare(node: onnx.NodeProto, index: int, body: str | None) -> NodeInspection:
    op = aten_operator(node) or node.op_type
    return NodeInspection(name=node.name or f"{op}_{index}", op=op, kind="max" if "_max_" in op else "avg",
                          encoding="ATen-attr" if node.op_type == "ATen" else "aten-op", body=body)


def _inspect_node(node_plan, strategy: str) -> NodeInspection:
    """One planned node as the inspection shows it."""
    s = node_plan.spec
    info = NodeInspection(name=s.node.name, op=s.node.op, kind=s.kind, encoding=s.node.encoding, dtype=s.dtype_name,
                          input_shape=list(s.input_shape), output_shape=list(s.output_shape), evidence=s.node.evidence)
    if s.static:
        info.axes = [a.describe() for a in axis_windows(s)]
    else:
        info.axes = [f"{dim_label(n)}->{dim_label(m)}" + (" symbolic" if not isinstance(n, int) else "")
                     for n, m in zip(s.in_sizes, s.out_sizes)]
    info.candidates = [CandidateInfo(c.name, c.cost, c.reason) for c in node_plan.candidates]
    if s.dtype == TensorProto.DOUBLE and s.target == "tensorrt":
        info.warnings.append("float64: TensorRT computes it in float32 (clamped to +-FLT_MAX), so the result "
                             "is exact to float32, not float64")
    p = node_plan.plan
    if p is None and node_plan.optional:  # may stay as it is (the patch leaves it): not a blocker
        info.why = "left as it is: no exact lowering applies (reasons above)"
        return info
    if p is None:  # (a required node: an optional one returned above)
        info.blocker, info.hint = _node_blocker(node_plan, strategy)  # as the patch's error would say it
        return info
    info.chosen, info.why = p.lowering.name, p.why
    info.ops = p.lowering.ops(s)
    return info


def _node_blocker(node_plan, strategy: str) -> tuple[str, str | None]:
    spec, err = node_plan.spec, node_plan.error
    if strategy != "auto":
        return err.text, err.hint_text
    if not spec.static:
        dims = format_shape(spec.input_shape)
        return (f"a pooled axis is symbolic (input {dims}) and no lowering handles symbolic sizes",
                f"bind the input's shape with {INPUT_SHAPES_FORM} (the patched model then keeps that "
                "shape), or re-export with static spatial dims")
    other = plan_or_none(replace(spec, target="onnxruntime")) if spec.target == "tensorrt" else None
    if other is not None:
        return ("no exact lowering uses only ops TensorRT's ONNX parser accepts",
                f"{TARGET_ONNXRUNTIME} would use '{other.lowering.name}'")
    # the hint the patch gives (api.patch fills a missing one the same way)
    return "no exact lowering applies (reasons above)", err.hint_text or no_lowering_hint(spec, err.data.get("opset"))


def _lint(mp, result: Inspection) -> TensorRTLint:
    """The TensorRT lint of the model the plan would write (its replacements applied to a copy), or of the
    original where the patch is blocked."""
    model = mp.model
    leftovers = mp.found.leftovers + [n for _, _, n in nested_leftover_nodes(model)]
    leftover_labels = {n.name or (f"-> {n.output[0]}" if n.output else "") for n in leftovers}
    original_labels = {n.name or (f"-> {n.output[0]}" if n.output else "") for n in nodes_deep(model.graph.node)}
    linted, target_model = "original", model
    if result.would_patch and (leftovers or mp.separate or mp.groups or mp.found.regions):  # exporter pools repaired or
        # optimized; regions: the dynamo front end's decompositions
        try:
            target_model = copy.deepcopy(model)
            apply_model_plan(target_model, mp)
            linted = "patched"
        except PoolFixError as err:  # should not happen once every node was planned; say so, lint the original
            logger.debug("in-memory patch failed: %s", err)
            result.notes.append(Note(f"the in-memory patch failed ({err.text}); linted the original graph",
                                     "linted-original"))
            target_model = model
    ignored = {n.op_type for n in leftovers} if linted == "original" else set()  # (the leftovers, not linted as such)
    findings = [{"node": f.node, "op_type": f.op_type, "domain": f.domain, "severity": f.severity, "reason": f.reason,
                 "emitted": linted == "patched" and f.node not in original_labels and f.node != "<model>"}
                for f in lint_tensorrt(target_model) if not (f.node in leftover_labels and f.op_type in ignored
                                                             and f.domain in ("org.pytorch.aten", "", "ai.onnx"))]
    return TensorRTLint(linted, findings, sorted(leftover_labels))

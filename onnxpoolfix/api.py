"""The library entry points: ``patch`` (model + report) and ``patch_model`` (model only).

Neither modifies its argument unless ``inplace=True`` (the CLI uses that to avoid holding the model
twice). Both raise :class:`~onnxpoolfix.errors.PoolFixError` subclasses with a one-line message and a
hint; the library never prints.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from .check import ExtraRun, foreign_notes, run_check
from .check.bodies import check_in_bodies
from .check.differential import (
    as_given,
    compare_with_original,
    input_signature,
    original_outputs,
    redefined_by_plan,
    redefined_in,
    right_shapes,
)
from .errors import ArgumentError, InvalidModelError
from .frontends.dynamo import frozen_error, partial_lines
from .frontends.input_check import check_input_model
from .graph.shapes import light_copy, model_opset, validate_shapes
from .lowering import BY_NAME
from .lowering.base import NO_NCNN_LAYER
from .lowering.calibration import CostModel
from .plan.model import PlanOptions, no_lowering_hint, plan_model
from .plan.planner import AUTO, check_strategy
from .progress import phase, shapes_detail
from .report import NOT_CHECKED, NOTHING_TO_PATCH, NodeReport, Note, PatchReport, WarningNote
from .rewrite.model import apply_model_plan
from .words import (
    API,
    CHECK_SHAPES,
    DROP_STRATEGY,
    FORCED_BY_STRATEGY,
    INPUT_SHAPES,
    TARGET_PORTABLE,
    TARGET_TENSORRT,
    TRACED_SHAPES,
    render_all,
)

logger = logging.getLogger(__name__)

TARGETS = ("onnxruntime", "tensorrt", "portable")


@dataclass
class PatchResult:
    model: onnx.ModelProto
    report: PatchReport


def patch(model: onnx.ModelProto, *, check: bool = True, strategy: str = AUTO, target: str = "onnxruntime",
          input_shapes: Mapping[str, Sequence[int]] | None = None, keep_input_shapes: bool = False,
          check_shapes: Sequence[Mapping[str, Sequence[int]]] | None = None, inplace: bool = False,
          model_dir: str | None = None, seed: int = 0, optimize_exporter_pools: bool = False,
          traced_shapes: Mapping[str, Sequence[int]] | None = None, allow_partial: bool = False,
          costs: str | os.PathLike | None = None, tune: bool = False, tune_threads: int | None = None) -> PatchResult:
    """Replace every leftover adaptive pooling node of ``model`` with an exact standard-ONNX subgraph.

    Args:
        model: the model; copied first unless ``inplace``.
        check: run the patched model in onnxruntime and compare every replaced node with the numpy
            reference (raises :class:`CheckFailedError` on a mismatch).
        strategy: ``"auto"`` (cheapest exact lowering per node) or a lowering name to force.
        target: ``"onnxruntime"``, ``"tensorrt"`` (only ops TensorRT's ONNX parser accepts) or ``"portable"``
            (ops every common runtime and converter takes, no weights in average lowerings: docs/targets.md).
        input_shapes: bind graph inputs' symbolic dims, e.g. ``{"x": [1, 3, 224, 224]}``. Where a
            pooled axis was symbolic, the static lowering then holds for that size only, so the patched
            model keeps the bound input shape (the report says so); otherwise the original signature stays.
            A dynamo file's regions are proven at it (it must then equal ``traced_shapes`` where both bind OUT).
        keep_input_shapes: always save the bound input shapes.
        check_shapes: concrete input shapes to run the check at (default: derived from the model).
        model_dir: the folder holding the model's external data, when its weights are not loaded.
        seed: seed of every random input the patch draws: the check's, and the dynamo front end's proof of
            each region it replaces.
        optimize_exporter_pools: also plan the pooling nodes the exporter lowered itself where their
            windows are adaptive ones (GlobalAveragePool, AveragePool k = s = n/m, ...; see
            :mod:`onnxpoolfix.frontends.exporter_pools`): each is replaced when an exact lowering is estimated faster
            (GlobalAveragePool -> ReduceMean) or when it joins a pyramid read once with its siblings.
        traced_shapes: the input shapes a dynamo export was traced at (the export call's example input), e.g.
            ``{"x": [1, 3, 320, 416]}``: every decomposed region is proven there and frozen AveragePools get
            their adaptive output size from it; binds nothing (OUT keeps its symbolic dims). A size the graph
            contradicts raises :class:`ShapeError`.
        allow_partial: write the fix even where some dynamo region stays frozen at the traced size (by default
            that raises :class:`UnsupportedNodeError`: OUT would be wrong at other sizes); the report's
            ``partial`` then says, per region, where OUT is right.
        costs: a file ``onnxpoolfix calibrate`` wrote: the planner ranks the lowerings with the cost constants
            measured on this machine (default: the built-in ones); each node's ``why`` then names the file.
        tune: time every exact lowering of each static node in onnxruntime and keep the fastest, with
            ``tune_threads`` intra-op threads (default: onnxruntime's); ``why`` then says "tuned".

    Nodes that pool the same tensor are planned together (:mod:`onnxpoolfix.plan.pyramid`) unless ``strategy``
    forces a lowering. Leftovers inside If/Loop/Scan bodies are patched too (:mod:`onnxpoolfix.frontends.bodies`).
    The exporter's own pooling nodes that cannot run as
    written (an unbatched input's kernel rank, float64 pools onnxruntime has no kernel for) are always
    replaced by the exact lowering of the adaptive pool they stand for
    (:mod:`onnxpoolfix.frontends.exporter_repair`; their ``why`` says "repaired: ...").
    """
    return render_all(patch_as_written(**locals()), API)  # every argument as given


def _nothing_to_patch(model: onnx.ModelProto, report: PatchReport) -> PatchResult:
    """Nothing replaced, yet nodes no onnxruntime kernel runs may stay (an ``org.pytorch.aten::avg_pool2d`` whose
    kernel is the input's dynamic size, say: no adaptive pool): OUT will not load there, which the user learns
    now rather than from the runtime."""
    report.notes.append(NOTHING_TO_PATCH)  # after the front ends' notes: e.g. a frozen dynamo export
    report.notes += foreign_notes(model, ", none of them an adaptive pool onnxpoolfix replaces: onnxruntime loads "
                                  "OUT only with a custom-op library for them")
    return PatchResult(model, report)


def patch_as_written(model: onnx.ModelProto, *, check: bool = True, strategy: str = AUTO, target: str = "onnxruntime",
                     input_shapes: Mapping[str, Sequence[int]] | None = None, keep_input_shapes: bool = False,
                     check_shapes: Sequence[Mapping[str, Sequence[int]]] | None = None, inplace: bool = False,
                     model_dir: str | None = None, seed: int = 0, optimize_exporter_pools: bool = False,
                     traced_shapes: Mapping[str, Sequence[int]] | None = None, allow_partial: bool = False,
                     costs: str | os.PathLike | None = None, tune: bool = False, tune_threads: int | None = None,
                     input_checked: bool = False, kept_by_table: bool = False) -> PatchResult:
    """:func:`patch`, its report's texts as written: references to what the caller can change unrendered
    (:mod:`onnxpoolfix.words`), for a caller that speaks other words than the API (the CLI, ``export``).
    ``input_checked``: the caller ran :func:`~onnxpoolfix.frontends.input_check.check_input_model` on this
    model itself (the CLI, naming the file): the ONNX checker runs once per run, not twice. ``kept_by_table``:
    the model is ``onnxpoolfix.export``'s, whose translation table kept every adaptive pool as a node
    (:class:`~onnxpoolfix.frontends.base.PlanOptions`)."""
    cost_model, input_shapes, traced_shapes = read_arguments(
        "patch", model, target, strategy, seed, costs, tune, tune_threads, input_shapes, traced_shapes,
        check=check, keep_input_shapes=keep_input_shapes, inplace=inplace,
        optimize_exporter_pools=optimize_exporter_pools, allow_partial=allow_partial, tune=tune)
    if check_shapes is not None:
        if isinstance(check_shapes, Mapping) or not isinstance(check_shapes, Sequence):
            raise TypeError("check_shapes takes a list of {input name: shape} mappings, one per check run, "
                            f"not {type(check_shapes).__name__}")
        check_shapes = [shape_map(c, "check_shapes entry") for c in check_shapes]
    caller = model
    if not inplace:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    if not model.HasField("graph"):
        raise InvalidModelError("the model has no graph", "the file is not a complete ONNX model; re-export it")
    if not input_checked:  # the CLI's check of IN (exit 3) on a model in memory, the model named "model": no file
        check_input_model(model)  # onnxruntime cannot run (an unbatched export's own pools) is "nothing to patch"
    # before any work: a typo in a bound or a check size is not worth a patch
    validate_shapes(model, input_shapes, traced_shapes, check_shapes)
    report = PatchReport(opset=model_opset(model), target=target)
    options = PlanOptions(strategy=strategy, target=target, input_shapes=input_shapes,
                          keep_input_shapes=keep_input_shapes, optimize_exporter_pools=optimize_exporter_pools,
                          seed=int(seed), traced_shapes=traced_shapes, model_dir=model_dir,
                          cost_model=cost_model, kept_by_table=kept_by_table)
    signature = input_signature(model)  # (a front end may bind OUT's inputs: the file as given is this one)
    mp = plan_model(model, options)
    found = mp.found
    if found.inlined and inplace:  # the inliner builds a new model: inplace means the caller's object
        caller.CopyFrom(found.model)
        found.model = caller
    model = found.model
    if found.blocker is not None:
        raise found.blocker
    frozen = frozen_error(found.suspects, traced=bool(traced_shapes))
    if frozen is not None and not allow_partial:  # never a file silently wrong at other sizes
        raise frozen
    notes = report.notes
    notes += found.notes + mp.notes
    report.suspects = [asdict(s) for s in found.suspects]  # what a front end suspected and left, with why
    report.partial = partial_lines(found.suspects)
    notes += [WarningNote(p, "partial") for p in report.partial]  # printed first: OUT is right only where these say
    if not mp.nodes:
        return _nothing_to_patch(model, report)
    if found.inlined:
        notes.insert(0, Note(f"inlined the local function(s) {', '.join(found.inlined)} that held leftovers or "
                             "computed their output sizes", "inlined-functions"))
    for n in mp.blocked:  # the first node no lowering applies to stops the patch
        if n.error.hint is None:
            n.error.hint = no_lowering_hint(n.spec, n.error.data.get("opset"))
        raise n.error
    if mp.kept:
        notes.append(Note(f"kept {len(mp.kept)} exporter pool(s) as they are (already the fastest exact form)",
                          "exporter-pools-kept", count=len(mp.kept)))
    if not mp.separate and not mp.groups and not mp.in_bodies:
        return _nothing_to_patch(model, report)
    # where the original file is known right (its static size, the given traced size) and the dynamo front end
    # read frozen pools or regions in it: its outputs there, before the rewrite, for OUT to equal
    original = None
    right_at = right_shapes(model, signature, traced_shapes, input_shapes) if check and found.regions else None
    if right_at is not None:
        planned = [p.spec for p in mp.separate] + [lv.spec for g in mp.groups for lv in g.levels]
        with as_given(model, signature):  # IN as torch wrote it, where OUT is bound (--input-shape)
            original = original_outputs(model, right_at, redefined_by_plan(model, planned), seed=seed,
                                        model_dir=model_dir)
    # the input file's graph without its weights, for the check of the layers after the replaced nodes
    input_light = light_copy(model) if check else None
    applied = apply_model_plan(model, mp)
    done = [d for d in applied if not d.in_body]  # (first: the top level's)
    in_bodies = [d for d in applied if d.in_body]
    specs = [d.spec for d in done]
    resting = {r.result for r in found.regions if r.rests_on_traced}
    for d in applied:
        s = d.spec
        report.nodes.append(NodeReport(
            name=s.node.name, op=s.node.op, kind=s.kind, encoding=s.node.encoding,
            input_shape=list(s.input_shape), output_shape=list(s.output_shape), lowering=d.lowering,
            why=d.why + (" (inside a control-flow body)" if d.in_body else ""), ops=d.ops, evidence=s.node.evidence,
            indices="computed" if s.node.indices_output else "dropped" if s.node.unused_outputs else "none",
            rests_on_traced_shape=s.node.output in resting))
    ifs = sum(d.ops.count("If") for d in applied)  # the bodies' replacements too, and Ifs inside our branches
    if ifs:  # measured (docs/targets.md): the converters of the runtimes beyond onnxruntime refuse them
        # tract 0.23 wires every If of one graph under the one name "If": a second one fails its load
        top = sum(n.op_type == "If" for n in model.graph.node)
        tract = "; nor tract, with two in one graph" if top > 1 else ""
        notes.append(Note(f"OUT holds {ifs} If node(s) onnxpoolfix wrote (NaN/inf guards, which finite inputs skip), "
                          f"which pnnx (ncnn) and onnx2torch do not take (nor onnx2tf, around a MatMul{tract}) "
                          f"(measured): {TARGET_PORTABLE} writes none, nor {TARGET_TENSORRT}", "if-guards", ifs=ifs,
                          top_level_ifs=top))
    notes.extend(ncnn_note(applied))
    one_axis = [d.spec.node.label for d in applied if d.lowering == "window_slices" and d.spec.opset >= 18
                and not all(isinstance(n, int) for n in d.spec.in_sizes)]
    if one_axis:  # review58: pnnx's Reduction then lists no axes; the two-axis global mean converts
        notes.append(Note(f"{len(one_axis)} node(s) reduce windows of symbolic length along one axis, whose axes "
                          "input (from opset 18) pnnx drops when it writes ncnn: ncnn then averages nothing and is "
                          f"wrong (measured); for ncnn, bind the size with {INPUT_SHAPES} (static windows), or "
                          "export at opset 17 (torch.onnx.export(..., opset_version=17); torch keeps 18 where it "
                          "cannot convert down: check the file), where the axes are an attribute pnnx keeps",
                          "pnnx-reduce-axes",
                          nodes=one_axis))
    fixed = [d.spec for d in applied if d.spec.node.encoding in ("aten-op", "ATen-attr") and all(
        isinstance(m, int) for m in d.spec.node.output_size) and not all(
        isinstance(n, int) for n in d.spec.input_shape[-d.spec.node.rank:])]
    if fixed:  # review41: (max(7, H), max(7, W)) or int(H * 0.5) traced into a constant that no file shows
        notes.append(Note(f"{len(fixed)} leftover(s) pool symbolic axes to a constant size written in the file "
                          f"({', '.join(sorted({'x'.join(map(str, s.node.output_size)) for s in fixed}))}): right "
                          "where the model's size is constant; where Python computes it from the input's size "
                          "(int(), max(), math.ceil), the TorchScript exporter wrote the traced value instead, which "
                          "OUT keeps (onnxpoolfix.export compares with torch at other sizes)", "constant-output-size",
                          count=len(fixed)))
    if check:
        # OUT's run for the differential check goes with the node check's (one session of OUT's cut)
        extra = ExtraRun(original[0], sorted(redefined_in(model))) if original is not None else None
        if specs and found.regions and not input_shapes and _traced_alone(check_shapes, traced_shapes):
            raise ArgumentError(f"every {CHECK_SHAPES} entry is the {TRACED_SHAPES}, where OUT equals the file as "
                                "torch wrote it: the check would prove nothing at the other sizes OUT takes",
                                f"add a {CHECK_SHAPES} entry at another size, or bind the size with {INPUT_SHAPES} "
                                "for a static OUT", argument="check_shapes", value=[dict(c) for c in check_shapes])
        if specs:
            run_check(model, specs, report, check_shapes=check_shapes,
                      # a partial fix runs where its frozen regions do: at the traced size
                      input_shapes=input_shapes or (traced_shapes if report.partial else None),
                      model_dir=model_dir, seed=seed, extra=extra, input_light=input_light)
        if in_bodies:
            check_in_bodies(model, in_bodies, report.nodes[len(done):], report, model_dir=model_dir, seed=seed)
        if original is not None:
            where = ("its static size" if not right_at else
                     f"the given {'traced' if traced_shapes else 'bound'} size {shapes_detail(right_at)}")
            with phase("compare", shapes_detail(right_at)):
                compare_with_original(model, *original, model_dir=model_dir, where=where, traced=bool(right_at),
                                      got=extra.got if extra is not None and extra.got else None)
            notes.append(Note(f"OUT equals the original file at {where}, where the exporter's graph is right "
                              + ("if it is the export call's example input " if right_at else "")
                              + "(every tensor onnxpoolfix wrote that the rest of the graph reads, so every output)",
                              "equals-original"))
    else:
        notes.append(NOT_CHECKED)
    return PatchResult(model, report)


#: the largest dim an input shape may bind (int32: what TensorRT and most kernels index with)
MAX_DIM = 2**31 - 1


def shape_map(value, what: str) -> dict[str, list[int]] | None:
    """``{input name: dims}`` as the API takes it (numpy integers welcome), checked: a clear TypeError or
    ValueError for anything else, never a float quietly truncated."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} takes a mapping {{input name: shape}}, not {type(value).__name__}")
    out: dict[str, list[int]] = {}
    for name, dims in value.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: input names are strings, not {type(name).__name__} ({name!r})")
        if isinstance(dims, (str, bytes)) or not isinstance(dims, (Sequence, np.ndarray)):
            raise TypeError(f"{what}[{name!r}] takes a sequence of ints, not {type(dims).__name__} ({dims!r})")
        parsed = []
        for d in list(dims):
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                raise TypeError(f"{what}[{name!r}]: dims are integers, not {type(d).__name__} ({d!r})")
            if not 1 <= int(d) <= MAX_DIM:
                raise ArgumentError(f"{what}[{name!r}]: dim {int(d)} is not in [1, {MAX_DIM}]",
                                    f"give sizes from 1 to {MAX_DIM}", argument=what.split()[0], input=name,
                                    value=int(d))
            parsed.append(int(d))
        out[name] = parsed
    return out


def read_arguments(caller: str, model, target: str, strategy: str, seed, costs, tune, tune_threads, input_shapes,
                   traced_shapes, /, **flags) -> tuple[CostModel, dict | None, dict | None]:
    """The arguments ``patch`` and ``inspect_model`` share, checked before any work (a TypeError or
    ValueError naming the argument: a programming error, not a model problem), then read: the cost model and
    the input and traced shapes (:func:`shape_map`). ``flags``: the yes/no arguments (:func:`check_flags`)."""
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"{caller}() takes an onnx.ModelProto, not {type(model).__name__}")
    check_choices(target, strategy)
    check_seed(seed)
    check_flags(**flags)
    return (CostModel.of(costs, tune, tune_threads), shape_map(input_shapes, "input_shapes"),
            shape_map(traced_shapes, "traced_shapes"))


def ncnn_note(applied) -> list[Note]:
    """The portable target's static nodes written with ops ncnn (through pnnx) has no layer for. The planner
    writes a form without them wherever one applies (plan/planner.py), so these are the nodes none fits (max
    pooling whose indices are read, an axis of more than 64 windows), or a strategy forced: a note naming them
    and why the window slices do not apply to the first (measured: tests/test_runtime_ncnn.py). Symbolic sizes are
    not noted here: pnnx converts one size at a time (bind it)."""
    lacking = [d for d in applied if d.spec.target == "portable" and d.spec.static and set(d.ops) & NO_NCNN_LAYER]
    if not lacking:
        return []
    ops = sorted({op for d in lacking for op in d.ops} & NO_NCNN_LAYER)
    why = BY_NAME["window_slices"].check(lacking[0].spec)
    remedy = (f"no form without them applies to {lacking[0].spec.node.label}: {why}" if why else
              f"{FORCED_BY_STRATEGY}; {DROP_STRATEGY} for a form without them")
    return [Note(f"{len(lacking)} node(s) written with {', '.join(ops)}, which ncnn (through pnnx) has no layer "
                 f"for (measured); {remedy}", "ncnn-layers", nodes=[d.spec.node.label for d in lacking], ops=ops,
                 forced=why is None)]


def _traced_alone(check_shapes, traced_shapes) -> bool:
    """Whether every check size given is the traced size (on the inputs the traced size names)."""
    return bool(check_shapes and traced_shapes) and all(
        all(list(c.get(k, v)) == list(v) for k, v in traced_shapes.items()) for c in check_shapes)


def check_choices(target: str, strategy: str) -> None:
    """``target`` and ``strategy`` as ``patch``, ``inspect_model`` and ``export`` take them: an
    :class:`~onnxpoolfix.errors.ArgumentError` (a ValueError) for a name that is none of them, as the
    strategy's own check (:func:`~onnxpoolfix.plan.planner.check_strategy`) says it."""
    if not isinstance(target, str) or target not in TARGETS:
        raise ArgumentError(f"target must be one of {TARGETS}, not {target!r}", f"choose one of: {', '.join(TARGETS)}",
                            argument="target", value=target, choices=list(TARGETS))
    check_strategy(strategy)


def check_flags(**flags) -> None:
    """Yes/no arguments (``check``, ``inplace``, ...) as ``patch``, ``inspect_model`` and ``export`` take
    them: True or False (numpy's bool too), a TypeError naming the argument for anything else (``check="no"``
    would otherwise be taken for yes)."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} takes True or False, not {value!r}")


def check_seed(seed) -> None:
    """``seed`` as ``patch`` and ``inspect_model`` take it: a non-negative integer (numpy's welcome)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")


def patch_model(model: onnx.ModelProto, **kwargs) -> onnx.ModelProto:
    """:func:`patch` returning only the model (``patch(...).model``). Same arguments, same errors."""
    return patch(model, **kwargs).model

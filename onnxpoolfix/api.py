"""The library entry points: ``patch`` (model + report) and ``patch_model`` (model only).

Neither modifies its argument unless ``inplace=True`` (the CLI uses that to avoid holding the model
twice). Both raise :class:`~onnxpoolfix.errors.PoolFixError` subclasses with a one-line message and a
hint; the library never prints.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .decomposed import drop_dead_region_nodes, find_decomposed_pools
from .errors import CheckFailedError, InvalidModelError, PoolFixError, UnsupportedNodeError
from .exporter_pools import find_exporter_pools, keeps_its_op
from .find import find_pool_nodes, is_pool_leftover
from .planner import AUTO, STRATEGIES, candidates, plan, plan_or_none
from .pyramid import NAME as PYRAMID
from .pyramid import plan_groups
from .report import NodeReport, PatchReport
from .rewrite import apply_plans
from .shapes import PoolSpec, apply_input_shapes, model_opset, resolve_specs, validate_input_shape
from .verify import check_patched, default_check_shapes

logger = logging.getLogger(__name__)

TARGETS = ("onnxruntime", "tensorrt")


@dataclass
class PatchResult:
    model: onnx.ModelProto
    report: PatchReport


def patch(model: onnx.ModelProto, *, check: bool = True, strategy: str = AUTO, target: str = "onnxruntime",
          input_shapes: Mapping[str, Sequence[int]] | None = None, keep_input_shapes: bool = False,
          check_shapes: Sequence[Mapping[str, Sequence[int]]] | None = None, inplace: bool = False,
          model_dir: str | None = None, seed: int = 0, optimize_exporter_pools: bool = False) -> PatchResult:
    """Replace every leftover adaptive pooling node of ``model`` with an exact standard-ONNX subgraph.

    Args:
        model: the model; copied first unless ``inplace``.
        check: run the patched model in onnxruntime and compare every replaced node with the numpy
            reference (raises :class:`CheckFailedError` on a mismatch).
        strategy: ``"auto"`` (cheapest exact lowering per node) or a lowering name to force.
        target: ``"onnxruntime"`` or ``"tensorrt"`` (only ops TensorRT's ONNX parser accepts).
        input_shapes: bind graph inputs' symbolic dims, e.g. ``{"x": [1, 3, 224, 224]}``. Where a
            pooled axis was symbolic, the static lowering then holds for that size only, so the patched
            model keeps the bound input shape (the report says so); otherwise the original signature stays.
        keep_input_shapes: always save the bound input shapes.
        check_shapes: concrete input shapes to run the check at (default: derived from the model).
        model_dir: the folder holding the model's external data, when its weights are not loaded.
        seed: seed of the check's random inputs.
        optimize_exporter_pools: also plan the pooling nodes the exporter lowered itself where their
            windows are adaptive ones (GlobalAveragePool, AveragePool k = s = n/m, ...; see
            :mod:`onnxpoolfix.exporter_pools`): each is replaced when an exact lowering is estimated faster
            (GlobalAveragePool -> ReduceMean) or when it joins a pyramid read once with its siblings.

    Nodes that pool the same tensor are planned together (:mod:`onnxpoolfix.pyramid`) unless ``strategy``
    forces a lowering.
    """
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"patch() takes an onnx.ModelProto, not {type(model).__name__}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    input_shapes = shape_map(input_shapes, "input_shapes")
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
    # before any work: a typo in a bound or a check size is not worth a patch
    for name, dims in (input_shapes or {}).items():
        validate_input_shape(model, name, dims, "--input-shape")
    for shapes in check_shapes or ():
        for name, dims in shapes.items():
            validate_input_shape(model, name, dims, "--check-shape")
    opset = model_opset(model)
    report = PatchReport(opset=opset, target=target)
    model, inlined = inline_functions_holding_leftovers(model)
    if inlined and inplace:  # the inliner builds a new model: inplace means the caller's object
        caller.CopyFrom(model)
        model = caller
    nodes = find_pool_nodes(model.graph, opset)
    specs: list[PoolSpec] = []
    notes: list[str] = []
    if nodes:
        specs, notes = _specs(model, nodes, opset=opset, target=target, input_shapes=input_shapes,
                              keep_input_shapes=keep_input_shapes)
    # regions the dynamo exporter decomposed (onnxpoolfix.decomposed): proven, then planned like leftovers
    decomposed = find_decomposed_pools(model, opset=opset, target=target, input_shapes=input_shapes, taken=specs,
                                       seed=seed)
    specs += decomposed.specs
    notes += decomposed.notes()
    exporter = _exporter_pools(model, specs, opset=opset, target=target) if optimize_exporter_pools else []
    if not specs and not exporter:
        report.check_note = "; ".join(notes + [decomposed.frozen_note() or "nothing to patch"])
        return PatchResult(model, report)
    if inlined:
        notes.insert(0, f"inlined the local function(s) {', '.join(inlined)} that held leftovers")
    plans = [_plan(s, strategy) for s in specs]
    exporter_plans = [p for p in map(plan_or_none, exporter) if p is not None]
    if strategy == AUTO:
        groups, rest = plan_groups(plans + exporter_plans)
    else:  # a forced lowering is a comparison of that lowering: no grouping
        groups, rest = [], plans + exporter_plans
    mine = {id(p) for p in plans}
    kept = {id(p) for p in rest if id(p) not in mine and keeps_its_op(p.spec, p.lowering.name)}
    rest = [p for p in rest if id(p) not in kept]
    if kept:
        notes.append(f"kept {len(kept)} exporter pool(s) as they are (already the fastest exact form)")
    if not rest and not groups:
        report.check_note = "; ".join(notes + ["nothing to patch"])
        return PatchResult(model, report)
    emitted, group_ops = apply_plans(model, rest, groups)
    drop_dead_region_nodes(model, decomposed.regions)
    done = [(p.spec, p.lowering.name, p.why, ops) for p, ops in zip(rest, emitted)]
    levels = [(g, lv) for g in groups for lv in g.levels]
    done += [(lv.spec, PYRAMID, g.why(lv), ops) for (g, lv), ops in zip(levels, group_ops)]
    done.sort(key=lambda d: d[0].node.index)
    specs = [d[0] for d in done]
    for s, lowering, why, ops in done:
        report.nodes.append(NodeReport(
            name=s.node.name, op=s.node.op, kind=s.kind, encoding=s.node.encoding,
            input_shape=list(s.input_shape), output_shape=list(s.output_shape),
            lowering=lowering, why=why, ops=ops,
            indices="computed" if s.node.indices_output else "dropped" if s.node.unused_outputs else "none"))
    if notes:
        report.check_note = "; ".join(notes)
    if check:
        _check(model, specs, report, check_shapes=check_shapes, input_shapes=input_shapes,
               model_dir=model_dir, seed=seed)
    else:
        report.check_note = "; ".join(notes + ["--no-check"])
    return PatchResult(model, report)


def _exporter_pools(model, specs, *, opset, target) -> list[PoolSpec]:
    from .find import _read_names
    from .shapes import infer

    info = infer(model, {s.node.output: (s.dtype, s.output_shape) for s in specs})
    read = _read_names(model.graph) | {o.name for o in model.graph.output}
    return find_exporter_pools(model, info, opset=opset, target=target, read=read)


def _plan(spec: PoolSpec, strategy: str):
    """``planner.plan``, with a hint added when no lowering applies: what would make one apply."""
    try:
        return plan(spec, strategy)
    except UnsupportedNodeError as e:
        if e.hint is None:
            e.hint = _no_lowering_hint(spec)
        raise


def _no_lowering_hint(spec: PoolSpec) -> str:
    reasons = [c.reason or "" for c in candidates(spec)]
    opsets = sorted({int(v) for r in reasons for v in re.findall(r"needs opset (\d+)", r) if int(v) > spec.opset})
    bind = "bind the symbolic input dims with --input-shape NAME:D0,D1,... (a static lowering then applies)"
    if opsets:
        n = opsets[0]
        convert = (f"convert the model to opset {n} or newer first "
                   f"(onnx.version_converter.convert_version(model, {n}))")
        return f"{convert}, or {bind}" if not spec.static else convert
    if not spec.static:
        return bind
    return "this variant is not supported; please report it with the model (rerun with -v)"


def inline_functions_holding_leftovers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Exports with ``export_modules_as_functions`` hide leftovers inside model-local functions, where
    nothing can replace them per call site: inline those functions first (onnx's own inliner)."""
    # a function holds a leftover if its body has one or calls a function that holds one (nested modules:
    # Outer calls Block calls the pool): all of them are inlined, down to the top-level graph
    held = {(f.domain, f.name) for f in model.functions if any(is_pool_leftover(n) for n in f.node)}
    while True:
        more = {(f.domain, f.name) for f in model.functions
                if any((n.domain, n.op_type) in held for n in f.node)} - held
        if not more:
            break
        held |= more
    if not held:
        return model, []
    from onnx import inliner

    holders = [f.name for f in model.functions if (f.domain, f.name) in held]
    logger.debug("inlining local functions %s", holders)
    return inliner.inline_selected_functions(model, sorted(held)), holders


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
                raise ValueError(f"{what}[{name!r}]: dim {int(d)} is not in [1, {MAX_DIM}]")
            parsed.append(int(d))
        out[name] = parsed
    return out


def patch_model(model: onnx.ModelProto, **kwargs) -> onnx.ModelProto:
    """:func:`patch` returning only the model (``patch(...).model``). Same arguments, same errors."""
    return patch(model, **kwargs).model


def _specs(model, nodes, *, opset, target, input_shapes, keep_input_shapes) -> tuple[list[PoolSpec], list[str]]:
    notes: list[str] = []
    if not input_shapes:
        return resolve_specs(model, nodes, opset=opset, target=target), notes
    if keep_input_shapes:
        apply_input_shapes(model, input_shapes)
        return resolve_specs(model, nodes, opset=opset, target=target), ["input shapes bound as given"]
    originals = {i.name: onnx.ValueInfoProto() for i in model.graph.input}
    for i in model.graph.input:
        originals[i.name].CopyFrom(i)
    apply_input_shapes(model, input_shapes)
    bound = resolve_specs(model, nodes, opset=opset, target=target)
    for i in model.graph.input:  # back to the original signature; keep the binding only where needed
        i.CopyFrom(originals[i.name])
    try:
        free = resolve_specs(model, nodes, opset=opset, target=target)
    except Exception:  # without the binding some input shape is not even inferable
        free = [None] * len(nodes)
    specs = [f if f is not None and f.static else b for f, b in zip(free, bound)]
    if any(f is None or not f.static for f in free):
        apply_input_shapes(model, input_shapes)
        notes.append("input shapes kept as bound: a pooled axis was symbolic and the static lowering holds "
                     "only at the bound size")
    return specs, notes


#: The check runs the model on random inputs: refuse it (exit 5, with the way out) when one pooled tensor
#: alone would exceed this many elements (1 GiB of float32), rather than let onnxruntime take the machine.
CHECK_MAX_ELEMENTS = 1 << 28


def _refuse_huge_check(specs) -> None:
    for s in specs:
        for what, shape in (("input", s.input_shape), ("output", s.output_shape)):
            n = 1
            for d in shape:
                n *= d if isinstance(d, int) else 2  # symbolic dims are checked at small sizes
            if n > CHECK_MAX_ELEMENTS:
                raise CheckFailedError(
                    f"{s.node.label}: its {what} {s.describe_shape(shape)} has {n:.3g} elements, too many to run "
                    f"the onnxruntime check (limit {CHECK_MAX_ELEMENTS:.3g})",
                    "check at smaller sizes with --check-shape NAME:D0,D1,..., or skip the check with --no-check")


def _check(model, specs, report: PatchReport, *, check_shapes, input_shapes, model_dir, seed) -> None:
    if not check_shapes:  # sizes the user chose are the user's call
        _refuse_huge_check(specs)
    for shapes in check_shapes or ():  # again on the patched signature (an --input-shape may have stayed bound)
        for name, dims in shapes.items():
            validate_input_shape(model, name, dims, "--check-shape")
    try:
        shapes_list, note = default_check_shapes(model, specs, check_shapes=check_shapes, input_shapes=input_shapes,
                                                 model_dir=model_dir, seed=seed)
        results = check_patched(model, specs, input_shapes=shapes_list, model_dir=model_dir, seed=seed)
    except PoolFixError:
        raise
    except MemoryError:
        raise CheckFailedError("not enough memory to run the onnxruntime check at the model's input sizes",
                               "check at smaller sizes with --check-shape NAME:D0,D1,..., or skip the check with "
                               "--no-check") from None
    except Exception as e:  # onnxruntime refusing the model, wherever in the check it is first loaded or run
        if not type(e).__module__.startswith("onnxruntime"):
            raise
        raise CheckFailedError(
            f"onnxruntime cannot load or run the patched model: {' '.join(str(e).split())[:300]}",
            "the rest of the model may be invalid for onnxruntime (it would refuse the original too); "
            "skip the check with --no-check to write OUT anyway") from None
    report.checked = True
    failed = []
    for n, s in zip(report.nodes, specs):
        r = results[s.node.index]
        n.max_error, n.tolerance = r.max_error, r.tolerance
        n.checked_shapes = [list(x) for x in r.shapes]
        if not r.passed:
            failed.append(f"{s.node.label}: {r.detail}")
    report.check_passed = not failed
    alone = sum(1 for r in results.values() if r.structured)
    if alone:
        note += f"; {alone} of {len(results)} replaced subgraph(s) also run alone on structured inputs"
    report.check_note = "; ".join(x for x in (report.check_note, note) if x)
    if failed:
        raise CheckFailedError(
            f"onnxruntime check failed for {len(failed)} node(s): {failed[0]}",
            "this is a bug in onnxpoolfix: please report it with the model (rerun with -v); "
            "--strategy can force another lowering meanwhile", report=report)

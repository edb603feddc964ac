"""The proof: run the patched model in onnxruntime and compare every replaced node with the reference.
:func:`run_check` (the size guard, the sizes, the run, the report's check fields); the modules: ARCHITECTURE.md."""
from __future__ import annotations

import math
from collections import Counter

from onnx import helper

from ..errors import ArgumentError, CheckFailedError, CheckTooLargeError, PoolFixError
from ..graph import NEGATIVE_PERM_HINT, negative_perms, nodes_deep
from ..graph.shapes import type_dims, validate_input_shape
from ..report import RESTS_ON_TRACED, Note, PatchReport, WarningNote, format_shape
from ..words import (
    CHECK_SHAPES,
    CHECK_SHAPES_FORM,
    INPUT_SHAPES,
    INPUT_SHAPES_FORM,
    NO_CHECK,
    OR_EXPORT_COMPARED,
    STRATEGY,
    TRACED_SHAPES,
    VERBOSE,
)
from .compare import NodeCheck, compare
from .consistency import layers_after_refuse
from .feeds import graph_inputs
from .runner import ExtraRun, check_patched
from .sizes import default_check_shapes
from .whole import load_whole, runs_through
from .windows_proof import prove_slice_bounds, prove_windows

__all__ = ["run_check", "refuse_huge_check", "foreign_ops", "ONNXRUNTIME_DOMAINS", "CHECK_MAX_ELEMENTS",
           "check_patched", "ExtraRun", "default_check_shapes", "compare", "NodeCheck"]


#: The check runs the model on random inputs: refuse it (exit 8, with the way out) when one pooled tensor
#: alone would exceed this many elements (1 GiB of float32), rather than let onnxruntime take the machine.
CHECK_MAX_ELEMENTS = 1 << 28


def refuse_huge_check(specs) -> None:
    for s in specs:
        for what, shape in (("input", s.input_shape), ("output", s.output_shape)):
            n = math.prod(d if isinstance(d, int) else 2 for d in shape)  # symbolic dims are checked at small sizes
            if n > CHECK_MAX_ELEMENTS:
                raise CheckTooLargeError(
                    f"{s.node.label}: its {what} {format_shape(shape)} has {n:.3g} elements, too many to run "
                    f"the onnxruntime check (limit {CHECK_MAX_ELEMENTS:.3g})",
                    f"check at smaller sizes with {CHECK_SHAPES_FORM}, or skip the check with {NO_CHECK}")


#: a check at sizes the caller chose is refused when its random inputs alone would take more than this share
#: of the memory available (the run holds them, the patched model's tensors and the references: several
#: times that); past it the kernel kills the process (exit 137, no message) instead of exit 8
CHECK_MEMORY_SHARE = 0.25


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable), or None where that cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def refuse_beyond_memory(model, check_shapes) -> None:
    """Refuse (exit 8) check sizes the caller chose whose inputs would not fit: see CHECK_MEMORY_SHARE."""
    avail = available_memory()
    if avail is None:
        return
    elems = {vi.name: type_dims(vi.type)[0] for vi in graph_inputs(model)}
    for shapes in check_shapes:
        total = sum(math.prod(dims) * (helper.tensor_dtype_to_np_dtype(elems[name]).itemsize if elems.get(name) else 4)
                    for name, dims in shapes.items())
        if total > CHECK_MEMORY_SHARE * avail:
            text = " ".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
            raise CheckTooLargeError(
                f"{CHECK_SHAPES} {text}: the check's inputs alone take {total / 2**30:.1f} GiB, more than "
                f"{CHECK_MEMORY_SHARE:.0%} of the {avail / 2**30:.1f} GiB of memory available",
                f"check at smaller sizes with {CHECK_SHAPES_FORM}, or skip the check with {NO_CHECK}")


#: the op domains onnxruntime's CPU build has kernels in (tests/check/test_cut.py compares with onnxruntime's list)
ONNXRUNTIME_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc"})


def foreign_ops(model) -> dict[str, int]:
    """``{"domain::op": count}`` of the nodes (bodies included) of a domain onnxruntime has no kernels in and that
    is not one of the model's local functions: the check runs only the part of the graph computing the replaced
    nodes, so such nodes elsewhere do not stop it, and are named instead."""
    local = {(f.domain, f.name) for f in model.functions}
    return dict(Counter(f"{n.domain}::{n.op_type}" for n in nodes_deep(model.graph.node)
                        if n.domain not in ONNXRUNTIME_DOMAINS and (n.domain, n.op_type) not in local))


def foreign_notes(model, why: str) -> list[WarningNote]:
    """The warning naming :func:`foreign_ops` where there are any (``why``: what follows the list)."""
    foreign = foreign_ops(model)
    return [WarningNote(f"OUT keeps {sum(foreign.values())} node(s) of a domain onnxruntime has no kernels in "
                        f"({', '.join(sorted(foreign)[:3])}{', ...' if len(foreign) > 3 else ''}){why}",
                        "foreign-domains", domains=sorted(foreign))] if foreign else []


def _prove_dynamic_windows(model, specs, report: PatchReport, failed: list[str]) -> str:
    """Every window of each ``dynamic`` (or ``window_slices``) lowering proven up to a bound
    (:mod:`.windows_proof`); the note."""
    cache: dict = {}
    bounds, lines, names = [], [], []
    for n, s in zip(report.nodes, specs):
        if n.lowering not in ("dynamic", "window_slices"):
            continue
        names.append(n.lowering)
        proof = prove_windows(model, s, cache) if n.lowering == "dynamic" else prove_slice_bounds(s, cache)
        if proof.failure:
            failed.append(f"{s.node.label}: {proof.failure}")
        elif proof.bound is not None:
            bounds.append(proof.bound)
            lines.extend(proof.lines)
    if not bounds:
        return ""
    report.windows_proven_to = min(bounds)
    return (f"every window of the {' and '.join(sorted(set(names)))} lowering proven up to n = {min(bounds)} "
            f"({'; '.join(dict.fromkeys(lines))})")


def _refuse_against_binding(model, name: str, dims, bound) -> None:
    """A check size that contradicts the caller's own binding, which OUT keeps (the dim is fixed in the
    patched model now): say it is the binding, not the model, that fixes the dim."""
    if bound is None or len(bound) != len(dims):
        return
    vi = next((i for i in model.graph.input if i.name == name), None)
    if vi is None:
        return
    fixed = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    for axis, (b, d) in enumerate(zip(bound, dims)):
        if b != d and axis < len(fixed) and fixed[axis] == b:
            text = ",".join(map(str, bound))
            raise ArgumentError(
                f"{CHECK_SHAPES} {name}:{','.join(map(str, dims))}: dim {axis} is bound to {b} by your {INPUT_SHAPES} "
                f"{name}:{text}, and the patched model keeps that binding (the static lowering holds at that size)",
                f"check at the bound size ({name}:{text}), or bind the size you want to check",
                argument="check_shapes", input=name, axis=axis, value=d, bound=b)


def _refused_hint(report: PatchReport) -> str:
    """Why onnxruntime may refuse the patched model. A frozen pool sized from --traced-shape alone gets the output
    size that size implies: at any size but the export's own, the layers after it (AlexNet's Linear) cannot take
    it, which the original graph never showed (it runs at its traced size), so the binding is named first."""
    resting = [n for n in report.notes if isinstance(n, WarningNote) and RESTS_ON_TRACED in n]
    if resting:
        return (f"a frozen pool's output size was read off the given {TRACED_SHAPES} alone: if the file was not "
                "exported at that size, give the export call's example input there; otherwise the rest of the "
                f"model may be invalid for onnxruntime; skip the check with {NO_CHECK} to write OUT anyway")
    return ("the rest of the model may be invalid for onnxruntime (it would refuse the original too); "
            f"skip the check with {NO_CHECK} to write OUT anyway")


def _after_frozen_verdict(err: CheckFailedError, input_light, seed: int) -> CheckFailedError:
    """``err`` told apart where OUT failed in a node of the input file after a replaced dynamo pool and the input
    file runs that node at the same sizes (:func:`~.whole.runs_through`): the shape the export computed there from
    the traced size is then the cause, which no check size changes (review69's two pools flattened under a dynamic
    batch: the hint offered check sizes). Where the input file fails there too (a frozen export fails where torch
    runs, as a model may not run at a size) or its run says nothing, ``err`` as it is."""
    node = err.data.get("after_frozen")
    if not node or input_light is None or runs_through(input_light, node, err.data["shapes"], seed) is not True:
        return err
    return CheckFailedError(
        err.text + f"; the input file runs '{node}' at those sizes: the export computed its shape at the traced size, "
        "which no other check size changes",
        "export through onnxpoolfix.export, which keeps every adaptive pool's output size (the layers after it then "
        f"follow the input's size), or bind the export call's example input with {INPUT_SHAPES_FORM} for a static "
        "OUT", report=err.report, **err.data, cause="computed-at-traced-size")


def run_check(model, specs, report: PatchReport, *, check_shapes, input_shapes, model_dir, seed,
              extra: ExtraRun | None = None, input_light=None) -> None:
    if not check_shapes:  # sizes the user chose are the user's call
        refuse_huge_check(specs)
    for shapes in check_shapes or ():  # again on the patched signature (an --input-shape may have stayed bound)
        for name, dims in shapes.items():
            _refuse_against_binding(model, name, dims, (input_shapes or {}).get(name))
            validate_input_shape(model, name, dims, CHECK_SHAPES)
    if check_shapes:
        refuse_beyond_memory(model, check_shapes)
    try:
        shapes_list, note = default_check_shapes(model, specs, check_shapes=check_shapes, input_shapes=input_shapes,
                                                 model_dir=model_dir, seed=seed)
        refused = layers_after_refuse(input_light, specs, shapes_list) if input_light is not None else None
        if refused is not None and refused.frozen:  # OUT runs, and gives the traced size's shape at every size
            raise CheckFailedError(f"the layers after the replaced nodes do not follow what these compute"
                                   f"{' at ' + refused.where if refused.where else ''}: {refused.error}",
                                   "the TorchScript exporter typed the leftover at the size it traced: bind the "
                                   f"sizes to the export's example input with {INPUT_SHAPES_FORM} for a static OUT"
                                   f"{OR_EXPORT_COMPARED}")
        if refused is not None and refused.where:  # OUT fails there: the exporter wrote them for the traced size
            raise CheckFailedError(f"the layers after the replaced nodes do not take what these compute at "
                                   f"{refused.where} (onnx's shape inference, which takes the input file as it is, "
                                   f"its sizes bound there): {refused.error}",
                                   "the exporter wrote them for the size it traced: bind the sizes OUT is for to "
                                   f"the export's example input with {INPUT_SHAPES_FORM} for a static OUT")
        if refused is not None:  # the layers after the replaced nodes, which the check does not run
            raise CheckFailedError(f"the layers after the replaced nodes do not take what these compute (onnx's "
                                   f"shape inference, which takes the input file as it is): {refused.error}",
                                   NEGATIVE_PERM_HINT if negative_perms(model.graph) else _refused_hint(report))
        try:
            results = check_patched(model, specs, input_shapes=shapes_list, model_dir=model_dir, seed=seed,
                                    extra=extra)
        except CheckFailedError as e:
            raise _after_frozen_verdict(e, input_light, seed) from None
        lacking = None if foreign_ops(model) else load_whole(model, model_dir)  # the layers the cut left out
    except PoolFixError:
        raise
    except MemoryError:
        raise CheckTooLargeError("not enough memory to run the onnxruntime check at the model's input sizes",
                                 f"check at smaller sizes with {CHECK_SHAPES_FORM}, or skip the check with "
                                 f"{NO_CHECK}") from None
    except Exception as e:  # onnxruntime refusing the model, wherever in the check it is first loaded or run
        if not type(e).__module__.startswith("onnxruntime"):
            raise
        raise CheckFailedError(
            f"onnxruntime cannot load or run the patched model: {' '.join(str(e).split())[:300]}",
            _refused_hint(report)) from None
    report.checked = True
    failed, upstream = [], []
    for n, s in zip(report.nodes, specs):
        r = results[s.node.index]
        n.max_error, n.tolerance = r.max_error, r.tolerance
        n.checked_shapes = [list(x) for x in r.shapes]
        if not r.passed:
            failed.append(f"{s.node.label}: {r.detail}")
            upstream.append(r.upstream)
    proven = _prove_dynamic_windows(model, specs, report, failed)
    upstream += [False] * (len(failed) - len(upstream))  # a window construction that differs is the replacement's own
    report.check_passed = not failed
    report.notes.append(note if isinstance(note, Note) else Note(note, "checked-sizes"))
    report.notes += foreign_notes(model, " as the input had them: the check ran the part of the graph that "
                                  "computes the replaced nodes, which holds none of them")
    if lacking:
        report.notes.append(WarningNote(f"onnxruntime's CPU build has no kernel for an op of OUT outside the replaced "
                                        f"nodes' part of the graph, which the check ran: {lacking}",
                                        "no-onnxruntime-kernel"))
    rounded = sum(1 for r in results.values() if r.input_rounding)
    if rounded:
        report.notes.append(Note(f"{rounded} half-precision subgraph(s) fed unrounded float32 values by onnxruntime "
                                 "(the ops before them run in float32): exact alone on the fetched input, and in the "
                                 "model within its rounding", "half-precision-inputs", subgraphs=rounded))
    alone = sum(1 for r in results.values() if r.structured)
    if alone:
        report.notes.append(Note(f"{alone} of {len(results)} replaced subgraph(s) also run alone on structured inputs",
                                 "structured-inputs", subgraphs=alone))
    reached = [kd for kd in ("downsampling", "equal", "upsampling")
               if any(kd in r.size_kinds for r in results.values())]
    if reached:
        report.notes.append(Note(f"the output sizes the graph computes reached: {', '.join(reached)}", "size-kinds",
                                 kinds=reached))
    if proven:
        report.notes.append(Note(proven, "windows-proven", up_to=report.windows_proven_to))
    if failed and all(upstream):  # the replacement alone is exact on the very input it failed on in the model
        raise CheckFailedError(
            f"onnxruntime check failed for {len(failed)} node(s): {failed[0]}",
            "the replaced subgraph alone is exact on that input: in the model onnxruntime computes what it "
            "consumes differently from the fetched tensor (float16 ops run in float32); compare the whole model "
            f"with torch (onnxpoolfix.export does), or skip the check with {NO_CHECK}", report=report)
    if failed:
        raise CheckFailedError(
            f"onnxruntime check failed for {len(failed)} node(s): {failed[0]}",
            f"this is a bug in onnxpoolfix: please report it with the model {VERBOSE}; "
            f"{STRATEGY} can force another lowering meanwhile", report=report)

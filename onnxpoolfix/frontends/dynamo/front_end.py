"""The dynamo front end: adaptive pooling that ``torch.onnx.export(..., dynamo=True)`` decomposed (or froze as an
AveragePool/MaxPool, :mod:`.frozen`), found, proven and handed to the planner like a leftover node: a
:class:`~onnxpoolfix.spec.PoolSpec` (encoding ``dynamo``) and a :class:`~.base.Region` per proven region, a
:class:`~.base.Suspect` (left as it is, with why) for the rest. Where the regions are, :mod:`.dataflow` finds
(metadata only names the evidence); whether each is adaptive pooling, :mod:`.proof` decides (the numbers decide).
The package docstring tells a region's life; docs/dynamo-files.md is the guide.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import onnx

from ...errors import UnsupportedNodeError
from ...graph import nodes_deep, subgraphs
from ...graph.emit import EMITTED_BY
from ...graph.shapes import model_opset, output_shape
from ...graph.size_precision import size_precision_error
from ...report import OWN_SIZE_UNSEEN, RESTS_ON_TRACED, Note, WarningNote
from ...spec import PoolNode, PoolSpec
from ...words import ALLOW_PARTIAL, TRACED_SHAPES_FORM
from ..base import EXPORT, STRIPPED, TRACED, FrontEndResult, PlanOptions, Region, Suspect
from .binding import bind_dynamo_out, refuse_undeclared_sizes
from .contradiction import contradiction_error
from .crops import DROPPED_CROP, dropped_crop
from .dataflow import (
    ENCODING,
    FOLLOWS_INPUT,
    KEPT_AS_WRITTEN,
    SELECT_OPS,
    Candidate,
    DataflowGraph,
    LazyInfo,
    find_candidate,
    is_end,
    node_evidence,
)
from .frozen import frozen_pool_ops, size_text
from .frozen_readings import GENUINE, node_readings, window_attrs
from .merges import drop_merged
from .metadata import has_metadata
from .proof import Proof
from .proof_search import prove_all
from .ranges import range_note
from .reduces import computed_reduces, mean_of_a_result
from .selections import selects_fixed_axes

logger = logging.getLogger(__name__)

__all__ = ["ENCODING", "dynamo_specs", "find_decomposed_pools", "frozen_error", "partial_lines"]


def dynamo_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()) -> FrontEndResult:
    """Every proven region of the top-level graph, notes naming each one's evidence and each suspect left. Proven at
    ``traced_shapes``, else ``input_shapes``, bound in OUT where a region pools a symbolic axis (:mod:`.binding`)."""
    if options.kept_by_table:  # onnxpoolfix.export kept every adaptive pool as a node: nothing
        return FrontEndResult()
    refuse_undeclared_sizes(model, options.input_shapes)  # a size the file's dim cannot take: exit 2 (review70)
    result = find_decomposed_pools(model, opset=model_opset(model), target=options.target,
                                   input_shapes=options.traced_shapes or options.input_shapes,
                                   traced_shapes=options.traced_shapes, taken=found, seed=options.seed,
                                   model_dir=options.model_dir)
    bind_dynamo_out(model, result, options.input_shapes, options.traced_shapes)
    result.notes += region_notes(result.regions, result.suspects, bound=bool(options.traced_shapes))
    result.notes += range_note(model) if result.specs else []
    return result


def region_notes(regions: Sequence[Region], suspects: Sequence[Suspect], *, bound: bool = False) -> list[Note]:
    out = [Note(f"dynamo region '{r.result}' ({r.nodes} nodes, pooling '{r.pooled}' to {size_text(r.output_size)}): "
                f"{r.evidence}; " + (f"proven at {'x'.join(map(str, r.proven_at))}" if r.proven_at
                                     else "output size from that evidence"), "dynamo-region", result=r.result)
           for r in regions]
    out += [Note(f"left the suspected region '{s.result}' ({s.evidence}): {s.why}", "suspect-left", result=s.result)
            for s in suspects]
    frozen = sum(s.frozen for s in suspects)
    sized = all(s.remedy == TRACED for s in suspects if s.frozen)  # what the traced size would decide
    if frozen:  # the sizes were bound and still did not prove it: binding them again is no advice
        out.append(WarningNote(
            f"{frozen} adaptive pooling region{'s' if frozen != 1 else ''} under symbolic sizes "
            f"stay{'s' if frozen == 1 else ''} frozen at the export's traced size (wrong or crashing at "
            "other sizes)" + (": a traced size, given or not, does not decide what they are" if not sized else
                              ", not proven at the given traced size either" if bound else
                              f": give that size with {TRACED_SHAPES_FORM} so onnxpoolfix can "
                              f"prove and replace {'them' if frozen != 1 else 'it'}"), "regions-left-frozen",
            regions=frozen))
    return out


def frozen_error(suspects: Sequence[Suspect], *, traced: bool) -> UnsupportedNodeError | None:
    """The refusal of a patch that would leave regions frozen at the traced size (OUT silently wrong or
    crashing at other sizes), or None where no suspect is frozen. ``traced``: a traced size was given. The hint
    names what would decide them (the suspects' remedies), and only that: never a flag that writes a wrong file."""
    frozen = [s for s in suspects if s.frozen]
    if not frozen:
        return None
    names = ", ".join(f"'{s.result}' (right {s.right_at or 'only at the traced size'})" for s in frozen)
    remedies = {s.remedy for s in frozen}
    partial = f"; {ALLOW_PARTIAL} writes the partial fix anyway"
    if STRIPPED in remedies:
        hint = ("the file lacks the dynamo exporter's node metadata, which tells an adaptive pool from a genuine "
                "one: torch drops it below opset_version 18, as do onnxslim, onnxsim, onnx.version_converter, "
                "onnx-graphsurgeon and onnxruntime's optimized_model_filepath (which may rewrite a decomposition); "
                "run onnxpoolfix on the file torch wrote at opset 18 or later (its default), before any of them, or "
                "export through onnxpoolfix.export, which keeps it at any opset_version" + partial)
    elif EXPORT in remedies:
        why = next(s.why for s in frozen if s.remedy == EXPORT)
        hint = (f"this file's traced size does not decide it ({why}): export through onnxpoolfix.export, "
                "which keeps every adaptive pool's output size" + partial)
    elif traced and all("(right at " in s.right_at for s in frozen):  # proven where traced, nowhere else
        hint = ("they equal adaptive pooling at the traced size, but torch's decomposition is frozen on the branches "
                "it took (other sizes need windows this file does not hold; an export at another size may): export "
                "through onnxpoolfix.export, which keeps every adaptive pool's output size" + partial)
    elif traced and all("at the bound size" in s.why and "differs from adaptive" in s.why for s in frozen):
        hint = ("at the given traced size they ran and computed something other than adaptive pooling of the "
                "tensor they read: either that is not the export call's example input, or torch fused another op "
                "into the decomposition (a permute of the pooled tensor joins its Transpose), which no traced size "
                "repairs; check the size, or export through onnxpoolfix.export, which keeps every adaptive pool "
                "as a node" + partial)
    else:
        what = ("the given traced size did not prove them (is it the export call's example input? if it is, they "
                "may be the model's own ops that equal a pool only at that size: x.unfold(3, 3, 2).mean(-1) at 13 "
                "is 13 -> 6); if it is not, give the example input's size with "
                if traced else "give the size the model was exported at (the export call's example input) with ")
        hint = what + f"{TRACED_SHAPES_FORM} where each pool's size is the one its module was built with, or " \
            f"export through onnxpoolfix.export ({OWN_SIZE_UNSEEN})" + partial
    return UnsupportedNodeError(
        f"{len(frozen)} pooling region(s) of this export would stay frozen at its traced size, so OUT "
        f"would be wrong or crash at other input sizes: {names}", hint)


def partial_lines(suspects: Sequence[Suspect]) -> list[str]:
    """Per frozen region a partial fix leaves: where OUT is right (the report's ``partial``)."""
    return [f"'{s.result}' left frozen: OUT is right {s.right_at or 'only at the traced size'}"
            for s in suspects if s.frozen]


def find_decomposed_pools(model: onnx.ModelProto, *, opset: int, target: str,
                          input_shapes: Mapping[str, Sequence[int]] | None = None,
                          traced_shapes: Mapping[str, Sequence[int]] | None = None,
                          taken: Sequence[PoolSpec] = (), seed: int = 0,
                          model_dir: str | None = None) -> FrontEndResult:
    """Every proven adaptive average pooling decomposition of ``model``'s top-level graph (module doc).

    ``taken``: specs already found (aten leftovers); regions writing their results are skipped.
    ``input_shapes``: an input size to prove symbolic regions at (the traced one, or a bound deployment size: a
    region's output size is in the graph, so a proof there is a proof); ``traced_shapes``: the export call's
    input size, where given: the only size a frozen pool's output size is read at.
    ``model_dir``: the folder external tensors (window tables included) are read from when a region runs alone.

    An exception inside it is a bug, and goes up as one (exit 1): a front end that cannot follow a graph never
    lets the rest be written as if it held no decomposition.
    """
    findings = FrontEndResult()
    graph = model.graph
    symbolic = any(not d.HasField("dim_value") for i in graph.input if i.type.HasField("tensor_type")
                   for d in i.type.tensor_type.shape.dim)  # some input dim is symbolic or unknown
    if symbolic:
        findings.suspects += _body_suspects(graph)
    if not any(n.op_type in SELECT_OPS or n.op_type in ("AveragePool", "MaxPool", "ReduceMean", "ReduceMax", "ArgMax")
               for n in graph.node if not n.doc_string.startswith(EMITTED_BY)):
        return findings
    g = DataflowGraph(graph)
    # the dynamo exporter's file after a simplifier (its node names, none of its metadata): a region that does
    # not prove may be one the simplifier rewrote, so the file the exporter wrote is what would decide it
    marked = _marked(graph)
    stripped = not any(has_metadata(n) for n in graph.node) and (marked or any(n.name.startswith("node_")
                                                                               for n in graph.node))
    info = LazyInfo(model)  # shape inference only once some region is in sight (it is the costly part)
    busy = {s.node.output for s in taken}  # results already planned (aten leftovers)
    resting: list = []
    claimed: set[int] = set()
    candidates: list[Candidate] = []
    for end in reversed(range(len(g.nodes))):
        if end in claimed or not is_end(g, end):
            continue
        if not _may_divide_by_window_lengths(g, end, opset, model_dir):
            continue  # (x - mean) / std: no adaptive average divides by anything but window lengths
        if mean_of_a_result(g, end):
            continue  # pool(x).mean((2, 3)): whole axes of a region's result, right at every size as written
        c = find_candidate(g, end, info, stripped)
        if isinstance(c, Candidate) and symbolic and dropped_crop(g, end):  # torch 2.9 wrote no Slice (review51)
            c = Suspect(c.result, c.evidence, DROPPED_CROP, True, "only where the crop is the identity", EXPORT)
        if isinstance(c, Suspect):
            if not symbolic or c.why in KEPT_AS_WRITTEN or selects_fixed_axes(g, end, info):
                pass  # right as written at every size the file takes
            elif c.why == FOLLOWS_INPUT:  # (None, m) decomposed: its other axes are frozen
                c = replace(c, frozen=True, right_at="only at sizes that take the traced branches",
                            remedy=STRIPPED if stripped else TRACED)
            else:  # torch's decomposition, frozen at the traced size, that no region models (a pool of a
                c = replace(c, frozen=True, remedy=STRIPPED if stripped else EXPORT)  # permuted tensor)
            findings.suspects.append(c)
            continue
        if c is None or c.result in busy:
            continue
        claimed.update(c.region)
        candidates.append(c)
    if symbolic:  # a global mean or max whose line computes its size: frozen where it is 1 (review44 F1)
        left = {s.result for s in findings.suspects}
        findings.suspects += [s for s in computed_reduces(g, info, claimed, traced_shapes) if s.result not in left]
    candidates.reverse()
    contradictions = frozen_pool_ops(model, g, info, traced_shapes, findings, opset=opset, target=target, busy=busy,
                                     resting=resting, dynamo_file=marked, ends=[c.end for c in candidates])
    # (no candidate: nothing proven, nothing to prove; the frozen specs compute no size to check below)
    proven = list(zip(candidates, prove_all(model, g, candidates, input_shapes, seed, info.inferred(),
                                            model_dir=model_dir))) if candidates else []
    smaller = [list(c.smaller) for c in candidates]  # per end, the smaller regions left to try, largest first
    pending = [i for i, (c, p) in enumerate(proven) if p.why and smaller[i]]
    while pending:  # an unproven region: the next smaller one of its end, until one proves or none is left
        tries = [smaller[i].pop(0) for i in pending]
        proofs = prove_all(model, g, tries, input_shapes, seed, info.inferred(), model_dir=model_dir)
        for i, t, p in zip(pending, tries, proofs):
            if not p.why:
                proven[i] = (t, p)
        pending = [i for i, p in zip(pending, proofs) if p.why and smaller[i]]
    against = [(c, p) for c, p in proven if p.contradicts]
    if against:  # regions right only elsewhere: the binding is not the traced size (or gives some inputs alone)
        # the size named was found for this one region: it is the graph's only where nothing else pools (review48:
        # a PSP pyramid's hint named a size where another level differs, and that one's hint a third)
        alone = len(proven) == 1 and not contradictions and not findings.specs
        raise contradiction_error(model, g, against, input_shapes, traced=bool(traced_shapes), alone=alone)
    if contradictions:
        raise contradictions[0]
    _rests(findings, resting, proven)
    for c, p in proven:
        if p.why:
            frozen = any(not isinstance(d, int) for d in c.x_shape) and not selects_fixed_axes(g, c.end, info)
            right_at = (f"only at sizes that take the traced branches (right at {'x'.join(map(str, p.proofs[0]))})"
                        if p.proofs else
                        "only at the size the model was exported at (" + ("not proven at the given size)"
                                                                          if input_shapes else
                                                                          "no size tried proved it; give that size)"))
            # right at the bound size, still unproven (structure alone: a helper's pool, review40 F4): EXPORT
            findings.suspects.append(Suspect(c.result, c.evidence, p.why, frozen, right_at if frozen else "",
                                             STRIPPED if stripped else EXPORT if p.bound_why == "" else TRACED))
            continue
        size_nodes, _ = g.size_ancestors(c.region)
        outs, reads = g.written_and_read(set(c.region) | size_nodes)
        node = g.nodes[c.end]
        fed = g.fresh_name(f"{c.pooled}_permuted") if c.perm else c.pooled
        evidence = c.evidence + (f"; a pool of its permute {list(c.perm)}, fused into torch's Transpose" if c.perm
                                 else "")
        pn = PoolNode(index=c.end, name=node.name or f"{node.op_type}_{c.end}", op=f"adaptive_avg_pool{c.rank}d",
                      kind="avg", rank=c.rank, encoding=ENCODING, input=fed, output=c.result,
                      indices_output=None, unused_outputs=(), output_size=c.output_size, size_input=None,
                      evidence=evidence, input_perm=(c.pooled, c.perm) if c.perm else None)
        findings.specs.append(PoolSpec(pn, c.x_shape, output_shape(pn, c.x_shape), c.elem, opset, target))
        findings.regions.append(Region(c.result, c.pooled, outs, reads, evidence, c.output_size,
                                       tuple(p.proven_at), len(c.region)))
    if symbolic:
        drop_merged(graph, findings)
    size_precision_error(model, findings.specs)  # a computed size in float32 that torch computes otherwise
    return findings


#: the ops of a decomposition or a frozen pool (what pooling in a body is written as)
_BODY_POOL_OPS = SELECT_OPS | {"Div", "ReduceMean", "ReduceSum", "ReduceMax", "AveragePool", "MaxPool"}


def _marked(graph: onnx.GraphProto) -> bool:
    """torch's metadata on the graph's own values, kept where a tool renamed the nodes and cleared theirs (review52)."""
    return any(p.key.startswith("pkg.torch.") for v in (*graph.input, *graph.output, *graph.value_info)
               for p in v.metadata_props)


def _body_suspects(graph: onnx.GraphProto) -> list[Suspect]:
    """Per If/Loop/Scan node whose bodies hold dynamo-written adaptive pooling (``torch.cond`` branches: a
    decomposition or a frozen pool, by its metadata or its windows): under symbolic sizes it is frozen at the
    traced size there too, and this front end reads top-level graphs only. A suspect (refused unless allowed),
    never "nothing to patch"."""
    out, marked = [], _marked(graph)
    for node in graph.node:
        for n in nodes_deep(n for body in subgraphs(node) for n in body.node):
            if n.domain not in ("", "ai.onnx") or n.op_type not in _BODY_POOL_OPS:
                continue  # an aten leftover (onnxpoolfix.export's, FALLTHROUGH's) is read by frontends.bodies
            ev = node_evidence(n)
            if ev is None and n.op_type in ("AveragePool", "MaxPool") and (n.name.startswith("node_") or marked):
                attrs = window_attrs(n)
                readings = node_readings(n, "max" if n.op_type == "MaxPool" else "avg", len(attrs[0]), False) \
                    if attrs else []
                ev = next(((r.says, None) for r in readings if r.what != GENUINE), None)
            if ev is not None:
                out.append(Suspect(node.output[0] if node.output else node.name, ev[0],
                                   f"adaptive pooling inside the bodies of the {node.op_type} '{node.name}' "
                                   "(torch.cond): onnxpoolfix reads the dynamo exporter's pooling in the top-level "
                                   "graph only", True, "only at the size the model was exported at", EXPORT))
                break
    return out


#: constant denominators evaluated (nodes) to tell window lengths from other divisors; beyond, assumed lengths
_MAX_DENOMINATOR_NODES = 64
_MAX_DENOMINATOR_SIZE = 1 << 16


def _may_divide_by_window_lengths(g, end: int, opset: int, model_dir: str | None) -> bool:
    """False where the region ending at the Div ``end`` divides by a constant (no Shape in its ancestry) that
    holds a value no window length is (not a positive integer): csatv2's DCT stem's ``(x[:, :, zigzag] -
    mean) / std`` under symbolic sizes looked like a frozen decomposition (a Gather, a Div by a constant)
    and refused a model without any adaptive pooling. True wherever the divisor cannot be evaluated."""
    node = g.nodes[end]
    if node.op_type != "Div":
        return True
    nodes, shape_sources = g.size_ancestors([end])
    if shape_sources or len(nodes) > _MAX_DENOMINATOR_NODES or any(
            g.nodes[i].op_type in ("Shape", "Size") for i in nodes):
        return True
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    try:
        body = [g.nodes[i] for i in sorted(nodes)]
        needed = {x for n in body for x in n.input} | {node.input[1]}
        inits = [numpy_helper.from_array(numpy_helper.to_array(g.initializers[x], base_dir=model_dir or ""), x)
                 for x in needed if x in g.initializers]
        if sum(int(np.prod(t.dims)) for t in inits) > _MAX_DENOMINATOR_SIZE:
            return True
        graph = helper.make_graph(body, "divisor", [], [helper.make_empty_tensor_value_info(node.input[1])],
                                  initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        (value,) = ReferenceEvaluator(model).run(None, {})
    except Exception:  # noqa: BLE001 - external data out of reach, an op the reference lacks: no opinion
        return True
    value = np.asarray(value, dtype=np.float64)
    return bool(value.size == 0 or np.all((value >= 1) & (value == np.round(value))))


def _rests(findings: FrontEndResult, resting: list, proven: list[tuple[Candidate, Proof]]) -> None:
    """A note per frozen AveragePool (or MaxPool) whose output size rests on the given traced size alone: none of the
    decomposed regions of the same pooled tensor proved at that size (which would confirm it)."""
    confirmed = {c.pooled for c, p in proven if p.bound_why == "" and not p.why}
    for result, pooled, output_size, op in resting:
        if pooled not in confirmed:
            findings.regions = [replace(r, rests_on_traced=True) if r.result == result else r
                                for r in findings.regions]
            findings.notes.append(WarningNote(
                f"the output size of the frozen {op} '{result}' ({size_text(output_size)}) {RESTS_ON_TRACED}: "
                "the graph cannot tell whether the file was exported at it, nor whether the pool's size is the one its "
                f"module was built with ({OWN_SIZE_UNSEEN})", "rests-on-traced-shape", result=result))

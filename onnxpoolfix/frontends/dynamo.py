"""The dynamo front end: adaptive pooling that ``torch.onnx.export(..., dynamo=True)`` decomposed, found,
proven and handed to the planner like a leftover node.

The dynamo exporter does not keep ``adaptive_avg_pool{1,2,3}d`` (nor ``F.interpolate(mode="area")``, which
is the same op): it writes torch's decomposition, e.g. for 8x9 -> 5x7 Transpose + GatherND + Transpose +
Where + Where + a chain of Gather/Add + Div (README, "Files the dynamo exporter already wrote"). With
symbolic H/W the window arithmetic reads the input's sizes, but the unroll (how many window elements are
summed) is frozen at the traced size: the export is wrong, or crashes, at most other sizes. Each region
becomes a :class:`~onnxpoolfix.spec.PoolSpec` (encoding ``dynamo``, its evidence on the node) and a
:class:`~.base.Region` (the nodes it stands for), so it gets the same exact lowerings as a leftover
(``dynamic`` where the size is symbolic, which makes the export exact at every size); the apply step
removes the region's nodes nothing reads any more (:mod:`onnxpoolfix.rewrite.regions`).

Where the regions are (:mod:`.dynamo_graph`; metadata only names the evidence), and the proof that each is
adaptive pooling (:mod:`.dynamo_proof`; the numbers decide). A region that does not prove out, or an
exporter AveragePool frozen at the traced size whose output size is unknown, is a :class:`~.base.Suspect`:
left as it is, with why, in the notes, the report and ``inspect``.

The frozen AveragePool: where the windows were uniform at the traced size the exporter wrote a plain
AveragePool (k1 s1 for AlexNet's 6 -> 6 at 224). Its metadata names the module
(``class_hierarchy``: AdaptiveAvgPool2d) but not the output size: ``fx_node`` is the already decomposed
``aten.avg_pool2d(x, kernel, stride)`` and the stack trace is the caller's line (``self.avgpool(x)``).
So only the traced size, bound with ``input_shapes``, gives it; then the node's windows must be exactly
the adaptive ones at that size.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import onnx

from ..errors import PoolFixError
from ..graph.emit import EMITTED_BY
from ..graph.shapes import SUPPORTED_DTYPES, apply_input_shapes, infer, light_copy, model_opset
from ..report import WarningNote
from ..spec import PoolNode, PoolSpec
from .base import FrontEndResult, PlanOptions, Region, Suspect
from .dynamo_graph import (
    ENCODING,
    SELECT_OPS,
    Candidate,
    DataflowGraph,
    LazyInfo,
    find_candidate,
    is_end,
    node_evidence,
    scales_with_input,
)
from .dynamo_proof import prove_all
from .exporter_pools import adaptive_sizes

logger = logging.getLogger(__name__)

__all__ = ["ENCODING", "dynamo_specs", "find_decomposed_pools"]


def dynamo_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()) -> FrontEndResult:
    """The front end at the seam: every proven region of the top-level graph, with notes naming the
    evidence per region and each suspect left."""
    result = find_decomposed_pools(model, opset=model_opset(model), target=options.target,
                                   input_shapes=options.input_shapes, taken=found, seed=options.seed)
    result.notes += region_notes(result.regions, result.suspects, bound=bool(options.input_shapes))
    return result


def region_notes(regions: Sequence[Region], suspects: Sequence[Suspect], *, bound: bool = False) -> list[str]:
    out = [f"dynamo region '{r.result}' ({r.nodes} nodes, pooling '{r.pooled}' to "
           f"{'x'.join(map(str, r.output_size))}): {r.evidence}; proven at {'x'.join(map(str, r.proven_at))}"
           for r in regions]
    out += [f"left the suspected region '{s.result}' ({s.evidence}): {s.why}" for s in suspects]
    frozen = sum(s.frozen for s in suspects)
    if frozen and bound:  # the sizes were bound and still did not prove it: binding them again is no advice
        out.append(WarningNote(f"{frozen} adaptive pooling region{'s' if frozen != 1 else ''} under symbolic sizes "
                   f"stay{'s' if frozen == 1 else ''} frozen at the export's traced size (wrong or crashing at "
                   "other sizes), not proven at the bound input shapes either: bind the size the model was "
                   "traced at, or see why above"))
    elif frozen:
        out.append(WarningNote(f"{frozen} adaptive pooling region{'s' if frozen != 1 else ''} under symbolic sizes "
                   f"stay{'s' if frozen == 1 else ''} frozen at the export's traced size (wrong or crashing at "
                   "other sizes): bind that size with --input-shape NAME:D0,D1,... so onnxpoolfix can prove "
                   f"and replace {'them' if frozen != 1 else 'it'}"))
    return out


def find_decomposed_pools(model: onnx.ModelProto, *, opset: int, target: str,
                          input_shapes: Mapping[str, Sequence[int]] | None = None,
                          taken: Sequence[PoolSpec] = (), seed: int = 0) -> FrontEndResult:
    """Every proven adaptive average pooling decomposition of ``model``'s top-level graph (module doc).

    ``taken``: specs already found (aten leftovers); regions writing their results are skipped.
    ``input_shapes``: the traced input size, where the caller knows it (the proof of symbolic regions).

    A graph this front end cannot follow (an exception inside it) costs only its own findings: the model is
    patched as if it held no decomposition, and a suspect says why.
    """
    try:
        return _find(model, opset=opset, target=target, input_shapes=input_shapes, taken=taken, seed=seed)
    except PoolFixError:
        raise
    except Exception as e:  # noqa: BLE001 - a bug here must not block the leftovers' patch
        logger.debug("dynamo front end failed", exc_info=True)
        return FrontEndResult(suspects=[Suspect("(graph)", "dynamo front end",
                                                f"not searched: {type(e).__name__}: {' '.join(str(e).split())[:120]}")])


def _find(model, *, opset, target, input_shapes, taken, seed) -> FrontEndResult:
    findings = FrontEndResult()
    graph = model.graph
    if not any(n.op_type in SELECT_OPS or n.op_type == "AveragePool" for n in graph.node
               if not n.doc_string.startswith(EMITTED_BY)):
        return findings
    g = DataflowGraph(graph)
    info = LazyInfo(model)  # shape inference only once some region is in sight (it is the costly part)
    busy = {s.node.output for s in taken}  # results already planned (aten leftovers)
    _frozen_pool_ops(model, g, info, input_shapes, findings, opset=opset, target=target, busy=busy)
    claimed: set[int] = set()
    candidates: list[Candidate] = []
    for end in reversed(range(len(g.nodes))):
        if end in claimed or not is_end(g, end):
            continue
        c = find_candidate(g, end, info)
        if isinstance(c, Suspect):
            findings.suspects.append(c)
            continue
        if c is None or c.result in busy:
            continue
        claimed.update(c.region)
        candidates.append(c)
    candidates.reverse()
    if not candidates:
        return findings
    prove_all(model, g, candidates, input_shapes, seed, info.inferred())
    pending = [c for c in candidates if c.why and c.smaller]
    while pending:  # an unproven region: the next smaller one of its end, until one proves or none is left
        tries = [(c, c.smaller.pop(0)) for c in pending]
        prove_all(model, g, [t for _, t in tries], input_shapes, seed, info.inferred())
        for c, t in tries:
            if not t.why:
                candidates[candidates.index(c)] = t
        pending = [c for c, t in tries if t.why and c.smaller]
    for c in candidates:
        if c.why:
            frozen = any(not isinstance(d, int) for d in c.x_shape)
            findings.suspects.append(Suspect(c.result, c.evidence, c.why, frozen))
            continue
        size_nodes, _ = g.size_ancestors(c.region)
        outs = frozenset(o for i in set(c.region) | size_nodes for o in g.nodes[i].output if o)
        reads = frozenset(x for i in set(c.region) | size_nodes for x in g.nodes[i].input if x)
        node = g.nodes[c.end]
        k = c.rank
        pn = PoolNode(index=c.end, name=node.name or f"{node.op_type}_{c.end}", op=f"adaptive_avg_pool{k}d",
                      kind="avg", rank=k, encoding=ENCODING, input=c.pooled, output=c.result,
                      indices_output=None, unused_outputs=(), output_size=c.output_size, size_input=None,
                      evidence=c.evidence)
        findings.specs.append(PoolSpec(pn, c.x_shape, c.y_shape, c.elem, opset, target))
        findings.regions.append(Region(c.result, c.pooled, outs, reads, c.evidence, c.output_size,
                                       tuple(c.proven_at), len(c.region)))
    return findings


def _frozen_pool_ops(model, g: DataflowGraph, info, input_shapes, findings: FrontEndResult, *, opset, target, busy
                     ) -> None:
    """AveragePool nodes the exporter wrote for an adaptive pool whose windows were uniform at the traced size
    (6 -> 6 in an AlexNet traced at 224 is an AveragePool k1 s1): under symbolic sizes they are frozen there.
    Only the metadata says such a node is adaptive pooling, and only the traced size gives its output size:
    it is replaced when the caller bound the inputs (``input_shapes``) and the node's windows at that size are
    exactly the adaptive ones; otherwise it is reported."""
    bound_info = None
    for index, node in enumerate(g.nodes):
        if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if node.doc_string.startswith(EMITTED_BY) or node.output[0] in busy:
            continue
        ev = node_evidence(node)
        if ev is None:
            continue
        elem, dims = info.get(node.input[0], (0, None))
        if dims is None or len(dims) < 3 or elem not in SUPPORTED_DTYPES:
            continue
        k = len(dims) - 2
        if ev[1] is not None and ev[1] != k or all(isinstance(d, int) for d in dims[2:]):
            continue  # static: the exporter's node is right (--optimize-exporter-pools plans it)
        result = node.output[0]
        if scales_with_input(node):  # binding the traced size would fix an output size torch does not have
            findings.suspects.append(Suspect(result, ev[0], "an AveragePool frozen at the traced size of an "
                                             "F.interpolate by scale_factor: its output size follows the input "
                                             "size, which no adaptive pool of one output size computes"))
            continue
        if not input_shapes:
            findings.suspects.append(Suspect(result, ev[0], "an AveragePool frozen at the traced size under symbolic "
                                             "sizes; its adaptive output size is known only at that size", True))
            continue
        if bound_info is None:
            bound = light_copy(model)
            apply_input_shapes(bound, input_shapes)
            bound_info = infer(bound)
        _, bx = bound_info.get(node.input[0], (0, None))
        if bx is None or not all(isinstance(d, int) for d in bx):
            findings.suspects.append(Suspect(result, ev[0], "its input size at the bound input shapes is unknown",
                                             True))
            continue
        sizes = adaptive_sizes(node, tuple(bx[2:]))
        if sizes is None:
            findings.suspects.append(Suspect(result, ev[0], f"at the bound size its windows ({'x'.join(map(str, bx))}) "
                                             "are not adaptive pooling windows", True))
            continue
        pn = PoolNode(index=index, name=node.name or f"AveragePool_{index}", op=f"adaptive_avg_pool{k}d", kind="avg",
                      rank=k, encoding=ENCODING, input=node.input[0], output=result, indices_output=None,
                      unused_outputs=tuple(o for o in node.output[1:] if o), output_size=sizes, size_input=None,
                      evidence=ev[0])
        findings.specs.append(PoolSpec(pn, tuple(dims), tuple(dims[:2]) + sizes, elem, opset, target))
        findings.regions.append(Region(result, node.input[0], frozenset(o for o in node.output if o),
                                       frozenset(x for x in node.input if x), ev[0], sizes, tuple(bx), 1))
        busy.add(result)

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
from dataclasses import replace

import onnx

from ..errors import PoolFixError, ShapeError, UnsupportedNodeError
from ..graph.emit import EMITTED_BY
from ..graph.shapes import SUPPORTED_DTYPES, apply_input_shapes, infer, light_copy, model_opset, output_shape
from ..report import WarningNote
from ..spec import InputDim, PoolNode, PoolSpec
from .base import FrontEndResult, PlanOptions, Region, Suspect
from .dynamo_graph import (
    COMPUTED,
    ENCODING,
    FOLLOWS_INPUT,
    SELECT_OPS,
    Candidate,
    DataflowGraph,
    LazyInfo,
    find_candidate,
    is_end,
    literal_output_size,
    node_evidence,
    scales_with_input,
)
from .dynamo_proof import prove_all
from .dynamo_search import declared_dims, evaluate
from .exporter_pools import adaptive_sizes

logger = logging.getLogger(__name__)

__all__ = ["ENCODING", "dynamo_specs", "find_decomposed_pools", "frozen_error", "partial_lines"]


def dynamo_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()) -> FrontEndResult:
    """The front end at the seam: every proven region of the top-level graph, with notes naming the
    evidence per region and each suspect left. The size the regions are proven at: ``traced_shapes``, else
    ``input_shapes`` (the aten front end binds those in OUT; here they are the traced size too)."""
    binding = options.traced_shapes or options.input_shapes
    result = find_decomposed_pools(model, opset=model_opset(model), target=options.target,
                                   input_shapes=binding, taken=found, seed=options.seed, model_dir=options.model_dir)
    result.notes += region_notes(result.regions, result.suspects, bound=bool(binding))
    return result


def region_notes(regions: Sequence[Region], suspects: Sequence[Suspect], *, bound: bool = False) -> list[str]:
    out = [f"dynamo region '{r.result}' ({r.nodes} nodes, pooling '{r.pooled}' to {size_text(r.output_size)}): "
           f"{r.evidence}; " + (f"proven at {'x'.join(map(str, r.proven_at))}" if r.proven_at
                                else "output size from its source line")
           for r in regions]
    out += [f"left the suspected region '{s.result}' ({s.evidence}): {s.why}" for s in suspects]
    frozen = sum(s.frozen for s in suspects)
    if frozen:  # the sizes were bound and still did not prove it: binding them again is no advice
        out.append(WarningNote(
            f"{frozen} adaptive pooling region{'s' if frozen != 1 else ''} under symbolic sizes "
            f"stay{'s' if frozen == 1 else ''} frozen at the export's traced size (wrong or crashing at "
            "other sizes)" + (", not proven at the given traced size either" if bound else
                              ": give that size with --traced-shape NAME:D0,D1,... so onnxpoolfix can "
                              f"prove and replace {'them' if frozen != 1 else 'it'}")))
    return out


def frozen_error(suspects: Sequence[Suspect], *, traced: bool) -> UnsupportedNodeError | None:
    """The refusal of a patch that would leave regions frozen at the traced size (OUT silently wrong or
    crashing at other sizes), or None where no suspect is frozen. ``traced``: a traced size was given."""
    frozen = [s for s in suspects if s.frozen]
    if not frozen:
        return None
    names = ", ".join(f"'{s.result}' (right {s.right_at or 'only at the traced size'})" for s in frozen)
    what = ("the given traced size did not prove them (is it the export call's example input?); "
            if traced else "give the size the model was exported at (the export call's example input) with ")
    return UnsupportedNodeError(
        f"{len(frozen)} pooling region(s) of this dynamo export would stay frozen at its traced size, so OUT "
        f"would be wrong or crash at other input sizes: {names}",
        what + ("" if not traced else "give it with ") + "--traced-shape NAME:D0,D1,..., "
        "or export through onnxpoolfix.export; --allow-partial writes the partial fix anyway")


def partial_lines(suspects: Sequence[Suspect]) -> list[str]:
    """Per frozen region a partial fix leaves: where OUT is right (the report's ``partial``)."""
    return [f"'{s.result}' left frozen: OUT is right {s.right_at or 'only at the traced size'}"
            for s in suspects if s.frozen]


def find_decomposed_pools(model: onnx.ModelProto, *, opset: int, target: str,
                          input_shapes: Mapping[str, Sequence[int]] | None = None,
                          taken: Sequence[PoolSpec] = (), seed: int = 0,
                          model_dir: str | None = None) -> FrontEndResult:
    """Every proven adaptive average pooling decomposition of ``model``'s top-level graph (module doc).

    ``taken``: specs already found (aten leftovers); regions writing their results are skipped.
    ``input_shapes``: the traced input size, where the caller knows it (the proof of symbolic regions).
    ``model_dir``: the folder external tensors (window tables included) are read from when a region runs alone.

    A graph this front end cannot follow (an exception inside it, a bug) costs only its own findings: the model
    is patched as if it held no decomposition, and a suspect says why. Under symbolic input sizes that suspect
    is frozen (the patch is refused unless partial fixes are allowed): an unsearched region could stay frozen
    at the traced size, and exit 0 promises OUT right at every size.
    """
    try:
        return _find(model, opset=opset, target=target, input_shapes=input_shapes, taken=taken, seed=seed,
                     model_dir=model_dir)
    except PoolFixError:
        raise
    except Exception as e:  # noqa: BLE001 - a bug here must not block the leftovers' patch
        logger.debug("dynamo front end failed", exc_info=True)
        failure = f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
        unsearched = _symbolic(model.graph) and any(n.op_type in SELECT_OPS or n.op_type == "AveragePool"
                                                    for n in model.graph.node)
        return FrontEndResult(suspects=[Suspect(
            "(graph)", "dynamo front end", f"not searched: {failure}", frozen=unsearched,
            right_at=f"unknown: onnxpoolfix's dynamo front end failed on this graph ({failure}; please report it)"
            if unsearched else "")])


def _symbolic(graph: onnx.GraphProto) -> bool:
    """Some graph input has a dim without a value (a symbolic or unknown size)."""
    return any(not d.HasField("dim_value") for i in graph.input if i.type.HasField("tensor_type")
               for d in i.type.tensor_type.shape.dim)


def _find(model, *, opset, target, input_shapes, taken, seed, model_dir) -> FrontEndResult:
    findings = FrontEndResult()
    graph = model.graph
    if not any(n.op_type in SELECT_OPS or n.op_type == "AveragePool" for n in graph.node
               if not n.doc_string.startswith(EMITTED_BY)):
        return findings
    g = DataflowGraph(graph)
    symbolic = _symbolic(graph)
    info = LazyInfo(model)  # shape inference only once some region is in sight (it is the costly part)
    busy = {s.node.output for s in taken}  # results already planned (aten leftovers)
    resting: list = []
    claimed: set[int] = set()
    candidates: list[Candidate] = []
    for end in reversed(range(len(g.nodes))):
        if end in claimed or not is_end(g, end):
            continue
        c = find_candidate(g, end, info)
        if isinstance(c, Suspect):
            if c.why == FOLLOWS_INPUT and symbolic:  # (None, m) decomposed: its other axes are frozen
                c = replace(c, frozen=True, right_at="only at sizes that take the traced branches")
            findings.suspects.append(c)
            continue
        if c is None or c.result in busy:
            continue
        claimed.update(c.region)
        candidates.append(c)
    candidates.reverse()
    # pooled by a decomposition too (a pyramid's other levels): an AveragePool there is one more level, even
    # where the metadata is gone
    siblings = {t.pooled for c in candidates for t in [c, *c.smaller]}
    _frozen_pool_ops(model, g, info, input_shapes, findings, opset=opset, target=target, busy=busy, resting=resting,
                     siblings=siblings)
    if not candidates:
        _rests(findings, resting, [])
        return findings
    prove_all(model, g, candidates, input_shapes, seed, info.inferred(), model_dir=model_dir)
    pending = [c for c in candidates if c.why and c.smaller]
    while pending:  # an unproven region: the next smaller one of its end, until one proves or none is left
        tries = [(c, c.smaller.pop(0)) for c in pending]
        prove_all(model, g, [t for _, t in tries], input_shapes, seed, info.inferred(), model_dir=model_dir)
        for c, t in tries:
            if not t.why:
                candidates[candidates.index(c)] = t
        pending = [c for c, t in tries if t.why and c.smaller]
    against = [c for c in candidates if c.contradicts]
    if against:  # regions right only elsewhere: the binding is not the traced size
        c = against[0]
        raise ShapeError(
            f"the given traced size contradicts the graph: {len(against)} dynamo region(s) "
            f"({', '.join(repr(c.result) for c in against)}) differ from adaptive pooling there, though "
            f"'{c.result}' equals it at {'x'.join(map(str, c.contradicts))}",
            contradiction_hint(_input_text(model, c.proof_envs.get(c.contradicts))
                               or f"a pooled size like {'x'.join(map(str, c.contradicts))} for '{c.pooled}'"))
    _rests(findings, resting, candidates)
    for c in candidates:
        if c.why:
            frozen = any(not isinstance(d, int) for d in c.x_shape)
            right_at = (f"only at sizes that take the traced branches (right at {'x'.join(map(str, c.proofs[0]))})"
                        if c.proofs else "only at the size the model was exported at (none found)")
            findings.suspects.append(Suspect(c.result, c.evidence, c.why, frozen, right_at if frozen else ""))
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
        findings.specs.append(PoolSpec(pn, c.x_shape, output_shape(pn, c.x_shape), c.elem, opset, target))
        findings.regions.append(Region(c.result, c.pooled, outs, reads, c.evidence, c.output_size,
                                       tuple(c.proven_at), len(c.region)))
    return findings


def _input_text(model, env) -> str | None:
    """The graph inputs' shapes at a binding of their symbols (``x:1,3,12,14``), as the hint names them."""
    if not env:
        return None
    parts = []
    for name, dims in declared_dims(model).items():
        if name in {i.name for i in model.graph.input} and any(isinstance(d, str) for d in dims):
            got = [evaluate(d, env) for d in dims]
            if any(v is None for v in got):
                return None
            parts.append(f"{name}:{','.join(map(str, got))}")
    return "sizes such as " + " ".join(parts) if parts else None


def _rests(findings: FrontEndResult, resting: list, candidates: list[Candidate]) -> None:
    """A note per frozen AveragePool whose output size rests on the given traced size alone: none of the
    decomposed regions of the same pooled tensor proved at that size (which would confirm it)."""
    confirmed = {c.pooled for c in candidates if c.bound_why == "" and not c.why}
    for result, pooled, output_size, ones in resting:
        if pooled not in confirmed:
            findings.notes.append(WarningNote(
                f"the output size of the frozen AveragePool '{result}' ({size_text(output_size)}) rests on the given "
                "traced size alone: the graph cannot tell whether the file was exported at it"
                + (", nor whether its kernel-1 axis is torch's None (then it follows the input)" if ones else "")))


def _frozen_pool_ops(model, g: DataflowGraph, info, input_shapes, findings: FrontEndResult, *, opset, target, busy,
                     resting: list, siblings: set[str]) -> None:
    """AveragePool nodes the exporter wrote for an adaptive pool whose windows were uniform at the traced size
    (6 -> 6 in an AlexNet traced at 224 is an AveragePool k1 s1): under symbolic sizes they are frozen there.
    Only the metadata says such a node is adaptive pooling. The output size is read from the source line
    where it is written out (``F.adaptive_avg_pool2d(x, (4, 7))``; ``None``: the axis follows the input),
    else at the traced size (``input_shapes``: m = n / kernel there; the node's windows must be exactly the
    adaptive ones); a size the line computes from the input's shape is no fixed size. Otherwise reported.
    ``resting``: (result, pooled tensor, output size, a kernel of 1?) of each whose size rests on the binding."""
    bound_info = None
    for index, node in enumerate(g.nodes):
        if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if node.doc_string.startswith(EMITTED_BY) or node.output[0] in busy:
            continue
        ev = node_evidence(node)
        if ev is None and node.input[0] in siblings and _kernel_is_stride(node) and not _has_metadata(node):
            ev = (SIBLING, None)  # (with its metadata, a node that does not name adaptive pooling is no level)
        if ev is None:
            _warn_if_stripped(node, info, findings)
            continue
        elem, dims = info.get(node.input[0], (0, None))
        if dims is None or len(dims) < 3 or elem not in SUPPORTED_DTYPES:
            continue
        k = len(dims) - 2
        if all(isinstance(d, int) for d in dims[2:]):
            continue  # static: the exporter's node is right (--optimize-exporter-pools plans it)
        result = node.output[0]

        def left(why: str, right_at: str = "only at the size the model was exported at") -> None:
            findings.suspects.append(Suspect(result, ev[0], why, True, right_at))

        # a 1D adaptive pool frozen at uniform windows is written as a 2D AveragePool of the input Unsqueezed to
        # (N, C, 1, L), kernel (1, k): the same as a 2D adaptive pool of that tensor to (1, m)
        lifted = k == 2 and dims[2] == 1 and _unit_axis(node, 0) and ev[1] in (None, 1)
        if ev[1] is not None and ev[1] != k and not lifted:
            left(f"an AveragePool of {k} pooled axes frozen at the traced size for a {ev[1]}D adaptive pool: a form "
                 "onnxpoolfix does not read")
            continue

        if scales_with_input(node):  # binding the traced size would fix an output size torch does not have
            left("an AveragePool frozen at the traced size of an F.interpolate by scale_factor: its output size "
                 "follows the input size, which no adaptive pool of one output size computes",
                 "where its kernel divides the pooled size")
            continue
        literal = literal_output_size(node, k)
        if lifted and (ev[1] == 1 or (literal is not None and literal[0] not in (1, None))):
            one = literal_output_size(node, 1)  # F.adaptive_avg_pool1d(x, 7): 7 is the size of L, not of both axes
            literal = None if one is None else (1, *one)
        if literal is not None and COMPUTED in literal:
            left("an AveragePool frozen at the traced size whose source line computes its output size from the "
                 "input's shape: no fixed output size to bind, and none is bound")
            continue
        bx = None
        if input_shapes:
            if bound_info is None:
                bound = light_copy(model)
                apply_input_shapes(bound, input_shapes)
                bound_info = infer(bound)
            _, bx = bound_info.get(node.input[0], (0, None))
            if bx is None or not all(isinstance(d, int) for d in bx):
                left("its input size at the bound input shapes is unknown")
                continue
            bx = tuple(bx)
        if literal is None and bx is None:
            left("an AveragePool frozen at the traced size under symbolic sizes; its adaptive output size is known "
                 "only at that size")
            continue
        sizes = _frozen_sizes(node, k, literal, bx)
        if isinstance(sizes, str):
            if bx is not None and literal is not None:  # the line's own size disagrees with the binding
                raise ShapeError(f"the given traced size contradicts the graph: {sizes}", contradiction_hint(None))
            left(sizes)
            continue
        output_size = tuple(InputDim(2 + a) if m is None else m for a, m in enumerate(sizes))
        out_shape = tuple(dims[:2]) + tuple(dims[2 + a] if m is None else m for a, m in enumerate(sizes))
        pn = PoolNode(index=index, name=node.name or f"AveragePool_{index}", op=f"adaptive_avg_pool{k}d", kind="avg",
                      rank=k, encoding=ENCODING, input=node.input[0], output=result, indices_output=None,
                      unused_outputs=tuple(o for o in node.output[1:] if o), output_size=output_size, size_input=None,
                      evidence=ev[0])
        findings.specs.append(PoolSpec(pn, tuple(dims), out_shape, elem, opset, target))
        findings.regions.append(Region(result, node.input[0], frozenset(o for o in node.output if o),
                                       frozenset(x for x in node.input if x), ev[0], output_size,
                                       bx or (), 1))
        if literal is None:
            kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
            resting.append((result, node.input[0], output_size, 1 in kernel[1 if lifted else 0:]))
        busy.add(result)


def _unit_axis(node: onnx.NodeProto, a: int) -> bool:
    """Whether the pooling node's windows on pooled axis ``a`` are single elements (kernel 1, stride 1, no pads)."""
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    kernel, strides = list(attrs.get("kernel_shape", [])), list(attrs.get("strides", []))
    pads = list(attrs.get("pads", []))
    return (a < len(kernel) and kernel[a] == 1 and (not strides or strides[a] == 1)
            and not any(pads[i] for i in (a, a + len(kernel)) if i < len(pads)))


#: the evidence of a frozen AveragePool without metadata that pools what a decomposed adaptive pool pools
SIBLING = "structure: pools the tensor a decomposed adaptive pool pools (a pyramid's level)"


def _warn_if_stripped(node, info, findings: FrontEndResult) -> None:
    """A dynamo-written AveragePool (kernel = stride) under symbolic sizes whose metadata is gone: the graph
    of ``F.interpolate(x, scale_factor=0.5, mode="area")`` (or an adaptive pool) traced at a size the kernel
    divides is this one node, the same as ``nn.AvgPool2d(2)``'s. Left as written, but not silently."""
    if _has_metadata(node) or not node.name.startswith("node_") or not _kernel_is_stride(node):
        return
    kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
    _, dims = info.get(node.input[0], (0, None))
    if not kernel or all(k == 1 for k in kernel) or dims is None or all(isinstance(d, int) for d in dims[2:]):
        return
    findings.notes.append(WarningNote(
        f"the AveragePool '{node.output[0]}' (kernel = stride = {'x'.join(map(str, kernel))}) under symbolic sizes "
        "has no exporter metadata: if it stands for adaptive pooling or F.interpolate(mode=\"area\") it is "
        "right only where its kernel divides the size (it cannot be told from nn.AvgPool2d without the "
        "metadata), and it is left as written; patch the file before its metadata is stripped, or export "
        "with onnxpoolfix.export"))


def _has_metadata(node) -> bool:
    return any(p.key.startswith("pkg.torch.onnx.") for p in node.metadata_props)


def _kernel_is_stride(node) -> bool:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return (list(attrs.get("kernel_shape", [])) == list(attrs.get("strides", [])) and not any(attrs.get("pads", []))
            and not attrs.get("ceil_mode", 0))


def _frozen_sizes(node, k: int, literal, bx) -> tuple[int | None, ...] | str:
    """Per pooled axis the adaptive output size (None: follows the input) of a frozen AveragePool, from its
    source line's size and/or the bound pooled size ``bx``; else why not."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    kernel, strides = list(attrs.get("kernel_shape", [])), list(attrs.get("strides", [1] * k))
    if len(kernel) != k or len(strides) != k:
        return "its kernel is not of the pooled rank"
    traced = []  # the pooled size it stands for an adaptive pool at
    for a in range(k):
        lit = literal[a] if literal is not None else -1
        if lit is None:  # follows the input: its windows must be of one element
            if (kernel[a], strides[a]) != (1, 1):
                return f"its source line's None on pooled axis {a} does not match its kernel {kernel[a]}"
            traced.append(bx[2 + a] if bx is not None else 1)
        elif bx is not None:
            traced.append(bx[2 + a])
        else:
            traced.append(lit * strides[a] + kernel[a] - strides[a])
    sizes = adaptive_sizes(node, tuple(traced))
    if sizes is None:
        return f"at the bound size its windows ({'x'.join(map(str, bx or traced))}) are not adaptive pooling windows"
    if literal is not None:
        for a in range(k):
            if literal[a] is not None and literal[a] != sizes[a]:
                return (f"the AveragePool '{node.output[0]}' pools {'x'.join(map(str, traced))} to "
                        f"{'x'.join(map(str, sizes))} there, but its source line says {literal}")
    return tuple(None if literal is not None and literal[a] is None else sizes[a] for a in range(k))


def size_text(sizes) -> str:
    """An output size as the notes write it (an axis that follows the input: ``=``)."""
    return "x".join("=" if isinstance(m, InputDim) or m is None else str(m) for m in sizes)


def contradiction_hint(pointed: str | None) -> str:
    """What to do when the graph contradicts a bound or traced size (``pointed``: a size it is right at)."""
    return ((f"the graph is right at {pointed} (the traced size's branches), not at the given one; " if pointed
             else "")
            + "give the size the model was exported at (the export call's example input) with --traced-shape "
            "NAME:D0,D1,..., or export through onnxpoolfix.export")

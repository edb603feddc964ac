"""Adaptive pooling that the dynamo exporter decomposed: find each region, prove it, hand it to the planner.

``torch.onnx.export(..., dynamo=True)`` does not keep ``adaptive_avg_pool{1,2,3}d`` (nor
``F.interpolate(mode="area")``, which is the same op): it writes torch's decomposition, e.g. for 8x9 -> 5x7
Transpose + GatherND + Transpose + Where + Where + a chain of Gather/Add + Div (../shared/DESIGN.md, "What the
dynamo exporter writes"). With symbolic H/W the window arithmetic reads the input's sizes, but the unroll
(how many window elements are summed) is frozen at the traced size: the export is wrong, or crashes, at
most other sizes. This front end finds those regions and returns them as :class:`PoolSpec` records for the
planner, so they get the same exact lowerings as a leftover node (``dynamic`` where the size is symbolic,
which makes the export exact at every size).

How a region is found (metadata only names the evidence; the numbers decide):

1. Tensors are *size-only* when they are computed from constants, initializers and ``Shape`` of anything
   (the window tables, the symbolic sizes computed at the top of the graph); every other tensor is *data*.
2. A region ends at a Div (a data numerator over a size-only denominator: the window sums over the window
   lengths) or a ReduceMean of data (the exporter's form for equal windows). From that result the region
   is cut by dataflow back to the pooled tensor: the nodes on the data paths from a tensor ``x`` to the
   result, through the ops a decomposition uses, such that every data input of the region is ``x`` or made
   inside it (``x`` dominates the result). The earliest such ``x`` that proves out is the pooled tensor.
3. The output size is the result's inferred shape (static); the pooled rank comes from the metadata
   (``AdaptiveAvgPool2d``, ``adaptive_avg_pool1d(``...) or, without it, from the axes whose length changes.
4. Proof: the region alone (its size-only inputs included; tensors it reads only the shape of are fed as
   zeros) runs in onnxruntime on random and ramp inputs and must equal :mod:`onnxpoolfix.reference` at a
   size where the export is right: the declared size when static; with symbolic sizes the size the caller
   bound (``input_shapes``), else a search over sizes (the traced size is not recorded in the file).
   A region that does not prove out is reported as suspected and left as it is.

Nodes of a replaced region that something else still reads (the pyramid's shared Transpose, the size
tensors at the top of the graph) stay; :func:`drop_dead_region_nodes` removes the rest after the rewrite.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import reference
from .emit import EMITTED_BY
from .errors import PoolFixError
from .find import PoolNode, subgraphs
from .shapes import (
    SUPPORTED_DTYPES,
    Dim,
    PoolSpec,
    apply_input_shapes,
    infer,
    light_copy,
    make_value_info,
)

logger = logging.getLogger(__name__)

ENCODING = "dynamo"  # the encoding reported for these regions

#: ops a decomposition's data path goes through (torch 2.13 + onnxscript 0.7 wrote these; the proof is
#: what makes a region safe, this list only bounds the search)
_DATA_OPS = frozenset({
    "Transpose", "GatherND", "Gather", "GatherElements", "Where", "Add", "Sum", "Sub", "Mul", "Div",
    "ReduceMean", "ReduceSum", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Cast",
    "Identity", "Flatten", "Split",
})
#: ops that select window elements: a region without one is no decomposition
_SELECT_OPS = frozenset({"GatherND", "Gather", "GatherElements", "Slice"})
_SHAPE_OPS = frozenset({"Shape", "Size"})
_NONDETERMINISTIC = ("Random", "Bernoulli", "Multinomial")
#: largest region (nodes) considered: a 13 -> 6 AlexNet pool is ~200 nodes; a corrupt graph is bounded
_MAX_REGION = 20000
#: input sizes tried (beyond the bound one) to find where a symbolic export is right: common sizes first
_COMMON_SIZES = (224, 256, 512, 384, 320, 299, 128, 64, 32, 16)
_SEARCH_MAX = 256
_SEARCH_BUDGET = 600  # proof runs at most, over all regions of a model
#: the proof runs the reference in float64 on three inputs: a pooled tensor beyond this many elements is left
_PROOF_MAX_ELEMENTS = 1 << 25
_SEARCH_SECONDS = 20.0  # and at most this long (each size tried costs a shape inference of the whole model)

_CLASS_RE = re.compile(r"torch\.nn\.modules\.pooling\.Adaptive(Avg|Max)Pool([123])d")
_CALL_RE = re.compile(r"adaptive_(avg|max)_pool([123])d\s*\(")
_AREA_RE = re.compile(r"interpolate\s*\(.*['\"]area['\"]")


@dataclass(frozen=True)
class Region:
    """One decomposition recognised and proven: replacing ``result`` by pooling ``pooled`` is exact."""

    result: str
    pooled: str
    end: int  # index in graph.node of the node that writes ``result``
    outputs: frozenset[str]  # the output names of every node of the region (size-only ancestors included)
    reads: frozenset[str]  # the tensors those nodes read (initializers among them go once nothing reads them)
    evidence: str  # "metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d", "stack trace: ...", "structure"
    rank: int
    output_size: tuple[int, ...]
    proven_at: tuple[int, ...]  # the pooled tensor's shape where the region equalled the reference
    nodes: int  # data nodes of the region (what the report counts as replaced)


@dataclass(frozen=True)
class Suspect:
    """A region that looked like adaptive pooling and was left as it is."""

    result: str
    evidence: str
    why: str
    frozen: bool = False  # a decomposition under symbolic sizes (its unroll frozen at the traced size)


@dataclass
class Findings:
    specs: list[PoolSpec] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)

    def notes(self) -> list[str]:
        out = [f"dynamo region '{r.result}' ({r.nodes} nodes, pooling '{r.pooled}' to "
               f"{'x'.join(map(str, r.output_size))}): {r.evidence}; proven at {'x'.join(map(str, r.proven_at))}"
               for r in self.regions]
        out += [f"left the suspected region '{s.result}' ({s.evidence}): {s.why}" for s in self.suspects]
        frozen = sum(s.frozen for s in self.suspects)
        if frozen and self.regions:
            out.append(f"{frozen} region(s) under symbolic sizes stay frozen at the export's traced size (wrong or "
                       "crashing at other sizes); bind that size with --input-shape NAME:D0,D1,... to replace them too")
        return out

    def frozen_note(self) -> str | None:
        """The message for a model where nothing was replaced but a frozen decomposition is there."""
        frozen = [s for s in self.suspects if s.frozen]
        if self.regions or not frozen:
            return None
        return (f"nothing replaced, but {len(frozen)} adaptive pooling region(s) under symbolic sizes are frozen at "
                "the export's traced size (wrong or crashing at other sizes); bind that size with --input-shape "
                "NAME:D0,D1,... so onnxpoolfix can prove and replace them")


# --- metadata --------------------------------------------------------------------------------------------

def _metadata(node: onnx.NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in getattr(node, "metadata_props", ())}


def _evidence(node: onnx.NodeProto) -> tuple[str, int | None] | None:
    """What the node's metadata says about adaptive pooling: (evidence text, pooled rank or None)."""
    md = _metadata(node)
    hierarchy = md.get("pkg.torch.onnx.class_hierarchy", "")
    m = _CLASS_RE.search(hierarchy)
    if m:
        return f"metadata: {m.group(0)}", int(m.group(2))
    trace = md.get("pkg.torch.onnx.stack_trace", "").strip().splitlines()
    line = trace[-1].strip() if trace else ""
    m = _CALL_RE.search(line)
    if m:
        return f"stack trace: {line[:100]}", int(m.group(2))
    if _AREA_RE.search(line):
        return f"stack trace: {line[:100]}", None
    return None


def _region_evidence(nodes: Sequence[onnx.NodeProto]) -> tuple[str, int | None]:
    """The evidence most of the region's data nodes agree on, or "structure"."""
    votes: dict[tuple[str, int | None], int] = {}
    for n in nodes:
        e = _evidence(n)
        if e is not None:
            votes[e] = votes.get(e, 0) + 1
    if not votes:
        return "structure", None
    best = max(votes.items(), key=lambda kv: kv[1])
    return best[0]


# --- the graph's dataflow --------------------------------------------------------------------------------

class _Graph:
    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = {i.name for i in graph.input} - set(self.initializers)
        self.size_only: set[str] = set(self.initializers)
        for n in self.nodes:  # graph.node is topologically sorted
            if n.domain not in ("", "ai.onnx") or n.op_type.startswith(_NONDETERMINISTIC) or subgraphs(n):
                continue
            if n.op_type in _SHAPE_OPS or all(not i or i in self.size_only for i in _value_inputs(n)):
                self.size_only.update(o for o in n.output if o)

    def data_inputs(self, i: int) -> list[str]:
        n = self.nodes[i]
        if n.op_type in _SHAPE_OPS:
            return []
        if n.op_type == "CastLike":  # its second input gives the type only
            return [x for x in n.input[:1] if x and x not in self.size_only]
        return [x for x in n.input if x and x not in self.size_only]

    def size_ancestors(self, indices: Sequence[int]) -> tuple[set[int], set[str]]:
        """The size-only nodes the given nodes read (transitively), and the tensors read only for their shape."""
        seen: set[int] = set()
        shape_sources: set[str] = set()
        stack = [x for i in indices for x in self.nodes[i].input if x and x in self.size_only]
        while stack:
            t = stack.pop()
            p = self.producer.get(t)
            if p is None or p in seen:
                continue
            seen.add(p)
            n = self.nodes[p]
            if n.op_type in _SHAPE_OPS and n.input[0] not in self.size_only:
                shape_sources.add(n.input[0])  # only its shape is read: fed as zeros of that shape
                continue
            if n.op_type == "CastLike" and len(n.input) > 1 and n.input[1] not in self.size_only:
                shape_sources.add(n.input[1])  # only its type is read
                stack.append(n.input[0])
                continue
            stack.extend(x for x in n.input if x)
        return seen, shape_sources


def _value_inputs(n: onnx.NodeProto) -> list[str]:
    """The inputs whose values a node reads (CastLike reads only the type of its second)."""
    return list(n.input[:1]) if n.op_type == "CastLike" else list(n.input)


def _region_from(g: _Graph, end: int, pooled: str, closure: set[int]) -> list[int] | None:
    """The data nodes between ``pooled`` and the end node, or None if some data enters elsewhere."""
    seen = {end}
    stack = [end]
    while stack:
        i = stack.pop()
        for t in g.data_inputs(i):
            if t == pooled:
                continue
            p = g.producer.get(t)
            if p is None or p not in closure:
                return None
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return sorted(seen)


def _closure(g: _Graph, end: int) -> set[int]:
    seen = {end}
    stack = [end]
    while stack and len(seen) < _MAX_REGION:
        i = stack.pop()
        for t in g.data_inputs(i):
            p = g.producer.get(t)
            if p is not None and p not in seen and g.nodes[p].op_type in _DATA_OPS \
                    and g.nodes[p].domain in ("", "ai.onnx") and not g.nodes[p].doc_string.startswith(EMITTED_BY):
                seen.add(p)
                stack.append(p)
    return seen


def _is_end(g: _Graph, i: int) -> bool:
    n = g.nodes[i]
    if n.domain not in ("", "ai.onnx") or n.doc_string.startswith(EMITTED_BY) or not n.input:
        return False
    if n.op_type == "Div":
        return len(n.input) == 2 and n.input[0] not in g.size_only and n.input[1] in g.size_only
    return n.op_type == "ReduceMean" and n.input[0] not in g.size_only


# --- proof -----------------------------------------------------------------------------------------------

def _isolated(model: onnx.ModelProto, g: _Graph, region: list[int], pooled: str, result: str,
              elem: int, dtypes: Mapping[str, int]) -> tuple[onnx.ModelProto, list[str]]:
    """The region alone as a model: inputs the pooled tensor and the tensors it reads only the shape of."""
    size_nodes, shape_sources = g.size_ancestors(region)
    order = sorted(set(region) | size_nodes)
    nodes = []
    for i in order:
        c = onnx.NodeProto()
        c.CopyFrom(g.nodes[i])
        nodes.append(c)
    used = {x for i in order for x in g.nodes[i].input if x}
    inits = [g.initializers[t] for t in sorted(used) if t in g.initializers]
    made = {o for i in order for o in g.nodes[i].output if o}
    sources = sorted(s for s in shape_sources if s != pooled and s not in made)
    inputs = [make_value_info(pooled, elem, None)] + [make_value_info(s, dtypes.get(s, TensorProto.FLOAT), None) for s in sources]
    graph = helper.make_graph(nodes, "region", inputs, [make_value_info(result, elem, None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return m, sources


def _feeds(shape: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    ramp = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return [rng.standard_normal(shape), ramp / max(1.0, ramp.size), rng.uniform(-100, 100, shape)]


def _prove(session, sources: Sequence[str], source_dtypes: Mapping[str, int], shapes: Mapping[str, tuple],
           pooled: str, x_shape: tuple[int, ...], out_size: tuple[int, ...], np_dtype, rng) -> str | None:
    """None when the region equals the reference at this size, else why not."""
    from .verify import _EPS

    if int(np.prod(x_shape)) > _PROOF_MAX_ELEMENTS:
        return f"its input {'x'.join(map(str, x_shape))} is too large to prove ({_PROOF_MAX_ELEMENTS} elements at most)"
    extra = {}
    for s in sources:
        if s not in shapes:
            return f"the shape of '{s}' it reads is unknown"
        np_t = onnx.helper.tensor_dtype_to_np_dtype(source_dtypes.get(s, TensorProto.FLOAT))
        extra[s] = np.zeros(shapes[s], dtype=np_t)
    eps = _EPS[TensorProto.DOUBLE if np_dtype == np.float64 else TensorProto.FLOAT]
    for x in _feeds(x_shape, rng):
        x = x.astype(np_dtype)
        try:
            (y,) = session.run(None, {pooled: x, **extra})
        except Exception as e:  # noqa: BLE001 - the exporter's own graph crashing at this size is an answer
            return f"onnxruntime fails on it at {'x'.join(map(str, x_shape))} ({' '.join(str(e).split())[:80]})"
        ref = reference.adaptive_avg_pool(x.astype(np.float64), out_size)
        if y.shape != ref.shape:
            return f"it gives {'x'.join(map(str, y.shape))}, not {'x'.join(map(str, ref.shape))}"
        # a correct average of L terms rounds like sqrt(L) eps of the window's mean |x| (verify._tolerance)
        longest = int(np.prod([-(-n // m) + 1 for n, m in zip(x_shape[len(x_shape) - len(out_size):], out_size)]))
        mean_abs = reference.adaptive_avg_pool(np.abs(x.astype(np.float64)), out_size)
        tol = 8 * eps * (np.sqrt(longest) * mean_abs + np.abs(ref)) + 1e-30
        if not np.all(np.abs(y.astype(np.float64) - ref) <= tol):
            return f"it differs from adaptive average pooling at {'x'.join(map(str, x_shape))} " \
                   f"(max error {float(np.max(np.abs(y - ref))):.3g})"
    return None


# --- the front end ---------------------------------------------------------------------------------------

@dataclass
class _Candidate:
    end: int
    result: str
    pooled: str
    region: list[int]
    evidence: str
    rank: int
    output_size: tuple[int, ...]
    x_shape: tuple[Dim, ...]
    y_shape: tuple[Dim, ...]
    elem: int
    session: object = None
    sources: list[str] = field(default_factory=list)
    why: str = ""
    proven_at: tuple[int, ...] | None = None
    tried: set = field(default_factory=set)
    proofs: list = field(default_factory=list)  # sizes of the pooled tensor where it equalled the reference


def find_decomposed_pools(model: onnx.ModelProto, *, opset: int, target: str,
                          input_shapes: Mapping[str, Sequence[int]] | None = None,
                          taken: Sequence[PoolSpec] = (), seed: int = 0) -> Findings:
    """Every proven adaptive average pooling decomposition of ``model``'s top-level graph (module doc).

    ``taken``: specs already found (aten leftovers); regions writing their results are skipped.
    ``input_shapes``: the traced input size, where the caller knows it (the proof of symbolic regions).

    A graph this front end cannot follow (an exception inside it) costs only its own findings: the model is
    patched as if it held no decomposition, and a note says why.
    """
    try:
        return _find(model, opset=opset, target=target, input_shapes=input_shapes, taken=taken, seed=seed)
    except PoolFixError:
        raise
    except Exception as e:  # a bug here must not block the leftovers' patch
        logger.debug("dynamo front end failed", exc_info=True)
        findings = Findings()
        findings.suspects.append(Suspect("(graph)", "dynamo front end",
                                         f"not searched: {type(e).__name__}: {' '.join(str(e).split())[:120]}"))
        return findings


def _find(model, *, opset, target, input_shapes, taken, seed) -> Findings:
    findings = Findings()
    graph = model.graph
    if not any(n.op_type in _SELECT_OPS or n.op_type == "AveragePool" for n in graph.node
               if not n.doc_string.startswith(EMITTED_BY)):
        return findings
    g = _Graph(graph)
    info = _LazyInfo(model)  # shape inference only once some region is in sight (it is the costly part)
    busy = {s.node.output for s in taken}  # results already planned (aten leftovers)
    _frozen_pool_ops(model, g, info, input_shapes, findings, opset=opset, target=target, busy=busy)
    claimed: set[int] = set()
    candidates: list[_Candidate] = []
    for end in reversed(range(len(g.nodes))):
        if end in claimed or not _is_end(g, end):
            continue
        c = _candidate(g, end, info, findings)
        if c is None:
            continue
        if c.result in busy:
            continue
        claimed.update(c.region)
        candidates.append(c)
    candidates.reverse()
    if not candidates:
        return findings
    _prove_all(model, g, candidates, input_shapes, seed)
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
                      indices_output=None, unused_outputs=(), output_size=c.output_size, size_input=None)
        findings.specs.append(PoolSpec(pn, c.x_shape, c.y_shape, c.elem, opset, target))
        findings.regions.append(Region(c.result, c.pooled, c.end, outs, reads, c.evidence, k, c.output_size,
                                       tuple(c.proven_at), len(c.region)))
    return findings


def _frozen_pool_ops(model, g: _Graph, info, input_shapes, findings: Findings, *, opset, target, busy) -> None:
    """AveragePool nodes the exporter wrote for an adaptive pool whose windows were uniform at the traced size
    (6 -> 6 in an AlexNet traced at 224 is an AveragePool k1 s1): under symbolic sizes they are frozen there.
    Only the metadata says such a node is adaptive pooling, and only the traced size gives its output size:
    it is replaced when the caller bound the inputs (``input_shapes``) and the node's windows at that size are
    exactly the adaptive ones; otherwise it is reported."""
    from .exporter_pools import _adaptive_sizes

    bound_info = None
    for index, node in enumerate(g.nodes):
        if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if node.doc_string.startswith(EMITTED_BY) or node.output[0] in busy:
            continue
        ev = _evidence(node)
        if ev is None:
            continue
        elem, dims = info.get(node.input[0], (0, None))
        if dims is None or len(dims) < 3 or elem not in SUPPORTED_DTYPES:
            continue
        k = len(dims) - 2
        if ev[1] is not None and ev[1] != k or all(isinstance(d, int) for d in dims[2:]):
            continue  # static: the exporter's node is right (--optimize-exporter-pools plans it)
        result = node.output[0]
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
            findings.suspects.append(Suspect(result, ev[0], "its input size at the bound input shapes is unknown", True))
            continue
        sizes = _adaptive_sizes(node, tuple(bx[2:]))
        if sizes is None:
            findings.suspects.append(Suspect(result, ev[0], f"at the bound size its windows ({'x'.join(map(str, bx))}) "
                                             "are not adaptive pooling windows", True))
            continue
        pn = PoolNode(index=index, name=node.name or f"AveragePool_{index}", op=f"adaptive_avg_pool{k}d", kind="avg",
                      rank=k, encoding=ENCODING, input=node.input[0], output=result, indices_output=None,
                      unused_outputs=tuple(o for o in node.output[1:] if o), output_size=sizes, size_input=None)
        findings.specs.append(PoolSpec(pn, tuple(dims), tuple(dims[:2]) + sizes, elem, opset, target))
        findings.regions.append(Region(result, node.input[0], index, frozenset(o for o in node.output if o),
                                       frozenset(x for x in node.input if x), ev[0],
                                       k, sizes, tuple(bx), 1))
        busy.add(result)


class _LazyInfo:
    """Inferred (dtype, shape) per tensor, computed on first use. Where inference only invents a symbol for a
    dim (``unk__3``: an unoptimized export it cannot follow) the exporter's declared int stands in; the proof
    checks the result's shape, so a stale declaration cannot slip through."""

    def __init__(self, model: onnx.ModelProto):
        self.model, self.info = model, None
        self.declared = {}
        for vi in list(model.graph.value_info) + list(model.graph.output):
            dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
            self.declared[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]

    def get(self, name: str, default=None):
        if self.info is None:
            self.info = infer(self.model)
        got = self.info.get(name, default)
        declared = self.declared.get(name)
        if got and got[1] is not None and declared and len(declared) == len(got[1]):
            dims = tuple(dd if isinstance(d, str) and d.startswith("unk__") and dd else d
                         for d, dd in zip(got[1], declared))
            got = (got[0], dims)
        return got


def _candidate(g: _Graph, end: int, info, findings: Findings) -> _Candidate | None:
    closure = _closure(g, end)
    result = g.nodes[end].output[0]
    # the data tensors entering the closure, earliest first: the largest region that fits wins
    entering = []
    for i in sorted(closure):
        for t in g.data_inputs(i):
            if t not in entering:
                entering.append(t)
    entering.sort(key=lambda t: g.producer.get(t, -1))
    why = "no single pooled tensor dominates it"
    first_evidence = None
    for t in entering:
        region = _region_from(g, end, t, closure)
        if region is None or not any(g.nodes[i].op_type in _SELECT_OPS for i in region):
            continue
        evidence, meta_rank = _region_evidence([g.nodes[i] for i in region])
        first_evidence = first_evidence or evidence
        fit = _fit(t, result, evidence, meta_rank, info)
        if isinstance(fit, str):
            why = fit
            continue
        k, x_shape, y_shape, elem = fit
        return _Candidate(end, result, t, region, evidence, k, tuple(y_shape[len(y_shape) - k:]), x_shape,
                          y_shape, elem)
    ev = first_evidence if first_evidence not in (None, "structure") else (_evidence(g.nodes[end]) or ("",))[0]
    # a lone ReduceMean (a global average) is exact as it is; a Div of a model is no concern without evidence
    if ev and not (g.nodes[end].op_type == "ReduceMean" and first_evidence is None):
        findings.suspects.append(Suspect(result, ev, why))
    return None


def _fit(pooled: str, result: str, evidence: str, meta_rank: int | None, info):
    """(rank, input shape, output shape, dtype) of pooling ``pooled`` to ``result``, or why it cannot be."""
    x_elem, x_shape = info.get(pooled, (0, None))
    y_elem, y_shape = info.get(result, (0, None))
    if x_elem not in SUPPORTED_DTYPES or x_elem != y_elem:
        return "its dtype is not a float type the lowerings take"
    if x_elem not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return f"the proof runs float32/float64 only, not {onnx.TensorProto.DataType.Name(x_elem)}"
    if x_shape is None or y_shape is None or len(x_shape) != len(y_shape) or len(x_shape) < 2:
        return "the shapes of its input and result are not known (or their ranks differ)"
    r = len(x_shape)
    if meta_rank is not None:
        k = meta_rank
    elif evidence.startswith("stack trace") and "area" in evidence:
        k = r - 2
    else:
        changed = [a for a in range(r) if x_shape[a] != y_shape[a]]
        k = r - changed[0] if changed else 1
    if not 1 <= k <= 3 or k >= r:
        return f"a {k}D pool of a rank {r} tensor"
    if any(x_shape[a] != y_shape[a] or x_shape[a] is None for a in range(r - k)):
        return "its leading (not pooled) dims change"
    if not all(isinstance(d, int) and d >= 1 for d in y_shape[r - k:]):
        return "its output size is not static"
    if any(isinstance(d, int) and d < 1 for d in x_shape):
        return "its input has an empty axis"
    return k, tuple(x_shape), tuple(y_shape), x_elem


def _prove_all(model, g: _Graph, candidates: list[_Candidate], input_shapes, seed: int) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # the exporter's graph failing at a size is expected
    info0 = infer(model)
    dtypes = {k: v[0] for k, v in info0.items()}
    for c in candidates:
        iso, c.sources = _isolated(model, g, c.region, c.pooled, c.result, c.elem, dtypes)
        try:
            c.session = ort.InferenceSession(iso.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            c.why = f"onnxruntime cannot run it alone ({' '.join(str(e).split())[:100]})"
    pending = [c for c in candidates if not c.why]
    static = [c for c in pending if all(isinstance(d, int) for d in c.x_shape)]
    for c in static:
        shapes = {s: info0.get(s, (0, None))[1] for s in c.sources}
        shapes = {s: tuple(d) for s, d in shapes.items() if d is not None and all(isinstance(v, int) for v in d)}
        why = _prove(c.session, c.sources, dtypes, shapes, c.pooled, c.x_shape, c.output_size,
                     np.float64 if c.elem == TensorProto.DOUBLE else np.float32, rng)
        if why:
            c.why = f"not proven: {why}"
        else:
            c.proven_at = c.x_shape
    symbolic = [c for c in pending if c not in static]
    if not symbolic:
        return
    last: dict[int, str] = {}
    budget = _SEARCH_BUDGET
    deadline = time.monotonic() + _SEARCH_SECONDS
    light = light_copy(model)  # each size is bound on a copy: without the weights' bytes
    for binding in _bindings(model, input_shapes):
        todo = [c for c in symbolic if c.proven_at is None]
        if not todo or budget <= 0 or time.monotonic() > deadline:
            break
        bound = onnx.ModelProto()
        bound.CopyFrom(light)
        try:
            apply_input_shapes(bound, binding)
        except PoolFixError as e:  # a size the model's fixed dims refuse
            logger.debug("not trying %s: %s", binding, e)
            continue
        info = infer(bound)
        for c in todo:
            _, xs = info.get(c.pooled, (0, None))
            if xs is None or not all(isinstance(d, int) and d >= 1 for d in xs):
                continue
            xs = tuple(xs)
            if any(n == m for n, m in zip(xs[-c.rank:], c.output_size)) or xs[-c.rank:] in c.tried:
                continue  # an axis of identity windows proves nothing; each size is tried once
            c.tried.add(xs[-c.rank:])
            budget -= 1
            shapes = {s: tuple(info[s][1]) for s in c.sources if s in info and info[s][1] is not None
                      and all(isinstance(d, int) for d in info[s][1])}
            why = _prove(c.session, c.sources, dtypes, shapes, c.pooled, xs, c.output_size,
                         np.float64 if c.elem == TensorProto.DOUBLE else np.float32, rng)
            if why is None:
                c.proofs.append(xs)
                if len(c.proofs) >= _proofs_needed(c):
                    c.proven_at = c.proofs[0]
            else:
                last[id(c)] = why
    for c in symbolic:
        if c.proven_at is None and c.proofs:
            c.why = (f"under symbolic sizes it equals adaptive average pooling at "
                     f"{'x'.join(map(str, c.proofs[0]))} only, and without metadata one size is not enough")
        elif c.proven_at is None:
            tried = len(c.tried)
            c.why = (f"under symbolic sizes, no input size found where it equals adaptive average pooling "
                     f"({tried} tried; last: {last.get(id(c), 'none run')})")
    for c in candidates:
        c.session = None


def _proofs_needed(c: _Candidate) -> int:
    """Sizes a symbolic region must be right at. Its replacement changes what it computes at every other
    size: with metadata saying adaptive pooling one size proves the windows; from structure alone two
    different sizes are asked for (a fixed-kernel pooling written with gathers can equal adaptive pooling at
    one size, not at two with the same output size)."""
    return 1 if c.evidence != "structure" else 2


def _bindings(model: onnx.ModelProto, input_shapes):
    """Input shapes to try: the caller's binding, then every symbolic dim but the first set to one size."""
    if input_shapes:
        yield dict(input_shapes)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits and i.type.HasField("tensor_type")]
    dims = {}
    for i in inputs:
        d = [x.dim_value if x.HasField("dim_value") else None for x in i.type.tensor_type.shape.dim]
        dims[i.name] = d
    if not any(v is None for d in dims.values() for v in d):
        return
    sizes = list(_COMMON_SIZES) + [s for s in range(2, _SEARCH_MAX + 1) if s not in _COMMON_SIZES]
    for s in sizes:
        yield {name: [v if v is not None else (1 if a == 0 and len(d) > 2 else s) for a, v in enumerate(d)]
               for name, d in dims.items()}


def drop_dead_region_nodes(model: onnx.ModelProto, regions: Sequence[Region]) -> int:
    """After the rewrite: remove the regions' nodes nothing reads any more (and initializers only they read).
    Returns how many nodes went."""
    mine: set[str] = set().union(*(r.outputs for r in regions)) if regions else set()
    if not mine:
        return 0
    graph = model.graph
    outputs = {o.name for o in graph.output}
    from .find import _read_names

    removed = 0
    freed: set[str] = set().union(*(r.reads for r in regions))
    while True:
        read = {i for n in graph.node for i in n.input if i} | outputs
        read |= {i for n in graph.node for sub in subgraphs(n) for i in _read_names(sub)}
        dead = [k for k, n in enumerate(graph.node)
                if not n.doc_string.startswith(EMITTED_BY) and n.output and all(o in mine or not o for o in n.output)
                and not any(o in read for o in n.output if o)]
        if not dead:
            break
        gone = set(dead)
        freed.update(i for k in gone for i in graph.node[k].input if i)
        keep = [n for k, n in enumerate(graph.node) if k not in gone]
        removed += len(dead)
        del graph.node[:]
        graph.node.extend(keep)
    read = {i for n in graph.node for i in n.input if i} | outputs
    read |= {i for n in graph.node for sub in subgraphs(n) for i in _read_names(sub)}
    unused = [t for t in graph.initializer if t.name in freed and t.name not in read]
    if unused:
        names = {t.name for t in unused}
        for fld in (graph.initializer, graph.input):
            keep = [t for t in fld if t.name not in names]
            del fld[:]
            fld.extend(keep)
    stale = ({v.name for v in graph.value_info} & mine) - {o for n in graph.node for o in n.output}
    if stale:
        keep = [v for v in graph.value_info if v.name not in stale]
        del graph.value_info[:]
        graph.value_info.extend(keep)
    return removed

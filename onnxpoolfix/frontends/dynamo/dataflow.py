"""The dynamo front end's graph side: where a decomposed adaptive average pool begins and ends (docs/dynamo-files.md,
"Found by dataflow"; the numeric proof is :mod:`.proof`). Tensors are *size-only* when computed from constants,
initializers and ``Shape`` of anything (the window tables, the symbolic sizes); every other tensor is *data*. A
region ends at a Div of data by a size-only tensor (the window sums over their lengths) or a ReduceMean of data
(equal windows), and is cut back to a tensor ``x`` that dominates it (every data input of the region is ``x`` or
made inside it); the earliest ``x`` that fits is the pooled tensor. The pooled rank comes from the metadata or,
without it, from the axes whose length changes.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import onnx

from ...errors import PoolFixError
from ...graph import attributes, subgraphs
from ...graph.emit import EMITTED_BY
from ...graph.shapes import SUPPORTED_DTYPES, Dim, infer, infer_at
from ...spec import InputDim
from ..base import Suspect, reach
from .computed import COMPUTES_SIZE, HIDDEN_SIZE, computed_axes, region_hides_a_size
from .crops import models_own, past_selects_nothing
from .metadata import module_pool, source_line
from .search import declared_dims, range_limit

ENCODING = "dynamo"  # the encoding reported for these regions
FOLLOWS_INPUT = "its output size is not static"  # (None, m): an output axis that follows the input
POOLS_NO_AXIS = "it pools no axis"
#: why a suspect is right as written at every size (an identity); any other suspect under symbolic sizes is
#: torch's decomposition frozen at the traced size
KEPT_AS_WRITTEN = frozenset({POOLS_NO_AXIS})

#: ops a decomposition's data path goes through (torch 2.13 + onnxscript 0.7 wrote these; the proof is
#: what makes a region safe, this list only bounds the search)
_MAX_SMALLER = 3  # smaller regions of one end tried after the largest (each proof under symbolic sizes is a search)
_DATA_OPS = frozenset({
    "Transpose", "GatherND", "Gather", "GatherElements", "Where", "Add", "Sum", "Sub", "Mul", "Div",
    "ReduceMean", "ReduceSum", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Cast",
    "Identity", "Flatten", "Split",
})
#: ops that select window elements: a region without one is no decomposition
SELECT_OPS = frozenset({"GatherND", "Gather", "GatherElements", "Slice"})
_SHAPE_OPS = frozenset({"Shape", "Size"})
_NONDETERMINISTIC = ("Random", "Bernoulli", "Multinomial")
#: largest region (nodes) considered: a 13 -> 6 AlexNet pool is ~200 nodes; a corrupt graph is bounded
_MAX_REGION = 20000


def node_evidence(node: onnx.NodeProto) -> tuple[str, int | None] | None:
    """What the node's metadata says about adaptive pooling: (evidence text, pooled rank or None): its module is
    an adaptive pool, or its source line (parsed, comments are none) calls one or an area resize."""
    module = module_pool(node)
    if module is not None and module[1]:
        name = f"Adaptive{module[0].title()}Pool{module[2]}d"
        return f"metadata: torch.nn.modules.pooling.{name}", module[2]
    line = source_line(node)
    adaptive = [c for c in (line.calls if line else ()) if c.adaptive]
    if not adaptive:
        return None
    ranks = {c.rank for c in adaptive}
    return f"stack trace: {line.text[:100]}", ranks.pop() if len(ranks) == 1 else None



class DataflowGraph:
    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = {i.name for i in graph.input} - set(self.initializers)
        self.named: set[str] = set()  # names fresh_name gave
        self.size_only: set[str] = set(self.initializers)
        for n in self.nodes:  # graph.node is topologically sorted
            if n.domain not in ("", "ai.onnx") or n.op_type.startswith(_NONDETERMINISTIC) or subgraphs(n):
                continue
            if n.op_type in _SHAPE_OPS or all(not i or i in self.size_only for i in _value_inputs(n)):
                self.size_only.update(o for o in n.output if o)

    def fresh_name(self, base: str) -> str:
        """A tensor name no node, input or initializer has, nor one this gave before."""
        taken = {*self.producer, *self.initializers, *self.inputs, *self.named,
                 *(x for n in self.nodes for x in n.input)}
        name = next(n for i in range(1, len(taken) + 2) if (n := base if i == 1 else f"{base}_{i}") not in taken)
        self.named.add(name)
        return name

    def written_and_read(self, indices) -> tuple[frozenset[str], frozenset[str]]:
        """The tensors the given nodes write, and those they read."""
        return (frozenset(o for i in indices for o in self.nodes[i].output if o),
                frozenset(x for i in indices for x in self.nodes[i].input if x))

    def data_inputs(self, i: int) -> list[str]:
        n = self.nodes[i]
        if n.op_type in _SHAPE_OPS:
            return []
        return [x for x in _value_inputs(n) if x and x not in self.size_only]

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


def _region_from(g: DataflowGraph, end: int, pooled: str, inside: set[int]) -> list[int] | None:
    """The data nodes between ``pooled`` and the end node, or None if some data enters elsewhere (a producer, or
    none, outside ``inside``: it is not followed)."""
    region = reach([end], lambda i: [g.producer.get(t) for t in g.data_inputs(i) if t != pooled] if i in inside else [])
    return sorted(region) if region <= inside else None


def closure(g: DataflowGraph, end: int) -> set[int]:
    return reach([end], lambda i: (p for t in g.data_inputs(i) if (p := g.producer.get(t)) is not None
                                   and g.nodes[p].op_type in _DATA_OPS and g.nodes[p].domain in ("", "ai.onnx")
                                   and not g.nodes[p].doc_string.startswith(EMITTED_BY)), _MAX_REGION)


def is_end(g: DataflowGraph, i: int) -> bool:
    n = g.nodes[i]
    if n.domain not in ("", "ai.onnx") or n.doc_string.startswith(EMITTED_BY) or not n.input:
        return False
    if n.op_type == "Div":
        return len(n.input) == 2 and n.input[0] not in g.size_only and n.input[1] in g.size_only
    # a ReduceMean without axes averages the whole tensor (`emb(ids).mean()`), batch and channels too: never
    # an adaptive pool, whatever source line it shares with one
    return n.op_type == "ReduceMean" and n.input[0] not in g.size_only and (
        any(a.name == "axes" for a in n.attribute) or (len(n.input) > 1 and bool(n.input[1])))


@dataclass(frozen=True)
class Candidate:
    """A region the dataflow found: what it pools, from where to where, and why it was taken for pooling. It
    never changes; what the proof learns about it is its :class:`~.proof.Proof`."""

    end: int
    result: str
    pooled: str
    region: tuple[int, ...]
    evidence: str
    rank: int
    output_size: tuple  # int, or InputDim: the axis follows the input
    x_shape: tuple[Dim, ...]
    elem: int
    # where torch fused the model's permute of the pooled tensor into the decomposition's own Transpose (review40
    # F1): the pool is of Transpose(pooled, perm), and x_shape is that tensor's
    perm: tuple[int, ...] | None = None
    # the smaller regions of the same end (from a tensor further in, largest first): tried when this one
    # does not prove out, as where the pooled tensor is a Slice, Relu or Mul of x that the region took along
    smaller: tuple[Candidate, ...] = ()


class LazyInfo:
    """Inferred (dtype, shape) per tensor, computed on first use. Where inference only invents a symbol for a
    dim (``unk__3``: an unoptimized export it cannot follow) the exporter's declared int stands in; the proof
    checks the result's shape, so a stale declaration cannot slip through."""

    def __init__(self, model: onnx.ModelProto):
        self.model, self.info, self.own, self.bound = model, None, None, None
        declared = declared_dims(model)  # per tensor: the declared ints, and the symbols ("" where none)
        self.declared = {name: [d if isinstance(d, int) else None for d in dims] for name, dims in declared.items()}
        self.params = {name: [d if isinstance(d, str) else "" for d in dims] for name, dims in declared.items()}

    def same_dim(self, x: str, y: str, a: int, x_shape, y_shape, xa: int) -> bool:
        """Whether axis ``a`` of ``y`` is by declaration the same size as axis ``xa`` of ``x`` (``a`` of ``x_shape``:
        one symbol or one expression of the input's symbols, as the exporter writes them)."""
        if isinstance(x_shape[a], str) and x_shape[a] == y_shape[a] and not x_shape[a].startswith("unk__"):
            return True
        px, py = self.params.get(x), self.params.get(y)
        return bool(px and py and len(px) == len(py) > max(a, xa) and px[xa] and px[xa] == py[a])

    def at(self, traced_shapes) -> dict:
        """onnx's answer at the given traced size, inferred once for all who ask (a refused size raises, each time)."""
        if self.bound is None:
            try:
                self.bound = infer_at(self.model, traced_shapes)
            except PoolFixError as e:
                self.bound = e
        if isinstance(self.bound, PoolFixError):
            raise self.bound
        return self.bound

    def inferred(self) -> dict:
        """onnx's own answer (no declared ints standing in), inferred once for all who ask."""
        if self.info is None:
            self.info = infer(self.model)
        return self.info

    def fixed_dims(self, name: str) -> tuple | None:
        """The dims onnx's inference alone gives ``name`` (no declaration standing in: a claim that a dim is
        fixed rests on them), or None."""
        if self.own is None:
            self.own = infer(self.model, declared=False)
        return self.own.get(name, (0, None))[1]

    def get(self, name: str, default=None):
        got = self.inferred().get(name, default)
        declared = self.declared.get(name)
        if got and got[1] is not None and declared and len(declared) == len(got[1]):
            dims = tuple(dd if isinstance(d, str) and d.startswith("unk__") and dd else d
                         for d, dd in zip(got[1], declared))
            got = (got[0], dims)
        return got


def find_candidate(g: DataflowGraph, end: int, info, stripped: bool = False) -> Candidate | Suspect | None:
    """The region that ends at node ``end``; a :class:`Suspect` where the evidence (a ``stripped`` file's window
    selects too: review52 F3) says adaptive pooling but no region fits; None where nothing suggests one."""
    nodes = closure(g, end)
    result = g.nodes[end].output[0]
    # the data tensors entering the closure, earliest first: the largest region that fits wins
    entering = sorted(dict.fromkeys(t for i in sorted(nodes) for t in g.data_inputs(i)),
                      key=lambda t: g.producer.get(t, -1))
    why = None  # the largest region's: a smaller one inside it (from its own Transpose) says less
    first_evidence = None
    fits: list[Candidate] = []
    nothing: set[str] = set()  # the pooled tensors of regions ending here that pick no windows (``pool(x) / 2``)
    past: dict[str, tuple[str, str]] = {}  # a region that reads its tensor by an op of the model's own: that op
    for t in entering:
        region = _region_from(g, end, t, nodes)
        if region is None:
            continue
        if not any(g.nodes[i].op_type in SELECT_OPS for i in region):
            nothing.add(t)
            continue
        if any(i != end and is_end(g, i) for i in region):
            continue  # another pool's end inside: chained pools no one adaptive pool computes, each its own region
        votes = Counter(e for i in region if (e := node_evidence(g.nodes[i])) is not None)  # what most nodes say
        evidence, meta_rank = max(votes, key=votes.get) if votes else ("structure", None)  # (the first of equals)
        first_evidence = first_evidence or evidence
        if own := models_own(g, t, region, info):
            past[t] = own
        # where the region's Transpose is more than the decomposition's own, the pool of the model's permute
        # first, then of ``t`` itself (where it is no permute after all: the proof decides)
        r = len(info.get(t, (0, None))[1] or ())  # an area line names no rank: all axes but N, C (review50)
        area = r > 2 and evidence.startswith("stack trace") and "area" in evidence
        perm = fused_perm(g, region, t, r - 2 if meta_rank is None and area else meta_rank)
        for p in (perm, None) if perm else (None,):
            fit = _fit(t, result, evidence, meta_rank, info, p,
                       None if p else lambda a, r=region: range_limit(g, r, result, a, info),
                       lambda k, made, r=region: computed_axes([g.nodes[i] for i in r], k, made=made),
                       lambda r=region: region_hides_a_size(g.nodes, r))
            if isinstance(fit, str):
                why = why or (None if own or p else fit)  # (own: never taken, the region past the op decides)
                continue
            k, x_shape, elem, sizes = fit
            fits.append(Candidate(end, result, t, tuple(region), evidence, k, sizes, x_shape, elem, p))
    # a region whose pooled tensor an op of the model's own reads is never taken (:mod:`.crops`; x[:, :, :17]
    # traced at 17, review12 F9): the region starting past it is the reading, else the pool is refused
    fits = [c for c in fits if c.pooled not in past]
    if past and not fits:  # (a mean of the crop: every region past the ops selects nothing, as without them)
        if why is None and all(past_selects_nothing({p: o for p, (_, o) in past.items()}, nothing, p) for p in past):
            return None
        p, (op, _) = next(iter(past.items()))
        why = why or f"it reads '{p}' through an op of the model's own ({op}), whose output no region pools"
    if fits:
        return replace(fits[0], smaller=tuple(fits[1:_MAX_SMALLER + 1]))
    if nothing and why is None:  # every region either picks no windows or holds another pool's end:
        return None  # an op on a pool's result or on its input that shares the line (``pool(x) / 2``, ``x / 2``)
    if why == HIDDEN_SIZE:  # structure alone, on a line that hides the call: its pool to 1 may be a computed size
        return Suspect(result, f"stack trace: {getattr(source_line(g.nodes[end]), 'text', '')[:100]}", why)
    ev = first_evidence if first_evidence not in (None, "structure") else (node_evidence(g.nodes[end]) or ("",))[0]
    if ev and not (g.nodes[end].op_type == "ReduceMean" and first_evidence is None):  # a lone ReduceMean: exact
        return Suspect(result, ev, why or "no single pooled tensor dominates it")
    stray = stripped and first_evidence == "structure" and why is not None  # windows selected, no region fits
    return Suspect(result, "structure", f"it selects windows as torch decomposes, but {why}") if stray else None


def fused_perm(g: DataflowGraph, region: Sequence[int], pooled: str, k: int | None) -> tuple[int, ...] | None:
    """The model's permute of ``pooled`` that torch's export fused into the decomposition's Transpose: ``pooled``
    read in the region by one Transpose alone, whose output only GatherNDs read (the decomposition moves the
    ``k`` pooled axes first to index them). Its perm is the permute's followed by that move; None where it is
    no permute (the move alone) or not this form."""
    readers = [i for i in region if pooled in g.nodes[i].input]
    if k is None or len(readers) != 1 or g.nodes[readers[0]].op_type != "Transpose":
        return None
    node = g.nodes[readers[0]]
    after = [g.nodes[i] for i in region if node.output[0] in g.nodes[i].input]
    fused = list(attributes(node).get("perm", ()))
    r = len(fused)
    if not after or any(n.op_type != "GatherND" for n in after) or not 1 <= k < r or sorted(fused) != list(range(r)):
        return None
    move = list(range(r - k, r)) + list(range(r - k))  # the decomposition's: pooled axes first
    perm = [0] * r
    for j, a in enumerate(move):
        perm[a] = fused[j]  # fused = perm[move]
    return None if perm == list(range(r)) else tuple(perm)


def permuted(perm: tuple[int, ...] | None, dims):
    """The pooled tensor's ``dims`` as the pool reads them (:attr:`Candidate.perm`); None where unknown."""
    return dims if perm is None or dims is None else [dims[a] for a in perm] if len(dims) == len(perm) else None


def _fit(pooled: str, result: str, evidence: str, meta_rank: int | None, info, perm, runtime, computes, hidden):
    """(rank, input shape, dtype, output size) of pooling ``pooled`` (its Transpose by ``perm`` where given) to
    ``result``, or why it cannot be. ``computes(k, sizes)``: the pooled axes the source line computes the size of (a
    static size there under a symbolic input axis is torch's at the traced size only, review44 F2)."""
    x_elem, x_shape = info.get(pooled, (0, None))
    x_shape = permuted(perm, x_shape)
    y_elem, y_shape = info.get(result, (0, None))
    if x_elem not in SUPPORTED_DTYPES or x_elem != y_elem:
        return ("its input and result dtypes differ" if x_elem in SUPPORTED_DTYPES
                else "its dtype is not a float type the lowerings take")
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
    sizes = []
    computed = None  # computes(k), read once where a static size meets a symbolic axis
    for a in range(r - k, r):
        if isinstance(y_shape[a], int) and y_shape[a] >= 1:
            if not isinstance(x_shape[a], int) and a - (r - k) in (
                    computed := computes(k, y_shape[r - k:]) if computed is None else computed):
                return COMPUTES_SIZE
            if y_shape[a] == 1 and not isinstance(x_shape[a], int) and hidden():
                return HIDDEN_SIZE  # a helper's pool to 1 under a symbolic axis: maybe a computed size, 1 traced
            sizes.append(y_shape[a])
        elif info.same_dim(pooled, result, a, x_shape, y_shape, perm[a] if perm else a):  # torch's None
            sizes.append(InputDim(a))
        elif runtime is not None and (m := runtime(a)) is not None:  # computed by the graph (scale_factor)
            sizes.append(m)
        else:
            return FOLLOWS_INPUT
    if all(isinstance(m, InputDim) for m in sizes):
        return POOLS_NO_AXIS
    if any(isinstance(d, int) and d < 1 for d in x_shape):
        return "its input has an empty axis"
    return k, tuple(x_shape), x_elem, tuple(sizes)


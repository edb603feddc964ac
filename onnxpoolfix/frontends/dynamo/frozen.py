"""The dynamo exporter's pooling ops frozen at the traced size under symbolic sizes (part of :mod:`.front_end`):
an AveragePool/MaxPool whose kernel and strides were computed from the traced input. Each node's readings
(:mod:`.frozen_readings`: genuine pool, adaptive pool of a written or traced size, area resize by scale_factor,
unknown) are narrowed by the traced size and by what other nodes of the same tensor imply; a node is replaced
only where one adaptive reading of a known output size is left, stays where one genuine reading is left, and is a
suspect with why (refused unless allowed) otherwise."""
from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from itertools import product
from math import prod

import onnx

from ...errors import ShapeError
from ...graph import attributes, read_names
from ...graph.emit import EMITTED_BY
from ...graph.shapes import SUPPORTED_DTYPES
from ...spec import InputDim, PoolNode, PoolSpec
from ..base import EXPORT, STRIPPED, TRACED, FrontEndResult, Region, Suspect
from ..exporter_pools import adaptive_sizes
from . import metadata as source_lines
from .contradiction import contradiction_hint
from .crops import DROPPED_CROP, dropped_crop
from .dataflow import ENCODING, DataflowGraph
from .frozen_indices import IndicesChain, index_chains
from .frozen_readings import (
    ADAPTIVE,
    GENUINE,
    SCALES,
    UNKNOWN,
    Reading,
    at_traced,
    classifier_features,
    implied_traced,
    node_readings,
    window_attrs,
)
from .metadata import COMPUTED, has_metadata, last_line, module_pool, module_scope, source_line, stack_trace, submodules
from .search import declared_dims, evaluate, symbol_binding
from .selections import constant_ints

__all__ = ["frozen_pool_ops", "size_text"]


def frozen_pool_ops(model, g: DataflowGraph, info, traced_shapes, findings: FrontEndResult, *, opset, target,
                     busy, resting: list, dynamo_file: bool = False, ends=()) -> list[ShapeError]:
    """Pooling nodes the dynamo exporter may have frozen at the traced size under symbolic sizes (AlexNet's 6 -> 6
    at 224 is an AveragePool k1 s1), each replaced, left or made a suspect by its readings (module doc): two
    readings that differ at some size are never decided by picking one.
    ``traced_shapes``: the export call's input shapes where given (never a deployment size: the output size it
    gives a module's pool is n / kernel there). ``resting``: (result, pooled tensor, output size, op type) of
    each whose size rests on the traced size alone; ``ends``: the decomposed regions' end nodes. Returns the
    contradictions of the traced size (a node none of whose readings has its windows there, or a Squeeze after it
    contradicts), for the caller to raise; ``dynamo_file`` or ``ends``: whatever its nodes say."""
    sites, contradictions, dynamo_file = [], [], dynamo_file or bool(ends)
    outputs = {o.name for o in model.graph.output}
    read = read_names(model.graph) | outputs
    modules = submodules(g.nodes)
    chains = index_chains(g, outputs)  # torch's indices from ONNX's: the exporter's arithmetic after a MaxPool
    in_chains = {i for c in chains.values() for i in c.nodes}  # its kernel-1 MaxPool is no pool of its own
    # torch merges two calls pooling one tensor with the same traced windows into one node (the first call's
    # metadata); the second's result is an Identity of it without metadata ("<name>_alias_<k>" is no merge)
    merged = {n.input[0] for n in g.nodes if n.op_type == "Identity" and n.input and not has_metadata(n)
              and not any("_alias_" in o for o in n.output)}
    for index, node in enumerate(g.nodes):
        theirs = dynamo_file or has_metadata(node) or node.name.startswith("node_")  # TorchScript freezes no pool
        if index in in_chains or not theirs or (site := _site(index, node, info, busy, modules,
                                                              node.output[0] in merged, g)) is None:
            continue
        if len(node.output) > 1 and node.output[1] in read and {r.what for r in site.readings} != {GENUINE}:
            chain = chains.get(index)
            if chain is None:
                findings.suspects.append(Suspect(
                    node.output[0], site.readings[0].says, f"a {node.op_type} frozen at the traced size whose "
                    "indices are read other than through the exporter's own index arithmetic (a kernel-1 MaxPool, "
                    "Slice and Sub): onnxpoolfix cannot tell which indices of the adaptive pool they stand for",
                    True, "only at the size the model was exported at", EXPORT))
                continue
            site = replace(site, chain=chain)
        if traced_shapes:
            _, bx = info.at(traced_shapes).get(node.input[0], (0, None))
            if bx is None or not all(isinstance(d, int) for d in bx):
                bx = _declared_at(model, node.input[0], traced_shapes)
            if bx is None:
                findings.suspects.append(Suspect(node.output[0], site.readings[0].says,
                                                 "its input size at the given traced size is unknown", True,
                                                 "only at the size the model was exported at", EXPORT))
                continue
            left = at_traced(node, site.readings, tuple(bx[2:]))
            if not left:  # raised after the regions' proofs, which may name a size the graph is right at
                contradictions.append(ShapeError(
                    f"the given traced size contradicts the graph: the {node.op_type} '{node.output[0]}' pools "
                    f"{'x'.join(map(str, bx[2:]))} with windows none of its readings has there: "
                    + "; ".join(map(_reading_text, site.readings)), contradiction_hint(None)))
                continue
            site = replace(site, readings=left, bound=tuple(bx))
        sites.append(site)
    sites = _hidden_calls(g, sites, modules, {*ends, *(g.producer.get(s.result) for s in findings.suspects)})
    _by_implied_sizes(g, sites)
    known = _module_sizes(g, sites)
    for site in sites:
        contradiction = _decide(site, g, findings, opset, target, busy, resting, known)
        if contradiction is not None:
            contradictions.append(contradiction)
    return contradictions


@dataclass(frozen=True)
class _Site:
    index: int
    kind: str
    k: int
    dims: tuple
    elem: int
    lifted: bool
    readings: list
    bound: tuple | None = None  # the pooled tensor's shape at the given traced size
    chain: IndicesChain | None = None  # where the MaxPool's indices are read: the exporter's arithmetic on them


def _site(index: int, node: onnx.NodeProto, info, busy, modules, merged: bool, g: DataflowGraph) -> _Site | None:
    """A pooling node under symbolic pooled sizes whose windows an adaptive pool could have, with its readings.
    ``merged``: an Identity without metadata reads its result (a call torch merged into it, unread in the file)."""
    if node.op_type not in ("AveragePool", "MaxPool") or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    if node.doc_string.startswith(EMITTED_BY) or node.output[0] in busy or (windows := window_attrs(node)) is None:
        return None
    elem, dims = info.get(node.input[0], (0, None))
    if dims is None or len(dims) < 3 or elem not in SUPPORTED_DTYPES:
        return None
    k = len(dims) - 2
    if all(isinstance(d, int) for d in dims[2:]) or len(windows[0]) != k:
        return None  # static: the exporter's node is right (--optimize-exporter-pools plans it)
    kind = "max" if node.op_type == "MaxPool" else "avg"
    # a 1D adaptive pool frozen at uniform windows is written as a 2D pool of the input Unsqueezed to
    # (N, C, 1, L), kernel (1, k): the same as a 2D adaptive pool of that tensor to (1, m) (window_attrs: no
    # pads, strides the kernel)
    lifted = k == 2 and dims[2] == 1 and windows[0][0] == 1
    made = g.producer.get(node.input[0])  # an unbatched tensor the exporter reshaped: the call's rank unknown
    rank = None if made is not None and g.nodes[made].op_type in ("Unsqueeze", "Reshape") else len(dims)
    readings = node_readings(node, kind, k, lifted, modules, rank)
    if merged:
        readings = [*readings, Reading(UNKNOWN, "torch merged another call into it (an Identity without exporter "
                                                "metadata reads its result), whose size the file does not hold")]
    elif [r.what for r in readings] == [GENUINE] and readings[0].says.startswith("metadata"):
        return None  # nn.AvgPool2d / nn.MaxPool2d: what it says
    return _Site(index, kind, k, tuple(dims), elem, lifted, readings)


def _hidden_calls(g: DataflowGraph, sites: list[_Site], modules, pools: set) -> list[_Site]:
    """Where one source line made more frozen pooling nodes than it shows pooling calls, and runs no loop (a
    comprehension would call one several times), a call on it hides a pool (``f * 3`` of a user's class whose
    ``__mul__`` pools, a property): which node is which, the line cannot say, so each gets an unknown reading.
    Its other ``pools`` (decomposed regions, suspects) count (review56: a hidden pool read as a decomposed call)."""
    others = [(stack_trace(g.nodes[i]), module_scope(g.nodes[i])) for i in pools - {s.index for s in sites} - {None}]
    out, lines = list(sites), {}  # type: list[_Site], dict[tuple, list[int]]
    for i, site in enumerate(sites):
        node = g.nodes[site.index]
        if last_line(node) and module_pool(node) is None:  # (a module's pools share torch's own line)
            # one execution of one line: the whole trace and the module (two instances of a block: two scopes)
            lines.setdefault((stack_trace(node), module_scope(node)), []).append(i)
    for key, members in lines.items():
        line, made = source_line(g.nodes[sites[members[0]].index], modules), len(members) + others.count(key)
        # (a global pool, output size 1 on every axis, leaves a ReduceMean, no frozen node: not counted)
        shown = [c for c in (line.calls if line else ()) if not (c.size and all(m == 1 for m in c.size))]
        if line is None or line.loops or (made <= len(shown) and not _branch_continued(line.text)):
            continue
        hidden = Reading(UNKNOWN, f"its source line made {made} pooling nodes and shows "
                                  f"{len(shown)} pooling call(s): a call on it hides a pool: {line.text[:100]}")
        for i in members:
            out[i] = replace(sites[i], readings=[*sites[i].readings, hidden])
    return out


def _branch_continued(text: str) -> bool:
    """A line that goes on past its end (a bracket left open) and calls something in one branch of ``a if c else
    b``: the call that does not run counts as shown, and a comprehension opened on the line (``+ [`` with its body
    on the next line: Python 3.11 records the line it opens on) may hide a pool there (review88 F2)."""
    if (parsed := source_lines.parse_line(text)) is None:
        return False
    tree, end = parsed
    goes_on = any(getattr(n, "end_col_offset", 0) > end for n in ast.walk(tree))
    branches = [n for n in ast.walk(tree) if isinstance(n, ast.IfExp)]
    return goes_on and any(isinstance(c, ast.Call) for n in branches for c in ast.walk(n))


#: combinations of readings tried per pooled tensor (a count, never seconds: the same file, the same verdict)
_MAX_COMBINATIONS = 4096


def _by_implied_sizes(g: DataflowGraph, sites: list[_Site]) -> None:
    """Nodes pooling one tensor saw it at one size at the export. An adaptive reading of written sizes implies
    that size (:func:`implied_traced`); a reading is kept only where some choice of one reading per node of the
    tensor agrees on it. Two adaptive calls on one line, ``F.adaptive_avg_pool2d(f, (2, 2))`` and ``(f, 4)``,
    traced at 16x24 are K = (8, 12) and (4, 6): each fits either call alone, but only one assignment agrees."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(sites):
        if s.bound is None:
            groups.setdefault(g.nodes[s.index].input[0], []).append(i)
    for members in groups.values():
        options = [[(r, implied_traced(g.nodes[sites[i].index], r)) for r in sites[i].readings] for i in members]
        if len(members) < 2 or prod(len(o) for o in options) > _MAX_COMBINATIONS:
            continue
        kept: list[set] = [set() for _ in members]
        for combo in product(*options):
            if _agree([t for _, t in combo if t is not None]):
                for slot, (r, _) in zip(kept, combo):
                    slot.add(r)
        for i, slot in zip(members, kept):
            if slot:
                sites[i] = replace(sites[i], readings=[r for r in sites[i].readings if r in slot])


def _agree(sizes: list[tuple]) -> bool:
    """Whether implied pooled lengths agree on every axis (None: an axis that follows the input, any length)."""
    return len({len(t) for t in sizes}) <= 1 and all(len({n for n in axis if n is not None}) <= 1
                                                     for axis in zip(*sizes))


def _module_sizes(g: DataflowGraph, sites: list[_Site]) -> dict[tuple, dict[int, int]]:
    """Per pooling module (its scope), the output length on each axis where one of its calls, at the given
    traced size, has windows longer than one element there: an int, not torch's None (which pools no axis).
    One module called on two tensors (``self.p(x), self.p(x[:, :, ::2])``) has one output size."""
    out: dict[tuple, dict[int, int]] = {}
    for site in sites:
        node = g.nodes[site.index]
        if site.bound is None or module_pool(node) is None or [r.what for r in site.readings] != [ADAPTIVE]:
            continue
        fixed = adaptive_sizes(node, tuple(site.bound[2:]))
        kernel, _ = window_attrs(node)
        for a, (k, m) in enumerate(zip(kernel, fixed or ())):
            if k > 1:
                out.setdefault(module_scope(node), {})[a] = m
    return out


def _decide(site: _Site, g: DataflowGraph, findings: FrontEndResult, opset, target, busy, resting,
            known: dict[tuple, dict[int, int]]) -> ShapeError | None:
    """Replace the node, leave it, or make it a suspect (module doc); a contradiction of the traced size is
    returned. ``known``: :func:`_module_sizes`."""
    node = g.nodes[site.index]
    result, op = node.output[0], node.op_type
    readings = site.readings
    whats = {r.what for r in readings}
    if whats == {GENUINE}:
        return

    def left(why: str, remedy: str, right_at: str = "only at the size the model was exported at") -> None:
        findings.suspects.append(Suspect(result, readings[0].says, why, True, right_at, remedy))

    if len(readings) > 1 or whats == {UNKNOWN}:
        either = "as written if it is a genuine pool, else only where its windows are the adaptive ones"
        if whats == {UNKNOWN} and not has_metadata(node):
            left(f"an {op} under symbolic sizes without exporter metadata: a genuine pool or an adaptive pool "
                 "frozen at the traced size, which differ at other sizes", STRIPPED, either)
        elif whats == {UNKNOWN}:
            left(f"an {op} under symbolic sizes that may be a genuine pool or an adaptive pool frozen at the traced "
                 f"size: {readings[0].says}", EXPORT, either)
        else:
            left(f"an {op} under symbolic sizes with {len(readings)} readings that differ at other sizes ("
                 + "; ".join(map(_reading_text, readings)) + ")",
                 EXPORT if UNKNOWN in whats or site.bound is not None else TRACED,
                 "as written under one reading, not under another")
        return
    (reading,), evidence = readings, readings[0].says
    if not all(isinstance(d, int) for d in site.dims) and dropped_crop(g, site.index):  # torch 2.9 (review51)
        left(f"an {op} frozen at the traced size: {DROPPED_CROP}", EXPORT, "only where the crop is the identity")
        return
    if reading.what == SCALES:
        left(f"an {op} frozen at the traced size of an F.interpolate by scale_factor: its output size follows the "
             "input size, which no adaptive pool of one output size computes", EXPORT,
             "where its kernel divides the pooled size")
        return
    size = reading.size
    if size is not None and COMPUTED in size:
        left(f"an {op} frozen at the traced size whose source line computes its output size (from the input's "
             "shape, or from what the line does not show: a variable, **kw, a call or loop continued on the next "
             "line; a literal or the module's attribute on the call's line is read): no fixed output size to read",
             EXPORT)
        return
    kernel, _ = window_attrs(node)
    traced = site.bound[2:] if site.bound is not None else None
    if size is None:
        ones = [a for a in range(site.k) if kernel[a] == 1 and not isinstance(site.dims[2 + a], int)]
        if (module_pool(node) or (None, None, None))[2] == 1:  # AdaptiveAvgPool1d(None) is a TypeError in torch:
            ones = []  # a 1-D module's one-element windows are its int size, n at the traced size (review46)
        if traced is not None and module_pool(node) is not None:  # the module's other call says the length
            sibling = known.get(module_scope(node), {})
            ones = [a for a in ones if sibling.get(a) != traced[a]]
        features = classifier_features(g.nodes, g.initializers, result)
        if (squeezed := None if ones else _squeezed(g, node, site.dims, kernel)) and traced not in (None, squeezed):
            return ShapeError(f"the given traced size contradicts the graph: the {op} '{result}' pools "
                              f"{size_text(traced)} to {size_text(adaptive_sizes(node, tuple(traced)))}; a Squeeze of "
                              f"its result drops axes 1 long only where that is {size_text(squeezed)}",
                              contradiction_hint(None))
        if squeezed:
            traced, evidence = squeezed, f"{evidence}; a Squeeze of its result says the symbolic pooled axes pool to 1"
        if traced is None and ones and features is None:  # (1, None) of an OCR model: no traced size decides it
            left(f"an {op} frozen at the traced size whose axis {2 + ones[0]} has windows of one element: "
                 "torch's None (it follows the input) or the traced size of that axis, which differ at other sizes, "
                 "and the module's output size is nowhere in the file", EXPORT)
            return
        if traced is None:
            left(f"an {op} frozen at the traced size under symbolic sizes; its adaptive output size is known only "
                 "at that size", TRACED)
            return
        fixed = adaptive_sizes(node, tuple(traced))
        channels = site.dims[1] if isinstance(site.dims[1], int) else None
        if features is not None and channels is not None and features != channels * prod(fixed):
            return ShapeError(
                f"the given traced size contradicts the graph: the {op} '{result}' pools it to "
                f"{'x'.join(map(str, fixed))}, {channels * prod(fixed)} features, and the Gemm/MatMul after it "
                f"takes {features}", contradiction_hint(None))
        if ones and (features is None or channels is None):
            left(f"an {op} frozen at the traced size whose axis {2 + ones[0]} has windows of one element: "
                 f"torch's None (it follows the input) or the size {traced[ones[0]]}, which differ at other sizes, "
                 "and the module's output size is nowhere in the file (a file exported where that axis is longer "
                 f"than {traced[ones[0]]} would show an int size by its windows; with None every export gives "
                 "windows of one element)", EXPORT)
            return
        size = fixed
        if ones:
            evidence += "; the Gemm/MatMul after it takes that size alone (no torch None)"
        if site.lifted:
            size = (1, *size[1:])
    output_size = tuple(InputDim(2 + a) if m is None else m for a, m in enumerate(size))
    out_shape = tuple(site.dims[:2]) + tuple(site.dims[2 + a] if m is None else m for a, m in enumerate(size))
    chain = site.chain
    pn = PoolNode(index=site.index, name=node.name or f"{op}_{site.index}", op=f"adaptive_{site.kind}_pool{site.k}d",
                  kind=site.kind, rank=site.k, encoding=ENCODING, input=node.input[0], output=result,
                  indices_output=chain.indices if chain else None,
                  unused_outputs=() if chain else tuple(o for o in node.output[1:] if o), output_size=output_size,
                  size_input=None, evidence=evidence, replaces=(chain.sub,) if chain else ())
    findings.specs.append(PoolSpec(pn, site.dims, out_shape, site.elem, opset, target))
    nodes = (site.index, *(chain.nodes if chain else ()))
    findings.regions.append(Region(result, node.input[0], *g.written_and_read(nodes), evidence, output_size,
                                   tuple(site.bound or ()), len(nodes)))
    if reading.size is None and site.bound is not None and site.bound[2:] != squeezed:  # (a Squeeze
        resting.append((result, node.input[0], output_size, op))  # that agrees with the traced size confirms it)
    busy.add(result)
    if chain:
        busy.add(chain.indices)


def _reading_text(r) -> str:
    if r.what == UNKNOWN:
        return r.says
    if r.size is None:
        return r.what
    return r.what + " to (" + ", ".join("None" if m is None else str(m) for m in r.size) + ")"


def _declared_at(model, name: str, input_shapes) -> tuple[int, ...] | None:
    """``name``'s dims as the exporter declares them (``(((H - 1)//4)) + 1``), at the bound input shapes: onnx's
    inference loses a size behind a Reshape to a computed shape (PVT's tokens back to a map, ``reshape(b, c,
    h, w)``), which the declaration still holds. None where some dim cannot be evaluated."""
    declared = declared_dims(model)
    env = symbol_binding(declared, input_shapes)
    dims = declared.get(name)
    if env is None or dims is None:
        return None
    got = tuple(evaluate(d, env) for d in dims)
    return got if all(isinstance(d, int) and d >= 1 for d in got) else None


def _squeezed(g: DataflowGraph, node: onnx.NodeProto, dims: tuple, kernel: list[int]) -> tuple[int, ...] | None:
    """The pooled lengths at the export where a Squeeze of the node's result drops every symbolic pooled axis
    (the CRNN's ``pool(f.permute(0, 3, 1, 2)).squeeze(3)`` of ``AdaptiveAvgPool2d((None, 1))``): torch squeezed
    it, so its length was 1 there and the traced length the kernel; static axes as they are. Else None."""
    squeezed: set[int] = set()
    for n in g.nodes:
        if n.op_type == "Squeeze" and n.input and n.input[0] == node.output[0]:
            axes = constant_ints(g, n.input[1]) if len(n.input) > 1 and n.input[1] else attributes(n).get("axes")
            squeezed.update(int(a) % len(dims) for a in axes or ())  # (no axes: every unit axis, none named)
    traced = [d if isinstance(d, int) else kernel[a] if 2 + a in squeezed and kernel[a] > 1 else None
              for a, d in enumerate(dims[2:])]
    return None if None in traced else tuple(traced)


def size_text(sizes) -> str:
    """An output size as the notes write it (an axis that follows the input: ``=``)."""
    return "x".join("=" if isinstance(m, InputDim) or m is None else str(m) for m in sizes)

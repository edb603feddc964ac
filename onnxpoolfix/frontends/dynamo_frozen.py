"""The dynamo exporter's pooling ops frozen at the traced size under symbolic sizes (part of the dynamo
front end, :mod:`.dynamo`): an AveragePool/MaxPool whose kernel and strides were computed from the traced
input, read as the adaptive pool it stands for where its output size can be known (a literal on the
source line, a bound traced size), else left as a suspect with why (refused unless allowed).
"""
from __future__ import annotations

import re

import onnx

from ..errors import ShapeError
from ..graph import read_names
from ..graph.emit import EMITTED_BY
from ..graph.shapes import SUPPORTED_DTYPES, infer_at
from ..report import WarningNote
from ..spec import InputDim, PoolNode, PoolSpec
from .base import FrontEndResult, Region, Suspect
from .dynamo_graph import (
    COMPUTED,
    ENCODING,
    DataflowGraph,
    literal_output_size,
    node_evidence,
    scales_with_input,
)
from .dynamo_search import declared_dims, evaluate, symbol_binding
from .exporter_pools import adaptive_sizes

__all__ = ["frozen_pool_ops", "SIBLING", "size_text", "contradiction_hint"]

def frozen_pool_ops(model, g: DataflowGraph, info, input_shapes, findings: FrontEndResult, *, opset, target, busy,
                     resting: list, siblings: set[str]) -> None:
    """AveragePool nodes the exporter wrote for an adaptive pool whose windows were uniform at the traced size
    (6 -> 6 in an AlexNet traced at 224 is an AveragePool k1 s1): under symbolic sizes they are frozen there.
    Likewise a MaxPool for an adaptive max pool (torch 2.13 exports adaptive_max_pool*d only where the
    windows are uniform, as max_pool*d_with_indices); one whose indices something reads is left (that form,
    a second MaxPool and a Sub, is not read). Only the metadata says such a node is adaptive pooling. The
    output size is read from the source line where it is written out (``F.adaptive_avg_pool2d(x, (4, 7))``;
    ``None``: the axis follows the input), else at the traced size (``input_shapes``: m = n / kernel there;
    the node's windows must be exactly the adaptive ones); a size the line computes from the input's shape is
    no fixed size. Otherwise reported. ``resting``: (result, pooled tensor, output size, a kernel of 1?, op
    type) of each whose size rests on the binding."""
    bound_info = None
    read = read_names(model.graph) | {o.name for o in model.graph.output}
    for index, node in enumerate(g.nodes):
        if node.op_type not in ("AveragePool", "MaxPool") or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if node.doc_string.startswith(EMITTED_BY) or node.output[0] in busy:
            continue
        op, kind = node.op_type, "max" if node.op_type == "MaxPool" else "avg"
        ev = node_evidence(node)
        if kind == "max":  # a genuine nn.MaxPool2d (or a max pool without metadata) is what it says
            ev = ev if ev is not None and says_adaptive_max(node) else None
            if ev is None:
                continue
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
        if kind == "max" and len(node.output) > 1 and node.output[1] in read:
            left("a MaxPool frozen at the traced size whose indices are read (return_indices=True): a form onnxpoolfix "
                 "does not read")
            continue
        if ev[1] is not None and ev[1] != k and not lifted:
            left(f"an {op} of {k} pooled axes frozen at the traced size for a {ev[1]}D adaptive pool: a form "
                 "onnxpoolfix does not read")
            continue

        if scales_with_input(node):  # binding the traced size would fix an output size torch does not have
            left("an AveragePool frozen at the traced size of an F.interpolate by scale_factor: its output size "
                 "follows the input size, which no adaptive pool of one output size computes",
                 "where its kernel divides the pooled size")
            continue
        literal = literal_output_size(node, k, kind)
        if lifted and (ev[1] == 1 or (literal is not None and literal[0] not in (1, None))):
            one = literal_output_size(node, 1, kind)  # F.adaptive_avg_pool1d(x, 7): 7 is the size of L alone
            literal = None if one is None else (1, *one)
        if literal is not None and COMPUTED in literal:
            left(f"an {op} frozen at the traced size whose source line computes its output size from the "
                 "input's shape: no fixed output size to bind, and none is bound")
            continue
        bx = None
        if input_shapes:
            if bound_info is None:
                bound_info = infer_at(model, input_shapes)
            _, bx = bound_info.get(node.input[0], (0, None))
            if bx is None or not all(isinstance(d, int) for d in bx):
                bx = _declared_at(model, node.input[0], input_shapes)
            if bx is None:
                left("its input size at the bound input shapes is unknown")
                continue
            bx = tuple(bx)
        if literal is None and bx is None:
            left(f"an {op} frozen at the traced size under symbolic sizes; its adaptive output size is known "
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
        pn = PoolNode(index=index, name=node.name or f"{op}_{index}", op=f"adaptive_{kind}_pool{k}d", kind=kind,
                      rank=k, encoding=ENCODING, input=node.input[0], output=result, indices_output=None,
                      unused_outputs=tuple(o for o in node.output[1:] if o), output_size=output_size, size_input=None,
                      evidence=ev[0])
        findings.specs.append(PoolSpec(pn, tuple(dims), out_shape, elem, opset, target))
        findings.regions.append(Region(result, node.input[0], frozenset(o for o in node.output if o),
                                       frozenset(x for x in node.input if x), ev[0], output_size,
                                       bx or (), 1))
        if literal is None:
            kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
            resting.append((result, node.input[0], output_size, 1 in kernel[1 if lifted else 0:], op))
        busy.add(result)


def says_adaptive_max(node: onnx.NodeProto) -> bool:
    """Whether the node's metadata names adaptive MAX pooling (the module, or the call on its source line)."""
    md = {p.key: p.value for p in node.metadata_props}
    trace = md.get("pkg.torch.onnx.stack_trace", "").strip().splitlines()
    line = trace[-1].strip() if trace else ""
    hierarchy = md.get("pkg.torch.onnx.class_hierarchy", "")
    return bool(re.search(r"torch\.nn\.modules\.pooling\.AdaptiveMaxPool[123]d", hierarchy)
                or re.search(r"adaptive_max_pool[123]d\s*\(", line))


def _declared_at(model, name: str, input_shapes) -> tuple[int, ...] | None:
    """``name``'s dims as the exporter declares them (``(((H - 1)//4)) + 1``), at the bound input shapes: onnx's
    inference loses a size behind a Reshape to a computed shape (PVT's tokens back to a map, ``reshape(b, c,
    h, w)``), which the declaration still holds. None where some dim cannot be evaluated."""
    declared = declared_dims(model)
    env = symbol_binding(model, declared, input_shapes)
    dims = declared.get(name)
    if env is None or dims is None:
        return None
    got = tuple(evaluate(d, env) for d in dims)
    return got if all(isinstance(d, int) and d >= 1 for d in got) else None


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
    """A dynamo-written AveragePool (kernel = stride) under symbolic sizes whose metadata is gone, or names no
    pooling (the source line calls a helper function: transformers' granite4_vision ``interpolate_downsample``
    holds the ``F.interpolate(mode="area")``, and the trace keeps only the module's frame): the graph of
    ``F.interpolate(x, scale_factor=0.5, mode="area")`` (or an adaptive pool) traced at a size the kernel
    divides is this one node, the same as ``nn.AvgPool2d(2)``'s. Left as written, but not silently."""
    if not node.name.startswith("node_") or not _kernel_is_stride(node) or _names_a_plain_pool(node):
        return
    kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
    _, dims = info.get(node.input[0], (0, None))
    if not kernel or all(k == 1 for k in kernel) or dims is None or all(isinstance(d, int) for d in dims[2:]):
        return
    what = ("its exporter metadata names no pooling (its source line: "
            f"{_last_line(node)[:80]!r})" if _has_metadata(node) else "has no exporter metadata")
    findings.notes.append(WarningNote(
        f"the AveragePool '{node.output[0]}' (kernel = stride = {'x'.join(map(str, kernel))}) under symbolic sizes: "
        f"{what}: if it stands for adaptive pooling or F.interpolate(mode=\"area\") it is "
        "right only where its kernel divides the size (it cannot be told from nn.AvgPool2d from what the file "
        "records), and it is left as written; patch the file before its metadata is stripped, or export "
        "with onnxpoolfix.export"))


def _last_line(node) -> str:
    md = {p.key: p.value for p in node.metadata_props}
    trace = md.get("pkg.torch.onnx.stack_trace", "").strip().splitlines()
    return trace[-1].strip() if trace else ""


def _names_a_plain_pool(node) -> bool:
    """Its metadata says a plain average pool wrote it: an nn.AvgPool*d module, or avg_pool on the line."""
    hierarchy = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.class_hierarchy"), "")
    return "AvgPool" in hierarchy or "avg_pool" in _last_line(node)


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
                return (f"the {node.op_type} '{node.output[0]}' pools {'x'.join(map(str, traced))} to "
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


"""Standard pooling nodes that ARE adaptive pooling: what the exporter wrote where it could lower it
(``GlobalAveragePool`` for 1x1, ``AveragePool`` with kernel = stride = n/m where every output size divides
the input), correct but not always fast. With ``optimize_exporter_pools`` they are handed to the planner like
leftovers (why, and what it gains: docs/lowerings.md, "Pyramids, and the exporter's own pools").

A node qualifies only when its windows are exactly the adaptive windows of its output size (so the numpy
reference of adaptive pooling is its reference, and every lowering is exact for it):

- GlobalAveragePool on a rank >= 3 input (N, C, spatial...): output size 1 everywhere,
  also on symbolic spatial axes;
- AveragePool with no padding (pads 0, auto_pad NOTSET or VALID), dilations 1, and no partial
  window (floor and ceil mode agree), whose windows ``[i*s, i*s+k)`` equal ``windows(n, m)`` on every
  spatial axis (kernel = stride = n/m, or any uniform adaptive layout such as 33 -> 8 = k5 s4).

Max pooling nodes are left alone (see ``_OPS``).

Nodes inside subgraphs (If/Loop bodies) are left alone, and so are the nodes onnxpoolfix wrote itself
(their doc_string says so): they were planned when they were written, so patching a patched model again
with the flag finds nothing to do.
"""
from __future__ import annotations

import logging
from typing import Iterator, Mapping, Sequence

import onnx

from .. import windows as W
from ..graph import attributes, read_names
from ..graph.emit import EMITTED_BY
from ..graph.shapes import SUPPORTED_DTYPES, Dim, PoolSpec, infer, model_opset
from .base import FrontEndResult, PlanOptions
from .leftovers import PoolNode

logger = logging.getLogger(__name__)

STANDARD = "standard"  # the encoding reported for these nodes
# Averages only. The exporter's MaxPool/GlobalMaxPool are not torch's max on NaN/-inf (onnxruntime's kernels
# return -FLT_MAX for an all -inf window and may drop a NaN): any exact replacement carries the guard that
# fixes that, an extra pass over the input, so it would be slower than the node it replaces.
_OPS = {"GlobalAveragePool": "avg", "AveragePool": "avg"}


def adaptive_sizes(node: onnx.NodeProto, spatial: tuple[int, ...]) -> tuple[int, ...] | None:
    """The adaptive output size the node's windows match on every spatial axis, or None."""
    if node.op_type.startswith("Global"):
        return (1,) * len(spatial)
    attrs = attributes(node)
    k = len(spatial)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    kernel = list(attrs.get("kernel_shape", []))
    strides = list(attrs.get("strides", [1] * k))
    if (auto_pad not in (b"NOTSET", b"VALID") or len(kernel) != k or len(strides) != k or any(attrs.get("pads", []))
            or any(d != 1 for d in attrs.get("dilations", []))):
        return None
    out = []
    for n, kk, s in zip(spatial, kernel, strides):
        if kk < 1 or s < 1 or kk > n or (n - kk) % s:  # (n - k) % s: floor and ceil mode give the same windows
            return None
        m = (n - kk) // s + 1
        if W.windows(n, m) != tuple((i * s, i * s + kk) for i in range(m)):
            return None
        out.append(m)
    return tuple(out)


def find_exporter_pools(model: onnx.ModelProto, info: Mapping[str, tuple[int, tuple[Dim, ...] | None]],
                        *, opset: int, target: str, read: set[str]) -> list[PoolSpec]:
    """Specs for every top-level standard pooling node whose windows are adaptive (see the module doc).

    ``info`` is the inferred (dtype, shape) per tensor; ``read`` every tensor name some node or graph
    output reads (a MaxPool whose indices are read does not qualify).
    """
    return [exporter_pool_spec(node, index, kind, dims, sizes, elem, opset, target)
            for index, node, kind, elem, dims in standard_pools(model, info, _OPS, read)
            if len(dims) >= 3 and (sizes := adaptive_output_sizes(node, dims[2:])) is not None]


def standard_pools(model: onnx.ModelProto, info: Mapping[str, tuple[int, tuple[Dim, ...] | None]],
                   ops: Mapping[str, str], read: set[str]
                   ) -> Iterator[tuple[int, onnx.NodeProto, str, int, tuple[Dim, ...]]]:
    """(index, node, kind, input dtype, input shape) of each top-level standard node of ``ops`` (op -> kind)
    that is not ours, whose indices nothing ``read``s, with a supported input dtype and a known shape."""
    for index, node in enumerate(model.graph.node):
        kind = ops.get(node.op_type)
        if kind is None or node.domain not in ("", "ai.onnx") or not node.input or not node.output[0]:
            continue
        if node.doc_string.startswith(EMITTED_BY):  # ours already: planned when it was written
            continue
        if len(node.output) > 1 and node.output[1] and node.output[1] in read:
            logger.debug("%s: its indices are read (ONNX's, not torch's): left as written", node.name)
            continue
        elem, dims = info.get(node.input[0], (0, None))
        if elem not in SUPPORTED_DTYPES or dims is None:
            continue
        yield index, node, kind, elem, tuple(dims)


def adaptive_output_sizes(node: onnx.NodeProto, spatial: Sequence[Dim]) -> tuple[int, ...] | None:
    """:func:`adaptive_sizes` where the pooled axes allow it: none empty, and symbolic only for a Global pool."""
    if any(isinstance(d, int) and d < 1 for d in spatial):
        return None
    if not all(isinstance(d, int) for d in spatial) and not node.op_type.startswith("Global"):
        return None  # a pooling op's windows on a symbolic axis are not adaptive ones in general
    return adaptive_sizes(node, tuple(spatial))


def exporter_pool_spec(node: onnx.NodeProto, index: int, kind: str, dims: tuple[Dim, ...], sizes: tuple[int, ...],
                       elem: int, opset: int, target: str) -> PoolSpec:
    """The spec of a standard pooling node that pools ``dims``' last ``len(sizes)`` axes to ``sizes``."""
    name = node.name or f"{node.op_type}_{index}"
    lead = dims[: len(dims) - len(sizes)]
    pn = PoolNode(index=index, name=name, op=node.op_type, kind=kind, rank=len(sizes), encoding=STANDARD,
                  input=node.input[0], output=node.output[0], indices_output=None,
                  unused_outputs=tuple(o for o in node.output[1:] if o), output_size=sizes, size_input=None)
    return PoolSpec(pn, dims, tuple(lead) + tuple(sizes), elem, opset, target)


def keeps_its_op(spec: PoolSpec, lowering_name: str) -> bool:
    """True when the planner's choice for an exporter node is the node itself (nothing to gain)."""
    return lowering_name == "pool" and spec.node.op in ("AveragePool", "MaxPool")


def exporter_pool_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()
                        ) -> FrontEndResult:
    """The exporter's own adaptive pools, when ``options.optimize_exporter_pools`` asks for them. The
    leftovers ``found`` before seed shape inference (their outputs' shapes are ours to give)."""
    if not options.optimize_exporter_pools:
        return FrontEndResult()
    info = infer(model, {s.node.output: (s.dtype, s.output_shape) for s in found})
    read = read_names(model.graph) | {o.name for o in model.graph.output}
    taken = {s.node.output for s in found}  # repaired already, or a frozen pool the dynamo front end planned
    return FrontEndResult([s for s in find_exporter_pools(model, info, opset=model_opset(model),
                                                          target=options.target, read=read)
                           if s.node.output not in taken])

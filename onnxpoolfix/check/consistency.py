"""The layers after the replaced nodes, without running them: do they take what the replacements compute?

The check runs only the part of OUT that computes the replaced nodes (:mod:`.cut`). A replacement whose output
size rests on a reading (a frozen pool sized from a given traced shape) can be exact and still not fit the layers
after it (an Add with a fixed-shape bias), which would leave OUT running at no size. This asks onnx's strict
shape inference, on the input file's graph without its weights, with each replaced node's output fed in at the
shape its replacement computes: the replacements themselves are proven by running them, so only the layers
around them are inferred. Where the input file's graph does not infer strictly as it is (ops beyond onnx's
inference), nothing is concluded.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import NamedTuple

import onnx
from onnx import TensorProto

from ..graph import constant_value, keep_only, nodes_deep, subgraphs
from ..graph.shapes import PoolSpec, make_value_info

__all__ = ["strict_inference", "layers_after_refuse", "LayersAfter"]


def strict_inference(light: onnx.ModelProto) -> tuple[str | None, onnx.ModelProto | None]:
    """onnx's strict shape inference of ``light`` (a weight-free copy, changed here) with its declared
    intermediate and output shapes dropped (onnxruntime only warns where those differ; what is asked is whether
    every op takes what it is fed), without data propagation (the weights' bytes are not there): its error on one
    line and None, or None and the model inferred where it infers cleanly."""
    graphs = [light.graph] + [b for n in nodes_deep(light.graph.node) for b in subgraphs(n)]
    for g in graphs:  # the bodies' too: torch types an If's branches at the traced shape
        del g.value_info[:]
        for vi in g.output:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
    try:
        return None, onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except Exception as e:  # noqa: BLE001 - onnx's own words are the answer
        return " ".join(str(e).split())[:300], None


class LayersAfter(NamedTuple):
    """Why the layers after the replaced nodes refuse what these compute: onnx's words, at which input sizes
    ("" as declared), and whether it is an index the exporter froze (:func:`_frozen_index`) rather than an op
    that fails."""
    error: str
    where: str
    frozen: bool


def layers_after_refuse(input_light: onnx.ModelProto, specs: Sequence[PoolSpec],
                        sizes: Sequence[Mapping[str, Sequence[int]]] = ()) -> LayersAfter | None:
    """Where the input file's graph infers strictly, but not with each replaced node's output fed in at the
    shape its replacement computes (or a frozen index follows them); None otherwise.
    ``sizes``: input shapes (the check's) at which the same is asked again with every dim named after a graph
    input's bound: a Squeeze the TorchScript exporter wrote for a batch traced at 1 (``pool(x).squeeze(0)``)
    takes a symbolic N, but not N = 2."""
    found = _fed_error(input_light, specs, {})
    if found is not None:
        return LayersAfter(found[0], "", found[1])
    for shapes in sizes:
        named = {d.dim_param: v for vi in input_light.graph.input if vi.name in shapes
                 for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]) if d.dim_param}
        found = _fed_error(input_light, specs, named, shapes) if named else None
        if found is not None:
            return LayersAfter(found[0], " ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in shapes.items()),
                               found[1])
    return None


def _fed_error(input_light: onnx.ModelProto, specs: Sequence[PoolSpec], named: Mapping[str, int],
               shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[str, bool] | None:
    """:func:`layers_after_refuse` at one binding of the dim names (none: as declared): the error, and
    whether it is a frozen index."""

    def bound(dims) -> list:
        return [named.get(d, d) if isinstance(d, str) else d if isinstance(d, int) else None for d in dims]

    if strict_inference(_bound_copy(input_light, shapes or {}))[0] is not None:
        return None
    fed = {s.node.output: (s.dtype, s.output_shape) for s in specs}
    fed.update({s.node.indices_output: (TensorProto.INT64, s.output_shape) for s in specs if s.node.indices_output})
    light = _bound_copy(input_light, shapes or {})
    keep_only(light.graph.node, lambda n: not any(o in fed for o in n.output))
    light.graph.input.extend(make_value_info(name, elem, bound(dims)) for name, (elem, dims) in fed.items())
    error, inferred = strict_inference(light)
    if error is not None:
        return error, False
    frozen = _frozen_index(inferred, fed)
    return (frozen, True) if frozen is not None else None


def _frozen_index(inferred: onnx.ModelProto, fed: Mapping[str, object]) -> str | None:
    """A GatherElements after a replaced node whose index is a constant (reached from no graph input) smaller
    than the data it gathers from on an axis it does not gather along, at a size with the dims bound: its
    output takes the index's shape, so it does not follow the data there. A Reshape after one to a constant
    shape whose batch differs from the data's (``view(y.size(0), -1)`` folded to [1, -1]) likewise. The
    TorchScript exporter types a leftover's output at its traced shape and folds what the model builds from
    that shape (``torch.gather(y, 3, torch.zeros(y.shape, ...))`` after a ``y[:, 0]``) into such a constant;
    the file then gives batch 1 at every batch, and nothing fails to say so."""
    g = inferred.graph  # (as strict inference gave it: no second inference)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in (*g.input, *g.value_info) if vi.type.tensor_type.HasField("shape")}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    initializers = {t.name: t for t in g.initializer}
    constants = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
    varying = {vi.name for vi in g.input if vi.name not in initializers}
    after = set(fed)
    for n in g.node:
        if n.op_type == "GatherElements" and n.input[0] in after and n.input[1] not in varying:
            data, index = shapes.get(n.input[0]), shapes.get(n.input[1])
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            if data and index and len(data) == len(index):
                axis %= len(data)
                # (1: the traced batch torch folds in; a constant of another length is the model's own)
                smaller = [a for a, (d, i) in enumerate(zip(data, index))
                           if a != axis and d is not None and i == 1 and d > 1]
                if smaller:
                    return (f"GatherElements '{n.name or n.output[0]}' takes its output shape from a constant index "
                            f"of shape {index}, smaller than the data's {data} on axis {smaller[0]}: a tensor built "
                            "from the leftover's shape, frozen at the size it traced")
        if n.op_type == "Reshape" and n.input[0] in after and len(n.input) > 1 and n.input[1] not in varying:
            data, target = shapes.get(n.input[0]), constant_value(n.input[1], initializers, constants)
            if data and isinstance(target, list) and target and target[0] == 1 and isinstance(data[0], int) \
                    and data[0] > 1 and not _keeps_leading_dim(data, target):
                return (f"Reshape '{n.name or n.output[0]}' to the constant shape {target} moves the data's batch of "
                        f"{data[0]} into its other dims: a view(y.size(0), -1) of the leftover's traced batch, frozen "
                        "at the size it traced")
        if any(i in varying for i in n.input):
            varying.update(n.output)
        if any(i in after for i in n.input):
            after.update(n.output)
    return None


def _keeps_leading_dim(data: Sequence[int | None], target: Sequence[int]) -> bool:
    """Whether reshaping ``data`` to ``target`` keeps data's first dim apart: some leading dims of the target
    multiply to it (``[2, 64, 49] -> [1, 2, 64, 49]``, an attention's heads in timm's pvt_v2: review41), where a
    folded ``view(y.size(0), -1)`` (``[2, 64] -> [1, -1]``) merges it into the others."""
    dims = [data[i] if t == 0 and i < len(data) else t for i, t in enumerate(target)]  # 0: copy (no allowzero)
    if -1 in dims:
        if not all(isinstance(d, int) for d in data) or dims.count(-1) > 1:
            return False
        known = prod(d for d in dims if d != -1)
        total = prod(data)
        if known <= 0 or total % known:
            return False
        dims = [total // known if d == -1 else d for d in dims]
    product = 1
    for d in dims:
        if not isinstance(d, int) or d < 0:
            return False
        product *= d
        if product >= data[0]:
            return product == data[0]
    return False


def _bound_copy(light: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``light`` with the declared dims of its inputs in ``shapes`` set to those sizes."""
    out = onnx.ModelProto()
    out.CopyFrom(light)
    for vi in out.graph.input:
        if vi.name in shapes and vi.type.tensor_type.HasField("shape"):
            for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]):
                d.Clear()
                d.dim_value = int(v)
    return out

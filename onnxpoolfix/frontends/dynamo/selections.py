"""Whether torch's decomposition into a region end picks windows no input size moves (part of the dynamo front
end, :mod:`.front_end`): fixed indices along axes the graph fixes, right as written at every size."""
from __future__ import annotations

import numpy as np
import onnx

from ...graph import attributes, constant_value
from .dataflow import SELECT_OPS, DataflowGraph, LazyInfo, closure

__all__ = ["selects_fixed_axes", "constant_ints"]


def selects_fixed_axes(g: DataflowGraph, end: int, info: LazyInfo) -> bool:
    """Whether every window selection on the data path into ``end`` picks positions no input size moves: fixed
    indices along an axis whose length the graph fixes. Then torch's decomposition, frozen at the traced
    size, is right as written at every size the file takes (its symbolic dims are axes it does not pool: a
    batch); a selection along a symbolic axis, or one the inference cannot size, says frozen."""
    selects = [i for i in closure(g, end) if g.nodes[i].op_type in SELECT_OPS]
    for i in selects:
        n = g.nodes[i]
        dims = info.fixed_dims(n.input[0])
        _, shape_sources = g.size_ancestors([i])
        axes = _selected_axes(g, n, len(dims), info) if dims is not None and not shape_sources else None
        if axes is None or not all(isinstance(dims[a], int) for a in axes):
            return False
    return bool(selects)


def _selected_axes(g: DataflowGraph, n: onnx.NodeProto, rank: int, info: LazyInfo) -> list[int] | None:
    """The data axes a select op picks positions along, or None where its inputs do not say."""
    attrs = attributes(n)
    if n.op_type in ("Gather", "GatherElements"):
        return [attrs.get("axis", 0) % rank] if rank else None
    if n.op_type == "GatherND":
        index_dims = info.fixed_dims(n.input[1])
        if not index_dims or not isinstance(index_dims[-1], int):
            return None
        return list(range(attrs.get("batch_dims", 0) + index_dims[-1]))
    if len(n.input) < 2:  # Slice-1: attributes
        axes = attrs.get("axes", range(len(attrs.get("starts", ()))))
        return [int(a) % rank for a in axes] if rank else None
    # Slice: axes given as a constant, or the first len(starts)
    axes = constant_ints(g, n.input[3]) if len(n.input) > 3 and n.input[3] else None
    if axes is None:
        starts = constant_ints(g, n.input[1])
        return None if starts is None or (len(n.input) > 3 and n.input[3]) else list(range(len(starts)))
    return [int(a) % rank for a in axes] if rank else None


def constant_ints(g: DataflowGraph, name: str) -> list[int] | None:
    """The values of an initializer or a Constant node's output, flattened, else None."""
    p = g.producer.get(name)
    constants = {name: g.nodes[p]} if p is not None and g.nodes[p].op_type == "Constant" else {}
    value = constant_value(name, g.initializers, constants)
    return None if value is None else [int(v) for v in np.ravel(value)]

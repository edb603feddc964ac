"""The indices of a MaxPool the dynamo exporter froze at the traced size (torch 2.14 writes adaptive max pooling
with ``return_indices=True`` whose windows divide as ``max_pool2d_with_indices``): ONNX's MaxPool numbers each
element over the whole tensor, torch within its (N, C) plane, so the exporter subtracts each plane's first
index, read off a second MaxPool of kernel 1 over the same input:

    MaxPool(x) -> (y, flat)        MaxPool(x, kernel 1, stride 1) -> (_, every)
    Slice(every, starts 0, ends 1, the pooled axes) -> first        Sub(flat, first) -> indices

:func:`index_chains` reads exactly that chain and nothing like it: every constant checked, every tensor of the
chain read by the chain alone (the planes' first indices by Subs alone: the exporter shares them between the
pools of one tensor; the indices by anything). The lowering then writes ``indices`` itself, and the
chain's other nodes go with the region."""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from ...graph import attributes
from .dataflow import DataflowGraph
from .frozen_readings import window_attrs
from .selections import constant_ints


@dataclass(frozen=True)
class IndicesChain:
    indices: str  # the Sub's output: torch's per-plane indices
    sub: int  # the Sub's position (its place goes empty: the lowering writes its output)
    nodes: tuple[int, ...]  # the chain's nodes besides the pool: the kernel-1 MaxPool, the Slice, the Sub


def index_chains(g: DataflowGraph, graph_outputs: set[str]) -> dict[int, IndicesChain]:
    """Per MaxPool position, the chain that turns its flat indices into torch's (module doc), where there is one."""
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(g.nodes):
        for x in n.input:
            if x:
                readers.setdefault(x, []).append(i)
    chains = {i: _chain(g, i, readers, graph_outputs) for i, n in enumerate(g.nodes)
              if n.op_type == "MaxPool" and n.domain in ("", "ai.onnx")}
    return {i: c for i, c in chains.items() if c is not None}


def _chain(g: DataflowGraph, index: int, readers, graph_outputs: set[str]) -> IndicesChain | None:
    pool = g.nodes[index]
    if pool.op_type != "MaxPool" or len(pool.output) < 2 or not pool.output[1] or attributes(pool).get("storage_order"):
        return None
    flat = pool.output[1]
    sub = _only_reader(readers, flat, graph_outputs)
    if sub is None or g.nodes[sub].op_type != "Sub" or list(g.nodes[sub].input[:1]) != [flat]:
        return None
    first = g.nodes[sub].input[1]
    sl = g.producer.get(first)
    if sl is None or g.nodes[sl].op_type != "Slice" or first in graph_outputs or any(
            g.nodes[r].op_type != "Sub" or list(g.nodes[r].input[1:2]) != [first] for r in readers.get(first, [])):
        return None  # the planes' first indices, subtracted (from each pool's own indices, where several share it)
    every = g.nodes[sl].input[0]
    unit = g.producer.get(every)
    if unit is None or not _unit_max_pool(g.nodes[unit], pool) or _only_reader(readers, every, graph_outputs) != sl:
        return None
    if g.nodes[unit].output[0] and (readers.get(g.nodes[unit].output[0]) or g.nodes[unit].output[0] in graph_outputs):
        return None  # its values are read elsewhere: not the exporter's index arithmetic alone
    k = len(attributes(pool).get("kernel_shape", []))
    rank = k + 2
    args = [constant_ints(g, x) for x in g.nodes[sl].input[1:]]
    if len(args) < 3 or any(a is None for a in args[:3]):
        return None
    starts, ends, axes = args[:3]
    steps = args[3] if len(args) > 3 else [1] * len(axes)
    if (sorted(a % rank for a in axes) != list(range(2, rank)) or any(s != 0 for s in starts)
            or any(e != 1 for e in ends) or steps is None or any(s != 1 for s in steps)):
        return None
    return IndicesChain(g.nodes[sub].output[0], sub, (unit, sl, sub))


def _only_reader(readers, name: str, graph_outputs: set[str]) -> int | None:
    got = readers.get(name, [])
    return got[0] if len(got) == 1 and name not in graph_outputs else None


def _unit_max_pool(node: onnx.NodeProto, pool: onnx.NodeProto) -> bool:
    """A MaxPool of kernel 1, stride 1, no padding or dilation, over the pool's own input, with its indices."""
    if node.op_type != "MaxPool" or node.domain not in ("", "ai.onnx") or list(node.input[:1]) != list(pool.input[:1]):
        return False
    k = len(attributes(pool).get("kernel_shape", []))
    return (len(node.output) > 1 and bool(node.output[1]) and window_attrs(node) == ([1] * k, [1] * k)
            and not attributes(node).get("storage_order", 0))
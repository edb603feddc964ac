"""After the rewrite: the nodes of a replaced region (a decomposition the dynamo exporter wrote, see
:mod:`onnxpoolfix.frontends.dynamo`) that nothing reads any more go, with the initializers only they read.

The rewrite (:mod:`onnxpoolfix.rewrite.nodes`) replaces the node that writes each region's result; the rest of
the region (the gathers, the window tables, the size arithmetic on ``Shape``) is then dead unless another
region or layer still reads it (a pyramid's shared Transpose, the size tensors at the top of the graph),
and those stay. Nodes onnxpoolfix wrote are never removed here.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import onnx

from ..frontends.base import Region
from ..graph import arrange, keep_only, read_names, subgraphs
from ..graph.emit import EMITTED_BY


def drop_dead_region_nodes(model: onnx.ModelProto, regions: Sequence[Region]) -> int:
    """After the rewrite: remove the regions' nodes nothing reads any more (and initializers only they read).
    Returns how many nodes went."""
    mine: set[str] = set().union(*(r.outputs for r in regions)) if regions else set()
    if not mine:
        return 0
    graph = model.graph
    outputs = {o.name for o in graph.output}
    freed: set[str] = set().union(*(r.reads for r in regions))
    nodes = list(graph.node)
    reads = [[i for i in n.input if i] + [i for sub in subgraphs(n) for i in read_names(sub)] for n in nodes]
    readers = Counter(i for r in reads for i in r)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}

    def dead(k: int) -> bool:
        n = nodes[k]
        return (not n.doc_string.startswith(EMITTED_BY) and bool(n.output) and all(o in mine or not o for o in n.output)
                and not any(readers[o] or o in outputs for o in n.output if o))

    # a worklist over reader counts: a node goes once nothing reads its outputs, and its inputs lose a reader
    alive = [True] * len(nodes)
    todo = [k for k in range(len(nodes)) if dead(k)]
    while todo:
        k = todo.pop()
        if not alive[k] or not dead(k):
            continue
        alive[k] = False
        for i in reads[k]:
            freed.add(i)
            readers[i] -= 1
            if not readers[i] and i in producer and alive[producer[i]]:
                todo.append(producer[i])
    removed = alive.count(False)
    if removed:
        arrange(graph.node, [n for n, keep in zip(nodes, alive) if keep])
    read = {i for n in graph.node for i in n.input if i} | outputs
    read |= {i for n in graph.node for sub in subgraphs(n) for i in read_names(sub)}
    unused = [t for t in graph.initializer if t.name in freed and t.name not in read]
    if unused:
        names = {t.name for t in unused}
        for fld in (graph.initializer, graph.input):
            keep_only(fld, lambda t: t.name not in names)
    stale = ({v.name for v in graph.value_info} & mine) - {o for n in graph.node for o in n.output}
    if stale:
        keep_only(graph.value_info, lambda v: v.name not in stale)
    return removed

"""After the rewrite: the nodes of a replaced region (a decomposition the dynamo exporter wrote, see
:mod:`onnxpoolfix.frontends.dynamo`) that nothing reads any more go, with the initializers only they read.

The rewrite (:mod:`onnxpoolfix.rewrite.nodes`) replaces the node that writes each region's result; the rest of
the region (the gathers, the window tables, the size arithmetic on ``Shape``) is then dead unless another
region or layer still reads it (a pyramid's shared Transpose, the size tensors at the top of the graph),
and those stay. Nodes onnxpoolfix wrote are never removed here.
"""
from __future__ import annotations

from typing import Sequence

import onnx

from ..frontends.base import Region
from ..graph import drop_unread, keep_only
from ..graph.emit import EMITTED_BY


def drop_dead_region_nodes(model: onnx.ModelProto, regions: Sequence[Region]) -> int:
    """After the rewrite: remove the regions' nodes nothing reads any more (and initializers only they read).
    Returns how many nodes went."""
    mine: set[str] = set().union(*(r.outputs for r in regions))
    if not mine:
        return 0
    graph = model.graph
    removed = drop_unread(graph, sorted(mine), lambda n: not n.doc_string.startswith(EMITTED_BY) and bool(n.output)
                          and all(o in mine or not o for o in n.output), set().union(*(r.reads for r in regions)))
    stale = ({v.name for v in graph.value_info} & mine) - {o for n in graph.node for o in n.output}
    keep_only(graph.value_info, lambda v: v.name not in stale)
    return removed

"""The part of a model that computes some of its tensors: what each onnxruntime session of the check runs.

The check reads the replaced nodes' inputs and outputs (and, for the differential check, the tensors the
rewrite redefined). The layers below them are the original's, untouched by the rewrite, and often hold most
of the weights (VGG11-BN's classifier: 494 of its 531 MB), so each session runs the cut of the graph that
computes what it reads: the nodes those tensors are computed from, the initializers and inputs they read.
What a replaced node computes depends on those nodes alone, so the values fetched are the ones the whole
model computes.

The cut is serialized straight from the caller's model (:func:`onnxpoolfix.io.serialize`): its big tensors are
written from where they are, never copied into a second ModelProto first.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import onnx

from ..graph import outer_reads
from ..io import serialize

__all__ = ["cut_bytes", "cut_nodes", "model_shell"]


def cut_nodes(graph: onnx.GraphProto, wanted: Iterable[str], stop: Iterable[str] = ()) -> tuple[list[int], set[str]]:
    """(indices in graph order of the top-level nodes that ``wanted`` are computed from, not looking past the
    tensors in ``stop``; the names those nodes read that none of them writes: graph inputs, initializers, the
    ``stop`` tensors reached, and any name nothing in the graph writes). A node's bodies count as reading what
    they read from outside themselves."""
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    stop = set(stop)
    picked: set[int] = set()
    outside: set[str] = set()
    pending = [w for w in wanted if w]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        k = None if name in stop else producer.get(name)
        if k is None:
            outside.add(name)
            continue
        if k in picked:
            continue
        picked.add(k)
        node = graph.node[k]
        pending.extend(i for i in node.input if i)
        pending.extend(outer_reads(node))
    return sorted(picked), outside


def model_shell(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """A new model with ``model``'s IR version, opset imports and local functions, its graph empty but for its
    name (``name`` where it has none): what a part of ``model`` is written into."""
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    out.graph.name = model.graph.name or name
    return out


def cut_bytes(model: onnx.ModelProto, outputs: Sequence[onnx.ValueInfoProto],
              extra_nodes: Sequence[onnx.NodeProto] = ()) -> bytes:
    """The serialized model computing ``outputs`` (value infos of tensors of ``model``, or of ``extra_nodes``,
    which are appended after the cut and read tensors of ``model``): the cut's nodes in graph order, the
    initializers, sparse initializers and graph inputs they read, every local function and opset import.
    ``model`` is not modified."""
    g = model.graph
    extra_outputs = {o for n in extra_nodes for o in n.output}
    roots = [o.name for o in outputs if o.name not in extra_outputs]
    roots += [i for n in extra_nodes for i in n.input if i and i not in extra_outputs]
    picked, reads = cut_nodes(g, roots)
    out = model_shell(model, "cut")
    graph = out.graph
    graph.node.extend(g.node[k] for k in picked)
    graph.node.extend(extra_nodes)
    initializers = [t for t in g.initializer if t.name in reads]
    graph.sparse_initializer.extend(t for t in g.sparse_initializer if t.values.name in reads)
    graph.input.extend(vi for vi in g.input if vi.name in reads)
    graph.output.extend(outputs)
    # the initializers go in as stubs, and the writer puts each original tensor in its stub's place
    return serialize(out, initializers)

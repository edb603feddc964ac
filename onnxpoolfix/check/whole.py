"""Whether onnxruntime loads the whole patched model, not only the cut the check runs (:mod:`.cut`).

The check runs the part of the graph that computes the replaced nodes; the layers after them are the input's,
untouched, and never loaded. A file torch wrote invalid there passed: an opset-9 ``Upsample`` whose float
scale (19/5) gives 18 where torch declared 19 ("Can't merge shape info"), or one that would downsample (scale
below 1), which onnxruntime refuses at load (review22 cases 140 and 301). Exit 0 with an OUT no runtime takes.

Loading is cheap without the weights: the skeleton keeps every node, the declared shapes and the small constants
(scales, shapes, index tables: what onnxruntime reads when it builds a kernel or folds), and declares each big
initializer as a graph input of its type and dims instead (VGG16's 553 MB: 6 ms against 4.3 s). Where the
skeleton fails, OUT itself is loaded to decide: a kernel that wants one of those big tensors constant is the
skeleton's failure, not OUT's.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..io import serialize
from ..sessions import ort_session
from .cut import cut_nodes, model_shell
from .feeds import random_feed

__all__ = ["load_whole", "runs_through"]

#: elements up to which an initializer stays a constant in the skeleton (a count: the same file, the same verdict)
SKELETON_CONSTANT_ELEMENTS = 4096
#: elements of zeros :func:`runs_through` feeds for the weights at most (beyond: no verdict)
ZERO_WEIGHT_ELEMENTS = 1 << 26


def load_whole(model: onnx.ModelProto, model_dir: str | None) -> str | None:
    """Load ``model`` in onnxruntime (module doc): None where it loads; onnxruntime's message where its CPU build
    has no kernel for some op (OUT may be for another runtime: TensorRT takes what the CPU build lacks); any other
    refusal is raised, as onnxruntime raised it."""
    try:
        ort_session(_graph_bytes(model, skeleton=True))
        return None
    except Exception as e:  # noqa: BLE001 - onnxruntime's exception types live in its compiled module
        if not type(e).__module__.startswith("onnxruntime"):
            raise
    try:
        ort_session(_graph_bytes(model, skeleton=False), model_dir)
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ == "NotImplemented" and type(e).__module__.startswith("onnxruntime"):
            return " ".join(str(e).split())[:300]
        raise
    return None


def _graph_bytes(model: onnx.ModelProto, *, skeleton: bool) -> bytes:
    """``model`` serialized, its initializers written from where they are (:func:`~onnxpoolfix.io.serialize`);
    ``skeleton``: the big ones declared as inputs instead (module doc)."""
    g = model.graph
    out = model_shell(model, "whole")
    graph = out.graph
    graph.node.extend(g.node)
    graph.input.extend(g.input)
    graph.output.extend(g.output)
    graph.value_info.extend(g.value_info)
    graph.sparse_initializer.extend(g.sparse_initializer)
    if not skeleton:
        return serialize(out, g.initializer)
    declared = {i.name for i in g.input}
    for t in g.initializer:
        if math.prod(t.dims) <= SKELETON_CONSTANT_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
            graph.initializer.append(t)
        elif t.name not in declared:
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out.SerializeToString()


def runs_through(light: onnx.ModelProto, node: str, shapes, seed: int) -> bool | None:
    """Whether the input file runs its node ``node`` at the input ``shapes`` (``light``: its weight-free copy,
    :func:`~onnxpoolfix.graph.shapes.light_copy`): the part computing that node run in onnxruntime, on random
    inputs and its large weights fed as zeros (the sizes its layers compute do not read them). True where it runs;
    False where onnxruntime fails in ``node`` itself; None where anything else stops it (or the weights fed would be
    too many), which says nothing."""
    g = light.graph
    at = next((n for n in g.node if n.name == node), None)
    if at is None:
        return None
    picked, reads = cut_nodes(g, [o for o in at.output if o])
    out = model_shell(light, "runs_through")
    out.graph.node.extend(g.node[k] for k in picked)
    out.graph.input.extend(i for i in g.input if i.name in reads)
    out.graph.output.extend(onnx.ValueInfoProto(name=o) for o in at.output if o)
    zeros = {}
    for t in g.initializer:
        if t.name not in reads:
            continue
        if t.data_location != TensorProto.EXTERNAL:
            out.graph.initializer.append(t)
        elif t.name not in {i.name for i in out.graph.input}:
            out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            zeros[t.name] = (helper.tensor_dtype_to_np_dtype(t.data_type), tuple(t.dims))
    if sum(math.prod(d) for _, d in zeros.values()) > ZERO_WEIGHT_ELEMENTS:
        return None
    try:
        feed = random_feed(light, shapes, np.random.default_rng(seed))
        feed = {k: v for k, v in feed.items() if k in reads}
        feed.update({k: np.zeros(d, dt) for k, (dt, d) in zeros.items()})
        ort_session(out.SerializeToString(), optimize=False).run(None, feed)
    except Exception as e:  # noqa: BLE001 - onnxruntime's exception types live in its compiled module
        return False if type(e).__module__.startswith("onnxruntime") and f"Name:'{node}'" in str(e) else None
    return True

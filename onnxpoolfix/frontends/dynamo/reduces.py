"""Means and maxima of whole axes in a dynamo file (part of the dynamo front end, :mod:`.front_end`; the cases are
docs/dynamo-files.md's). torch's decomposition of an adaptive pool whose output is 1 on every pooled axis at the
traced size is a ReduceMean (a ReduceMax for max pooling): right at every size where the size is 1 there too, a
literal ``1`` or the module's own. Where the line computes it (``(1, x.shape[3] // 4)`` traced where ``W // 4`` is
1), or writes ``None`` on an axis 1 long there, other sizes pool to other sizes: the reduce is frozen at the traced
size (review44 F1, F3; it was "nothing to patch"). A mean of another pool's result (``pool(x).mean((2, 3))``) is
no pool of its own, and stays as written.
"""
from __future__ import annotations

from ...errors import PoolFixError
from ...graph import attributes
from ...graph.emit import EMITTED_BY
from ..base import EXPORT, Suspect
from .computed import COMPUTES_SIZE, computed_axes, hides_a_size
from .dataflow import DataflowGraph, is_end
from .frozen_readings import classifier_features
from .metadata import has_metadata, module_pool, source_line, submodules
from .selections import constant_ints

__all__ = ["computed_reduces", "mean_of_a_result"]

HIDDEN = ("a global reduce of the exporter's whose source line calls something that may hold an adaptive pool (a "
          "helper function or method: the exporter records no frame inside it), whose output size the file does not "
          "show: 1 at the traced size, a size written 1 or one computed from the input, which differ at other sizes; "
          "no flatten that keeps the batch (a Flatten, a Reshape to [N, -1]) leads it to a classifier of a fixed "
          "number of features (under a symbolic batch torch writes flatten(p, 1) as a Reshape to [-1, C], as it "
          "writes a per-position view(-1, C))")
ONE_LONG = ("a global reduce of an adaptive module's over an axis 1 long at the given traced size: a size of 1 "
            "there, or torch's None (it follows the input), which differ at other sizes; the module's size is "
            "nowhere in the file")
_RELAYOUT = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity"})
_REDUCES = ("ReduceMean", "ReduceMax")


def mean_of_a_result(g: DataflowGraph, end: int) -> bool:
    """A ReduceMean or ReduceMax of another end's result (through layout ops only): the mean of whole axes of a
    pooled tensor, which no window table enters; never a decomposition, whose means read gathered windows."""
    if g.nodes[end].op_type not in _REDUCES:
        return False
    t = g.nodes[end].input[0]
    for _ in range(8):
        p = g.producer.get(t)
        if p is None:
            return False
        if is_end(g, p):
            return True
        if g.nodes[p].op_type not in _RELAYOUT:
            return False
        t = g.nodes[p].input[0]
    return False


def computed_reduces(g: DataflowGraph, info, skip: set[int], traced_shapes=None) -> list[Suspect]:
    """A suspect (frozen, remedy the export) per ReduceMean/ReduceMax of the exporter's, outside ``skip``, that
    reduces a symbolic axis keeping it (torch's form of an output of 1) where its source line computes the size;
    or, an adaptive module's (its size nowhere in the file), where that axis is 1 long at the given traced size
    (``traced_shapes``, where given): 1 or torch's None, which differ at other sizes."""
    out, modules = [], submodules(g.nodes)
    for i, n in enumerate(g.nodes):
        if i in skip or n.domain not in ("", "ai.onnx") or not has_metadata(n) or n.doc_string.startswith(EMITTED_BY):
            continue
        if n.op_type == "ArgMax":  # the indices alone (the values unread, so no ReduceMax beside it): review46 F1
            src, dims, axes = _argmax_of_a_view(g, info, n)
        elif n.op_type not in _REDUCES or not attributes(n).get("keepdims", 1) or mean_of_a_result(g, i):
            continue
        else:
            src, dims = n.input[0], info.get(n.input[0], (0, None))[1]
            axes = attributes(n).get("axes") or (constant_ints(g, n.input[1]) if len(n.input) > 1 and n.input[1]
                                                 else None)
        if not dims or not axes:
            continue
        axes = sorted({int(a) % len(dims) for a in axes})
        if all(isinstance(dims[a], int) for a in axes) or axes != list(range(len(dims) - len(axes), len(dims))):
            continue
        module = module_pool(n)
        at = _traced_dims(info, traced_shapes, src) if module is not None and module[1] else None
        if at and len(at) == len(dims) and any(at[a] == 1 for a in axes if not isinstance(dims[a], int)) and not (
                len(dims) == 2 + len(axes) and _classifier_takes(g, n.output[0], dims[1], info)):
            out.append(Suspect(n.output[0], f"metadata: an adaptive pooling module ({n.output[0]})", ONE_LONG, True,
                               "only at sizes where that axis is 1 long", EXPORT))
        elif any(not isinstance(dims[axes[a]], int)
                 for a in computed_axes([n], len(axes), "avg" if n.op_type == "ReduceMean" else "max")):
            out.append(Suspect(n.output[0], f"stack trace: {source_line(n).text[:100]}", COMPUTES_SIZE, True,
                               "only at sizes where the computed size is 1 again", EXPORT))
        elif n.op_type != "ArgMax" and hides_a_size(n, modules) \
                and classifier_features(g.nodes, g.initializers, n.output[0], joined=True) is None:
            # review45 (not an ArgMax of a view: a keypoint decoder's argmax in a helper is no pool to read)
            out.append(Suspect(n.output[0], f"stack trace: {source_line(n, modules).text[:100]}", HIDDEN, True,
                               "as written if what the line calls pools to 1 at every size, else only where its "
                               "size is 1", EXPORT))
    return out


def _classifier_takes(g: DataflowGraph, result: str, channels, info=None) -> bool:
    """A classifier after ``result`` takes its channels alone: flattened, the pooled axes are 1 at every size the
    model runs at (torch's None there would make the flattened length follow the input: r3d_18 traced at T = 7)."""
    return isinstance(channels, int) and classifier_features(g.nodes, g.initializers, result, info=info) == channels


def _argmax_of_a_view(g: DataflowGraph, info, n) -> tuple:
    """torch's indices of an adaptive max pool to 1 on every pooled axis: ``ArgMax(Reshape(t, [N, C, -1]), -1)``
    (``argmax(view(t, [N, C, H * W]), -1)``; a 1-D pool's ``t`` is its unsqueezed input). (t, t's dims, the pooled
    axes of t: its trailing ones flattened into the last), with t, or Nones where the node is no such ArgMax."""
    p = g.producer.get(n.input[0])
    if p is None or g.nodes[p].op_type != "Reshape":
        return None, None, None
    t = g.nodes[p].input[0]
    dims, flat = info.get(t, (0, None))[1], info.get(n.input[0], (0, None))[1]
    if t in g.size_only or not dims or not flat or attributes(n).get("axis", 0) % len(flat) != len(flat) - 1:
        return None, None, None
    k = len(dims) - (len(flat) - 1)
    kept = zip(dims[:len(flat) - 1], flat[:-1])  # N, C as they were
    if k < 1 or any(a != b for a, b in kept if isinstance(a, int) and isinstance(b, int)):
        return None, None, None
    return t, dims, list(range(len(dims) - k, len(dims)))


def _traced_dims(info, traced_shapes, name: str):
    """``name``'s dims at the given traced size (the front end's one inference there), None where unknown."""
    if not traced_shapes:
        return None
    try:
        return info.at(traced_shapes).get(name, (0, None))[1]
    except PoolFixError:  # a size the model refuses: its own error comes from the check of the binding
        return None

"""Transposes the TorchScript exporter wrote with negative axes: torch 2.13 writes ``permute``'s and ``movedim``'s
axes as the source gives them (``x.permute(0, -1, 1, 2)``: perm ``[0, -1, 1, 2]``), which ONNX refuses (each
axis in ``[0, rank)``): the checker and onnx's shape inference stop there (after a leftover, the next pool's
input shape is unknown), and onnxruntime does not load the file. A perm names every axis once, so its length
is the rank, and each negative axis ``p`` is ``p + len(perm)``, as torch reads it. Read so before the input
check and the front ends, in models holding leftovers only (elsewhere the file is not ours to patch: the
checker's error names the remedy)."""
from __future__ import annotations

import onnx

from ..report import Note
from .bodies import walk
from .leftovers import is_pool_leftover

__all__ = ["normalize_negative_perms"]


def normalize_negative_perms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Note | None]:
    """``model`` with every such perm normalized (a copy, where any is), and the note saying so; ``model``
    itself and None where none is, or the model holds no leftover."""
    if not any(is_pool_leftover(n) for g in _graphs(model.graph) for n in g.node):
        return model, None
    if not any(_normalized(n) for g in _graphs(model.graph) for n in g.node):
        return model, None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = []
    for g in _graphs(out.graph):
        for n in g.node:
            perm = _normalized(n)
            if perm is not None:
                (attr,) = [a for a in n.attribute if a.name == "perm"]
                attr.ints[:] = perm
                names.append(n.name or n.output[0])
    return out, Note(f"normalized the negative axes torch wrote in the perm of {len(names)} Transpose(s) after a "
                     f"leftover of a rank it did not know: {', '.join(names)}", "negative-perms", nodes=names)


def _normalized(node: onnx.NodeProto) -> list[int] | None:
    """The perm with each negative axis read as torch reads it, where the node has one and that is a
    permutation; None otherwise (nothing to do, or no reading: left for onnx to refuse)."""
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return None
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), [])
    if not any(p < 0 for p in perm):
        return None
    fixed = [p + len(perm) if p < 0 else p for p in perm]
    return fixed if sorted(fixed) == list(range(len(perm))) else None



def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    return [graph] + [body for _, body, _ in walk(graph)]

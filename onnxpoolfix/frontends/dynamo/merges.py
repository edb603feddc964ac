"""Calls torch's export merged into one: the trace of the call that is gone.

torch's exporter merges computations that are the same at the traced size (common subexpressions): two
adaptive calls pooling one tensor with the same windows there (``F.adaptive_avg_pool2d(x, (None, 4))`` and
``(x, (16, 4))`` at 16x12) become one node with the first call's metadata, and the second call's size is nowhere
in the file; at other sizes OUT would follow the first call's for both (review12 F15). Where a merged result is a
graph output an ``Identity`` without metadata shows it (:mod:`.frozen`). Where both stay inside the graph, one
trace is left: a node after them still names, in its ``fx_node`` metadata (``%add_8 = add(%amax, %amax_1)``),
the program's value the merge removed (``amax_1``), and reads the kept one (``amax``: the same op, so the same
name before its ``_<k>``) in its place. A replaced pool from which such a stand-in is computed may stand for a
call it does not show: a suspect (export through onnxpoolfix.export, which keeps each call its own node).

It cannot tell a merged twin pool from a merged identical computation of the pool's result (``torch.cat([p.relu(),
p.relu()])``): both are refused, the second needlessly (the promise: where two readings differ, refuse).
"""
from __future__ import annotations

import re

import onnx

from ..base import EXPORT, FrontEndResult, Suspect

__all__ = ["drop_merged"]

_FX_NODE = "pkg.torch.onnx.fx_node"
_REF = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)")
_NUMBERED = re.compile(r"_\d+$")


def drop_merged(graph: onnx.GraphProto, findings: FrontEndResult) -> None:
    """Turn each spec of ``findings`` from whose result a merge's stand-in is computed into a suspect (module doc),
    its region dropped with it."""
    inside = frozenset().union(*(r.outputs for r in findings.regions))
    stand_ins = _stand_ins(graph, inside)
    if not stand_ins or not findings.specs:
        return
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in dict.fromkeys(n.input):
            if i:
                readers.setdefault(i, []).append(n)
    for spec in list(findings.specs):
        result = spec.node.output
        merged = _first_in_cone(result, stand_ins, readers)
        if merged is None:
            continue
        findings.specs.remove(spec)
        findings.regions = [r for r in findings.regions if r.result != result]
        findings.suspects.append(Suspect(
            result, spec.node.evidence or "",
            f"torch's export merged a computation of '{merged}' with another the same at the traced size (a node "
            f"after it reads '{merged}' where the exported program read a value the merge removed): another adaptive "
            "call with the same windows there may stand behind it, whose output size is not in the file",
            True, "only at the size the model was exported at", EXPORT))


def _stand_ins(graph: onnx.GraphProto, inside: frozenset[str]) -> set[str]:
    """Values a node reads in place of a program value its ``fx_node`` names and nothing in the graph holds, of the
    same op (the same name but for its number). Not where the node is one of a region's (``inside``: their
    outputs): a decomposition's own identical selects merge, and the region goes whole."""
    held = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    held |= {o for n in graph.node for o in n.output if o}
    out: set[str] = set()
    for n in graph.node:
        text = next((p.value for p in n.metadata_props if p.key == _FX_NODE), "")
        if " = " not in text or any(o in inside for o in n.output):
            continue
        refs = _REF.findall(text.split(" = ", 1)[1])
        gone = {_NUMBERED.sub("", r) for r in refs if r not in held}
        if not gone:
            continue
        for v in n.input:
            if v and _NUMBERED.sub("", v) in gone and list(n.input).count(v) > refs.count(v):
                out.add(v)
    return out


def _first_in_cone(result: str, stand_ins: set[str], readers: dict[str, list[onnx.NodeProto]]) -> str | None:
    """The first stand-in among ``result`` and the values computed from it (top-level nodes; each value once)."""
    seen, todo = {result}, [result]
    while todo:
        v = todo.pop()
        if v in stand_ins:
            return v
        for n in readers.get(v, ()):
            for o in n.output:
                if o and o not in seen:
                    seen.add(o)
                    todo.append(o)
    return None

"""Calls torch's export merged into one: two calls the same at the traced size (two adaptive pools of one tensor
with the same windows there) become one node with the first call's metadata, the second call's size nowhere in the
file (docs/dynamo-files.md, "Files no reading repairs", has the cases and their measurements; review12 F15; a merged
graph output: :mod:`.frozen`). A node after the merge names, in its ``fx_node`` metadata, the value the merge
removed and reads the kept one, of the same op, in its place (:func:`_stand_ins`): a replaced pool from which such
a stand-in is computed is a suspect, unless a value between them lost a reader, the merged twins reading the pool's
own result (:func:`_lost_a_reader`; review26: five ordinary heads were refused before). A pool the file keeps as
genuine is read the same way (review26 F2). torch's optimizer leaves the same trace where it removes a node
(:func:`_folded`, :func:`_removed_users`).
"""
from __future__ import annotations

import re

import onnx

from ..base import EXPORT, FrontEndResult, Suspect, reach
from .frozen_readings import window_attrs

__all__ = ["drop_merged"]

_FX_NODE = "pkg.torch.onnx.fx_node"
_REF = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)")
_USERS = re.compile(r"^%([A-Za-z_][A-Za-z0-9_]*) : \[num_users=(\d+)\]")
_NUMBERED = re.compile(r"_\d+$")
_TARGET = re.compile(r"call_function\[target=([^\]]+)\]")


def drop_merged(graph: onnx.GraphProto, findings: FrontEndResult) -> None:
    """Turn each spec of ``findings`` from whose result a merge's stand-in is computed into a suspect (module doc),
    its region dropped with it; and make each pool the file keeps as written (an AveragePool or MaxPool of the
    exporter's, no spec's) such a suspect too."""
    inside = frozenset().union(*(r.outputs for r in findings.regions))
    stand_ins = _stand_ins(graph, inside)
    if not stand_ins:
        return
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in dict.fromkeys(n.input):
            if i:
                readers.setdefault(i, []).append(n)
    lost = _lost_a_reader(graph)
    producer = {o: n for n in graph.node for o in n.output if o}

    def merged_into(result: str) -> str | None:
        cone = _cone(result, readers)
        merged = min(cone & stand_ins, default=None)
        return None if merged is None or _shared_below(merged, result, cone, lost, producer) else merged

    taken = {s.node.output for s in findings.specs} | {s.result for s in findings.suspects}
    # only pools torch's decomposition writes (window_attrs): a merge joins identical calls, so a pool of other
    # windows (VoVNet's MaxPool2d(3, 2, ceil_mode=True)) never had an adaptive call merged into it (review49 F2)
    kept = [(n.output[0], "metadata: the exporter's " + n.op_type) for n in graph.node
            if n.op_type in ("AveragePool", "MaxPool") and n.output and n.output[0] not in taken
            and any(p.key == _FX_NODE for p in n.metadata_props) and window_attrs(n) is not None]
    # a spec whose pooled axes the file fixes is right at every size the file takes, a twin merged into it too
    varies = [(s.node.output, s.node.evidence or "") for s in findings.specs
              if not all(isinstance(d, int) for d in s.input_shape[len(s.input_shape) - s.node.rank:])]
    for result, evidence in varies + kept:
        merged = merged_into(result)
        if merged is None:
            continue
        findings.specs = [s for s in findings.specs if s.node.output != result]
        findings.regions = [r for r in findings.regions if r.result != result]
        findings.suspects.append(Suspect(
            result, evidence,
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
    read_for: dict[str, set[str]] = {}  # a value read where gone ones are named -> those gone names (any op)
    twin: set[str] = set()  # ... of which one is of the value's own op
    for n in graph.node:
        text = next((p.value for p in n.metadata_props if p.key == _FX_NODE), "")
        if " = " not in text or any(o in inside for o in n.output) or _folded(n, text):
            continue
        refs = _REF.findall(text.split(" = ", 1)[1])
        gone = [r for r in refs if r not in held]
        for v in n.input:
            if v and gone and list(n.input).count(v) > refs.count(v):
                read_for.setdefault(v, set()).update(gone)
                if any(_NUMBERED.sub("", g) == _NUMBERED.sub("", v) for g in gone):
                    twin.add(v)
    removed = _removed_users(graph)
    return {v for v in twin if len(read_for[v]) > removed.get(v, 0)}


def _removed_users(graph: onnx.GraphProto) -> dict[str, int]:
    """Per program value, how many of its users (its ``fx_node``'s ``num_users``) no node's ``fx_node`` names as
    reading it: users torch's optimizer removed, a no-op (``y * 1``, ``y + 0``, the full-range Slice of each axis
    before the one ``t[:, :, a:b]`` cuts) whose readers then read the value itself. Each gone name of the value's op
    read in its place can be such a removed user; more gone names than removed users, a merge's twin."""
    named: dict[str, set[str]] = {}
    for n in graph.node:
        text = next((p.value for p in n.metadata_props if p.key == _FX_NODE), "")
        if " = " in text:
            for r in _REF.findall(text.split(" = ", 1)[1]):
                named.setdefault(r, set()).add(text.split(" ", 1)[0])
    return {v: k - len(named.get(v, ())) for v, k in _declared_users(graph).items() if k > len(named.get(v, ()))}


def _folded(n: onnx.NodeProto, text: str) -> bool:
    """Whether ``n`` is a BatchNorm torch's optimizer folded into the Conv, ConvTranspose or Gemm above it: the node
    keeps the BatchNorm's ``fx_node``, which names the folded layer's output, and reads that layer's input (conv ->
    conv -> BatchNorm reads ``conv2d_<k>`` for ``conv2d_<k+1>``: the same op, no twin). The exporter writes a batch
    norm as BatchNormalization, so its metadata on any other op is a fold, not a merge."""
    target = _TARGET.search(text)
    return target is not None and "batch_norm" in target.group(1) and n.op_type != "BatchNormalization"


def _cone(result: str, readers: dict[str, list[onnx.NodeProto]]) -> set[str]:
    """``result`` and the values computed from it (top-level nodes; each value once)."""
    return reach([result], lambda v: (o for n in readers.get(v, ()) for o in n.output if o))


def _lost_a_reader(graph: onnx.GraphProto) -> set[str]:
    """Values the program read more often than the graph does: its ``fx_node`` ``num_users`` of the value (on the
    node writing it under its own name) above the graph's readers of it: the program's nodes whose translations
    read it (an upsample reads its input twice, its Shape and its Resize: one user; review41's UPerNet with a
    symbolic batch), a node without metadata each, a graph output."""
    readers: dict[str, set] = {}
    for k, n in enumerate(graph.node):
        m = _USERS.match(next((p.value for p in n.metadata_props if p.key == _FX_NODE), ""))
        for i in n.input:
            readers.setdefault(i, set()).add(m.group(1) if m else k)
    for o in graph.output:
        readers.setdefault(o.name, set()).add(("output", o.name))
    return {v for v, k in _declared_users(graph).items() if k > len(readers.get(v, ()))}


def _declared_users(graph: onnx.GraphProto) -> dict[str, int]:
    """Per value a node writes under its own program name, the program's users of it (``fx_node``'s ``num_users``)."""
    return {m.group(1): int(m.group(2)) for n in graph.node
            if (m := _USERS.match(next((p.value for p in n.metadata_props if p.key == _FX_NODE), "")))
            and m.group(1) in n.output}


def _shared_below(stand_in: str, result: str, cone: set[str], lost: set[str],
                  producer: dict[str, onnx.NodeProto]) -> bool:
    """Whether a value from ``result`` (included) to ``stand_in``, inside the pool's ``cone``, lost a reader: the
    merged twins both read it, below the pool (module doc)."""
    def up(v: str) -> list[str]:
        node = producer.get(v)
        return [] if v == result or node is None else [i for i in node.input if i in cone]

    return bool(reach([stand_in], up) & lost)

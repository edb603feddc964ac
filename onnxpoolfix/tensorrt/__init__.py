"""TensorRT-readiness lint: which nodes would TensorRT 10's ONNX parser (onnx-tensorrt) reject?

``lint_tensorrt(model)`` walks the whole model (the main graph, the bodies of If/Loop/Scan and the model's
local functions) and returns one :class:`LintFinding` per problem. Only ``severity == "error"`` means "the
parser would reject this node"; ``"warning"`` marks things that parse but change behaviour or depend on the
TensorRT version or build flags.

The lowering code asks the same questions through :data:`SUPPORTED_OPS` ("is op X allowed for target
tensorrt") and :func:`tensorrt_rejects` (the first error reason for one node, or ``None``).

Every rule below comes from the sources named next to :data:`.table.OP_TYPES`; a rule this module cannot back with
them is not here, because a false "TensorRT rejects this" is worse than a missing one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

import onnx

from ..graph import default_opset, named_subgraphs
from .graph_info import GraphInfo, inferred_model
from .rules import Severity, check_node
from .table import SUPPORTED_OPS, SUPPORTED_OPSET_RANGE

logger = logging.getLogger(__name__)

__all__ = ["lint_tensorrt", "tensorrt_rejects", "LintFinding", "GraphInfo", "SUPPORTED_OPS", "SUPPORTED_OPSET_RANGE"]

@dataclass(frozen=True)
class LintFinding:
    """One problem TensorRT's ONNX parser has with one node.

    ``node`` is the node's name, or ``"-> <first output>"`` for an unnamed node; ``reason`` is one line.
    ``severity == "error"`` means the parser would reject the model; ``"warning"`` means it parses with a caveat.
    """

    node: str
    op_type: str
    domain: str
    reason: str
    severity: Severity

    def __str__(self) -> str:
        where = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        return f"{self.severity}: {where} {self.node!r}: {self.reason}"


def lint_tensorrt(model: onnx.ModelProto) -> list[LintFinding]:
    """Every problem TensorRT 10's ONNX parser would have with ``model``, errors first, in graph order.

    Walks the main graph, every If/Loop/Scan body (with the outer scope visible), and the bodies of the
    model's local functions (which the parser inlines). The model is not modified.
    """
    findings: list[LintFinding] = []
    opset = default_opset(model)
    lo, hi = SUPPORTED_OPSET_RANGE
    if opset is not None and not lo <= opset <= hi:
        findings.append(LintFinding("<model>", "", "", f"default-domain opset {opset} is outside the "
                                    f"opset {lo}..{hi} range TensorRT 10.15 documents", "warning"))
    inferred = inferred_model(model)
    info = GraphInfo.from_graph(inferred.graph, functions=frozenset((f.domain, f.name) for f in model.functions))
    _lint_graph(inferred.graph, info, findings, where="")
    for func in model.functions:
        finfo = GraphInfo(constants={n.output[0] for n in func.node if n.op_type == "Constant" and n.output},
                          used={i for n in func.node for i in n.input} | set(func.output), functions=info.functions)
        for node in func.node:
            _add(findings, node, check_node(node, finfo), where=f" (in local function {func.name})")
    return sorted(dict.fromkeys(findings), key=lambda f: f.severity != "error")  # (each finding once)


def tensorrt_rejects(node: onnx.NodeProto, graph_info: GraphInfo) -> str | None:
    """The first reason TensorRT's ONNX parser would reject ``node``, or None if it would import it.

    ``graph_info`` describes the graph the node sits in (see :meth:`GraphInfo.from_model`); warnings are not
    rejections and are not reported here.
    """
    return next((reason for severity, reason in check_node(node, graph_info) if severity == "error"), None)


def _lint_graph(graph: onnx.GraphProto, info: GraphInfo, findings: list[LintFinding], where: str) -> None:
    for node in graph.node:
        _add(findings, node, check_node(node, info), where)
        for name, sub in named_subgraphs(node):
            _lint_graph(sub, GraphInfo.from_graph(sub, outer=info), findings, f"{where} (in {node.op_type}.{name})")


def _add(findings: list[LintFinding], node: onnx.NodeProto, results: Iterable[tuple[Severity, str]],
         where: str) -> None:
    label = node.name or (f"-> {node.output[0]}" if node.output else "")
    for severity, reason in results:
        findings.append(LintFinding(label, node.op_type, node.domain, reason + where, severity))

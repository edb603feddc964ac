"""The per-node rules of the lint: each returns ``(severity, reason)`` pairs for one node, from the support
table (:mod:`.table`) and the importer's own checks (its sources are named in :mod:`.table`)."""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto

from ..graph import STANDARD_DOMAINS, attributes
from .graph_info import GraphInfo
from .table import (
    CONTROL_FLOW,
    FLOAT_ONLY_UNARY,
    NO_INTEGER_INPUT,
    OP_TYPES,
    OPS_MARKED_UNSUPPORTED,
    PAD_MODES,
    REDUCE_OPS,
    RESIZE_COORD_MODES,
    RESIZE_NEAREST_MODES,
    TOPK_K_LIMIT,
    TYPE_LABEL,
    UINT8_READERS,
)

Severity = Literal["error", "warning"]

def check_node(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    op = node.op_type
    if (node.domain, op) in info.functions:
        return []  # inlined by the parser; its body is linted separately
    if node.domain == "org.pytorch.aten":
        return [("error", "custom domain 'org.pytorch.aten' (a PyTorch ATen fallback op): TensorRT's ONNX parser "
                          "has no importer for it")]
    if node.domain not in STANDARD_DOMAINS:
        return [("error", f"custom domain '{node.domain}': no TensorRT ONNX importer; only a TensorRT plugin "
                          f"registered as '{op}' could serve it")]
    if op == "ATen":
        return [("error", "ATen fallback op (older PyTorch exporters): not an ONNX operator TensorRT can import")]
    if op in OPS_MARKED_UNSUPPORTED:
        return [("error", f"{op} is marked unsupported in TensorRT's ONNX operator table")]
    if op not in OP_TYPES:
        return [("error", f"{op} is not in TensorRT's ONNX operator table")]
    return _check_types(node, info) + (_RULES[op](node, info) if op in _RULES else [])


def _check_types(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    op = node.op_type
    for name in dict.fromkeys(n for n in [*node.input, *node.output] if n):  # each tensor once
        elem = info.elem_types.get(name)
        if elem is None or elem == TensorProto.UNDEFINED:
            continue
        tname = TensorProto.DataType.Name(elem)
        if elem not in TYPE_LABEL:
            out.append(("error", f"tensor '{name}' is {tname}, a type TensorRT cannot represent"))
        elif elem == TensorProto.DOUBLE:
            out.append(("warning", f"tensor '{name}' is DOUBLE: TensorRT computes it as FP32, clamping to "
                                   f"+-FLT_MAX"))
        elif (elem == TensorProto.UINT8 and name in node.input and op not in UINT8_READERS
              and op not in ("QuantizeLinear", "DequantizeLinear")):
            out.append(("error", f"input '{name}' is UINT8, which TensorRT accepts only as a network "
                                 f"input/output; Cast it first"))
    # The table's Supported Types column, checked on the data input (input 0).
    if node.input and node.input[0] and op not in CONTROL_FLOW:
        elem = info.elem_types.get(node.input[0])
        label = TYPE_LABEL.get(elem) if elem else None
        if label and label not in ("DOUBLE", "UINT8") and label not in OP_TYPES[op]:
            if op in FLOAT_ONLY_UNARY and label in ("INT32", "INT64", "BOOL"):
                out.append(("error", f"{op} on {label}: TensorRT's unary layer rejects integer/bool input"))
            elif op in NO_INTEGER_INPUT and label in ("INT32", "INT64"):
                out.append(("error", f"{op} on {label}: TensorRT's importer rejects integer input; "
                                     f"Cast to float"))
            else:
                out.append(("warning", f"{op} on {label}: the table lists only {', '.join(OP_TYPES[op])}"))
        elif elem == TensorProto.UINT8 and op == "DequantizeLinear":
            out.append(("warning", "UINT8 DequantizeLinear needs the parser flag "
                                   "kENABLE_UINT8_AND_ASYMMETRIC_QUANTIZATION_DLA (otherwise rejected)"))
    return out


#: TensorRT's pooling windows hold fewer elements than this (MAX_KERNEL_DIMS_PRODUCT; onnx-tensorrt issue 937)
MAX_KERNEL_VOLUME = 100_000


def _check_pool(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    attrs = node_attrs(node)
    kernel = attrs.get("kernel_shape")
    if kernel is not None and len(kernel) not in (1, 2, 3):
        out.append(("error", f"{len(kernel)}D pooling: TensorRT pools 2D or 3D only (1D via a reshape)"))
    if kernel is not None and len(kernel) == 1 and node.input:
        rank = info.ranks.get(node.input[0])
        if rank is not None and rank != 3:
            out.append(("error", f"1D pooling on a rank-{rank} input: TensorRT only reshapes rank-3 input"))
    if kernel is not None and math.prod(kernel) >= MAX_KERNEL_VOLUME:
        out.append(("error", f"kernel {list(kernel)} spans {math.prod(kernel)} elements: TensorRT's pooling layer "
                             f"takes fewer than {MAX_KERNEL_VOLUME} (onnx-tensorrt issue 937: a crash before)"))
    dilations = attrs.get("dilations")
    if dilations and any(d != 1 for d in dilations):
        out.append(("error", f"dilations {list(dilations)}: TensorRT pooling needs dilations empty or all ones"))
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        if node.output[1] in info.used:
            out.append(("error", f"MaxPool's Indices output '{node.output[1]}' is used: TensorRT does not "
                                 f"support it"))
        else:
            out.append(("warning", f"MaxPool declares an Indices output '{node.output[1]}' (unused); TensorRT "
                                   f"does not support it, drop it from the node"))
    return out


def _check_reduce(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    if "axes" in node_attrs(node) or len(node.input) < 2 or not node.input[1]:
        return []
    if node.input[1] in info.constants:
        return []
    return [("error", f"{node.op_type} axes '{node.input[1]}' come from a computed tensor: TensorRT needs an "
                      f"initializer or Constant")]


def _check_resize(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    attrs = node_attrs(node)
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    if coord not in RESIZE_COORD_MODES:
        out.append(("error", f"Resize coordinate_transformation_mode '{coord}' is not supported by TensorRT"))
    if mode not in ("nearest", "linear", "cubic"):
        out.append(("error", f"Resize mode '{mode}' is not supported by TensorRT"))
    elif mode == "cubic":
        out.append(("warning", "Resize mode 'cubic': the table lists nearest and linear only (the importer "
                               "maps cubic, on the last 2 axes)"))
    if mode == "nearest" and nearest not in RESIZE_NEAREST_MODES:
        out.append(("error", f"Resize nearest_mode '{nearest}' is not supported by TensorRT"))
    if attrs.get("antialias", 0):
        out.append(("error", "Resize antialias=1: TensorRT does not support antialiasing"))
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        out.append(("error", f"Resize keep_aspect_ratio_policy '{policy}': TensorRT supports 'stretch' only"))
    scales = node.input[2] if len(node.input) > 2 else ""
    sizes = node.input[3] if len(node.input) > 3 else ""
    axes = attrs.get("axes")
    if axes is not None and scales and not sizes and scales not in info.constants:
        rank = info.ranks.get(node.input[0]) if node.input else None
        if rank is None or [a % rank for a in axes] != list(range(rank)):
            out.append(("error", "Resize with a computed scales tensor and axes other than 0..rank-1: "
                                 "TensorRT needs axes to be the full iota"))
    if scales and not sizes and scales in info.constant_values and mode in ("linear", "cubic"):
        values = info.constant_values[scales].astype(np.float64).ravel().tolist()
        inner = 3 if mode == "linear" else 2
        if any(v != 1.0 for v in values[:-inner]):
            out.append(("error", f"Resize {mode} scales {values}: TensorRT resizes {mode} only on the last "
                                 f"{inner} axes"))
    return out


def _check_cast(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    to = node_attrs(node).get("to")
    if to is None:
        return []
    if to not in TYPE_LABEL:
        return [("error", f"Cast to {TensorProto.DataType.Name(to)}: TensorRT has no such type")]
    if to == TensorProto.DOUBLE:
        return [("warning", "Cast to DOUBLE: TensorRT casts to FP32 instead")]
    return []


def _needs_constant(index: int, what: str, severity: Severity = "error"):
    def check(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
        if len(node.input) > index and node.input[index] and node.input[index] not in info.constants:
            return [(severity, f"{node.op_type} {what} '{node.input[index]}' is computed: TensorRT needs a "
                               f"build-time constant")]
        return []
    return check


def _check_topk(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    if node_attrs(node).get("sorted", 1) != 1:
        out.append(("error", "TopK sorted=0: TensorRT requires sorted=1"))
    k_name = node.input[1] if len(node.input) > 1 else ""
    if k_name in info.constant_values:
        k = int(np.asarray(info.constant_values[k_name]).ravel()[0])
        if k >= TOPK_K_LIMIT:
            out.append(("error", f"TopK K={k}: TensorRT needs K < {TOPK_K_LIMIT}"))
    return out


def _only(attr: str, default, allowed, reason: str):
    """The rule that attribute ``attr`` (``default`` where absent) is one of ``allowed``; an error saying
    ``reason`` (``{}``: the value) otherwise."""
    def check(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
        value = node_attrs(node).get(attr, default)
        return [] if value in allowed else [("error", reason.format(value))]
    return check


def _check_dropout(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    name = node.input[2] if len(node.input) > 2 else ""
    if not name:
        return []
    if name not in info.constants:
        return [("error", "Dropout training_mode is computed: TensorRT needs an initializer equal to False")]
    value = info.constant_values.get(name)
    if value is not None and bool(np.asarray(value).ravel()[0]):
        return [("error", "Dropout training_mode is True: TensorRT supports inference (False) only")]
    return []


def _check_extra_outputs_unused(keep: int, what: str):
    def check(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
        used = [o for o in node.output[keep:] if o and o in info.used]
        if used:
            return [("error", f"{node.op_type} output(s) {used} are used: TensorRT supports {what} only")]
        return []
    return check


def _check_lstm(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    attrs = node_attrs(node)
    out: list[tuple[Severity, str]] = []
    if attrs.get("input_forget", 0) != 0:
        out.append(("error", "LSTM input_forget=1: TensorRT requires 0"))
    if attrs.get("layout", 0) != 0:
        out.append(("error", "LSTM layout=1: TensorRT requires 0"))
    return out


def _check_gridsample(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    rank = info.ranks.get(node.input[0]) if node.input else None
    if rank is not None and rank != 4:
        return [("error", f"GridSample on a rank-{rank} input: TensorRT supports 4D input only")]
    return []


def _check_constant(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    bad = [a.name for a in node.attribute if a.name in ("sparse_value", "value_string", "value_strings")]
    if bad:
        return [("error", f"Constant with {bad[0]}: unsupported by TensorRT")]
    return []


_RULES = {
    "AveragePool": _check_pool,
    "MaxPool": _check_pool,
    "LpPool": _check_pool,
    "Resize": _check_resize,
    "Cast": _check_cast,
    "CumSum": _needs_constant(1, "axis"),
    # Table: "axes must be resolvable to a constant" (a computed axes tensor may still fold), so a warning.
    "Squeeze": _needs_constant(1, "axes", "warning"),
    "Unsqueeze": _needs_constant(1, "axes", "warning"),
    "OneHot": _needs_constant(1, "depth", "warning"),
    "TopK": _check_topk,
    "Pad": _only("mode", "constant", PAD_MODES, "Pad mode '{}' is not supported by TensorRT"),
    "Dropout": _check_dropout,
    "LayerNormalization": _check_extra_outputs_unused(1, "the first output Y"),
    "ScatterND": _only("reduction", "none", ("none",), "ScatterND reduction '{}': TensorRT supports 'none' only"),
    "LSTM": _check_lstm,
    "GridSample": _check_gridsample,
    "Constant": _check_constant,
    **dict.fromkeys(REDUCE_OPS, _check_reduce),
}


def node_attrs(node: onnx.NodeProto) -> dict:
    """:func:`~onnxpoolfix.graph.attributes`, strings decoded (the rules read no body)."""
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in attributes(node).items()}

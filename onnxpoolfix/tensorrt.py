"""TensorRT-readiness lint: which nodes would TensorRT 10's ONNX parser (onnx-tensorrt) reject?

``lint_tensorrt(model)`` walks the whole model (the main graph, the bodies of If/Loop/Scan and the model's
local functions) and returns one :class:`LintFinding` per problem. Only ``severity == "error"`` means "the
parser would reject this node"; ``"warning"`` marks things that parse but change behaviour or depend on the
TensorRT version or build flags.

The lowering code asks the same questions through :data:`SUPPORTED_OPS` ("is op X allowed for target
tensorrt") and :func:`tensorrt_rejects` (the first error reason for one node, or ``None``).

Every rule below comes from the sources named next to :data:`_OP_TYPES`; a rule this module cannot back with
them is not here, because a false "TensorRT rejects this" is worse than a missing one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Literal

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .graph import STANDARD_DOMAINS, default_opset, named_subgraphs, nodes_deep

logger = logging.getLogger(__name__)

Severity = Literal["error", "warning"]

# ---------------------------------------------------------------------------------------------------------
# The support table.
#
# Source: onnx/onnx-tensorrt, docs/operators.md, the revision headed "TensorRT 10.15 supports operators in
# the inclusive range of opset 9 to opset 24" (the Operator Support Matrix: Supported Y/N, Supported Types,
# Restrictions). Attribute/input rules marked "importer" were read in the parser's own source at
# onnx/onnx-tensorrt onnxOpImporters.cpp (commit dd0a3a9f) and importerUtils.cpp (commit fa5aa9f6):
# poolingHelper, reduceTensor, argMinMaxHelper, unaryHelper, convertDtype, and the Resize/Pad/Cast/MatMul/
# Gemm importers. TensorRT 10.0's table covered opset 9..20 and lacked a few rows (e.g. LayerNormalization
# constraints changed across 10.x); the rules here follow 10.15.
# ---------------------------------------------------------------------------------------------------------

# Narrower than the table where the importer refuses what the table lists (importerUtils.cpp, fa5aa9f6):
# activationHelper rejects INT32 for Relu and Gelu; unaryHelper's default branch rejects integer IsNaN.

_F = ("FP32", "FP16", "BF16")
_I = ("INT32", "INT64")
_B = ("BOOL",)
_FI = _F + _I
_FIB = _F + _I + _B
_F32_16 = ("FP32", "FP16")

#: op_type -> the "Supported Types" column of the table, for every row marked Y.
_OP_TYPES: dict[str, tuple[str, ...]] = {
    "Abs": _FI, "Acos": _F, "Acosh": _F, "Add": _FI, "And": _B, "ArgMax": _FI, "ArgMin": _FI,
    "Asin": _F, "Asinh": _F, "Atan": _F, "Atanh": _F, "Attention": _F + ("INT8", "FP8"),
    "AveragePool": _F, "BatchNormalization": _F, "BlackmanWindow": _F32_16,
    "Cast": _FI + ("UINT8",) + _B, "CastLike": _FI + ("UINT8",) + _B, "Ceil": _F, "Celu": _F, "Clip": _F,
    "Concat": _FIB, "Constant": _F + ("FP8", "FP4", "INT4") + _I + _B,
    "ConstantOfShape": _F + ("FP8", "FP4", "INT4") + _I + _B, "Conv": _F, "ConvTranspose": _F,
    "Cos": _F, "Cosh": _F, "CumSum": _F, "DeformConv": _F32_16, "DepthToSpace": _FI,
    "DequantizeLinear": ("INT8", "FP8", "FP4", "INT4"), "Div": _FI, "Dropout": _F, "Einsum": _F, "Elu": _F,
    "Equal": _FI, "Erf": _F, "Exp": _F, "Expand": _FIB, "EyeLike": _FIB, "Flatten": _FIB, "Floor": _F,
    "Gather": _FIB, "GatherElements": _FIB, "GatherND": _FIB, "Gelu": _F + ("INT8", "INT64"), "Gemm": _F,
    "GlobalAveragePool": _F, "GlobalLpPool": _F, "GlobalMaxPool": _F, "Greater": _FI, "GreaterOrEqual": _FI,
    "GridSample": _F32_16, "GroupNormalization": _F, "GRU": _F, "HammingWindow": _F32_16,
    "HannWindow": _F32_16, "HardSigmoid": _F, "HardSwish": _F, "Hardmax": _F, "Identity": _FIB, "If": _FIB,
    "ImageScaler": _F, "InstanceNormalization": _F, "IsInf": _F, "IsNaN": _F, "LayerNormalization": _F,
    "LeakyRelu": _F, "Less": _FI, "LessOrEqual": _FI, "Log": _F, "LogSoftmax": _F, "Loop": _FIB, "LRN": _F,
    "LSTM": _F, "LpNormalization": _F, "LpPool": _F, "MatMul": _F, "Max": _FI, "MaxPool": _F,
    "Mean": _F + ("FP8",) + _I, "MeanVarianceNormalization": _F, "Min": _FI, "Mish": _F32_16, "Mod": _FI,
    "Mul": _FI, "Neg": _FI, "NonMaxSuppression": _F32_16, "NonZero": _F32_16, "Not": _B, "OneHot": _FIB,
    "Or": _B, "Pad": _FI, "ParametricSoftplus": _F, "Pow": _FI, "PRelu": _F, "QuantizeLinear": _F,
    "RandomNormal": _F, "RandomNormalLike": _F, "RandomUniform": _F, "RandomUniformLike": _F, "Range": _FI,
    "Reciprocal": _F, "ReduceL1": _FI, "ReduceL2": _FI, "ReduceLogSum": _FI, "ReduceLogSumExp": _FI,
    "ReduceMax": _FI, "ReduceMean": _FI, "ReduceMin": _FI, "ReduceProd": _FI, "ReduceSum": _FI,
    "ReduceSumSquare": _FI, "Relu": _F + ("INT64",), "Reshape": _FIB, "Resize": _F, "ReverseSequence": _FIB,
    "RMSNormalization": _F, "RNN": _F, "RoiAlign": _F32_16, "RotaryEmbedding": _F, "Round": _F,
    "STFT": ("FP32",), "ScaledTanh": _F, "Scan": _F, "Scatter": _FI, "ScatterElements": _FI,
    "ScatterND": _FI, "Selu": _F, "Shape": _FIB, "Shrink": _FI, "Sigmoid": _F, "Sign": _FI, "Sin": _F,
    "Sinh": _F, "Size": _FIB, "Slice": _FIB, "Softmax": _F, "Softplus": _F, "Softsign": _F,
    "SpaceToDepth": _FI, "Split": _FIB, "Sqrt": _F, "Squeeze": _FIB, "Sub": _FI, "Sum": _FI, "Tan": _F,
    "Tanh": _F, "TensorScatter": _F + ("INT32",), "ThresholdedRelu": _F, "Tile": _FIB, "TopK": _FI,
    "Transpose": _FIB, "Trilu": _FIB, "Unsqueeze": _FIB, "Upsample": _F, "Where": _FIB, "Xor": _B,
}

#: Rows of the table marked N (listed to give a precise reason; any op absent from _OP_TYPES is rejected).
_OPS_MARKED_UNSUPPORTED = frozenset({
    "AffineGrid", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Col2Im",
    "CenterCropPad", "Compress", "ConcatFromSequence", "ConvInteger", "DFT", "Det", "DynamicQuantizeLinear",
    "ImageDecoder", "MatMulInteger", "MaxRoiPool", "MaxUnpool", "MelWeightMatrix", "Multinomial",
    "NegativeLogLikelihoodLoss", "Optional", "OptionalGetElement", "OptionalHasElement", "QLinearConv",
    "QLinearMatMul", "RegexFullMatch", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
    "SequenceInsert", "SequenceLength", "SequenceMap", "SoftmaxCrossEntropyLoss", "SplitToSequence",
    "StringConcat", "StringNormalizer", "StringSplit", "TfIdfVectorizer", "Unique",
})

#: Standard-domain op_types TensorRT 10's ONNX parser imports (the table's Y rows).
SUPPORTED_OPS: frozenset[str] = frozenset(_OP_TYPES)

#: The default-domain opset range the 10.15 table states (10.0: 9..20).
SUPPORTED_OPSET_RANGE = (9, 24)

_STANDARD_DOMAINS = STANDARD_DOMAINS

# ONNX element types the parser can represent (importer: convertDtype), as the table names them.
# DOUBLE is accepted but computed as FP32 (table note: cast down, clamped to +-FLT_MAX).
_TYPE_LABEL: dict[int, str] = {
    TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16", TensorProto.BFLOAT16: "BF16",
    TensorProto.INT32: "INT32", TensorProto.INT64: "INT64", TensorProto.INT8: "INT8",
    TensorProto.UINT8: "UINT8", TensorProto.BOOL: "BOOL", TensorProto.FLOAT8E4M3FN: "FP8",
    TensorProto.INT4: "INT4", TensorProto.FLOAT4E2M1: "FP4", TensorProto.DOUBLE: "DOUBLE",
}

# Unary ops the importer builds with unaryHelper's default rule: no BOOL, INT32, INT64 or UINT8 input.
_FLOAT_ONLY_UNARY = frozenset({
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Log",
    "Round", "Sin", "Sinh", "Sqrt", "Tan",
})
# Importers that call checkNotInvalidType(input0, {"INT32", "INT64"}).
_NO_INTEGER_INPUT = frozenset({"MatMul", "Gemm", "PRelu"})
# Reductions whose axes, when given as an input, must be weights (importer: reduceTensor).
_REDUCE_OPS = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare",
})
# Ops that read UINT8 (the table's note: UINT8 only as network input or output, so cast it first).
_UINT8_READERS = frozenset({"Cast", "CastLike"})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})

_RESIZE_COORD_MODES = frozenset({"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric",
                                 "align_corners"})
_RESIZE_NEAREST_MODES = frozenset({"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"})
_PAD_MODES = frozenset({"constant", "reflect", "edge", "wrap"})
_TOPK_K_LIMIT = 3840


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


@dataclass
class GraphInfo:
    """What the checks need to know about the graph around a node.

    ``elem_types``: tensor name -> ONNX element type, where known. ``constants``: names the parser sees as
    weights (initializers and Constant outputs, outer scopes included). ``constant_values``: their values,
    where cheap to read. ``used``: names some node reads or the graph outputs. ``functions``: (domain, name)
    of the model's local functions, which the parser inlines.
    """

    elem_types: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    constants: set[str] = field(default_factory=set)
    constant_values: dict[str, np.ndarray] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    functions: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def from_model(cls, model: onnx.ModelProto) -> "GraphInfo":
        """Info for the main graph of ``model``, with shape inference run on a copy (failures tolerated)."""
        return cls.from_graph(_inferred(model).graph,
                              functions=frozenset((f.domain, f.name) for f in model.functions))

    @classmethod
    def from_graph(cls, graph: onnx.GraphProto, outer: "GraphInfo | None" = None,
                   functions: frozenset[tuple[str, str]] | None = None) -> "GraphInfo":
        info = cls(
            elem_types=dict(outer.elem_types) if outer else {},
            ranks=dict(outer.ranks) if outer else {},
            constants=set(outer.constants) if outer else set(),
            constant_values=dict(outer.constant_values) if outer else {},
            functions=functions if functions is not None else (outer.functions if outer else frozenset()),
        )
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            if vi.type.HasField("tensor_type"):
                tt = vi.type.tensor_type
                if tt.elem_type:
                    info.elem_types[vi.name] = tt.elem_type
                if tt.HasField("shape"):
                    info.ranks[vi.name] = len(tt.shape.dim)
        for init in graph.initializer:
            info.constants.add(init.name)
            info.elem_types.setdefault(init.name, init.data_type)
            info.ranks.setdefault(init.name, len(init.dims))
            _remember_value(info, init.name, init)
        for sparse in graph.sparse_initializer:
            info.constants.add(sparse.values.name)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in _STANDARD_DOMAINS and node.output:
                info.constants.add(node.output[0])
                for attr in node.attribute:
                    if attr.name == "value" and attr.HasField("t"):
                        info.elem_types.setdefault(node.output[0], attr.t.data_type)
                        _remember_value(info, node.output[0], attr.t)
                    elif attr.name in ("value_int", "value_ints"):
                        info.elem_types.setdefault(node.output[0], TensorProto.INT64)
                        info.constant_values[node.output[0]] = np.array(
                            attr.i if attr.name == "value_int" else list(attr.ints), dtype=np.int64)
                    elif attr.name in ("value_float", "value_floats"):
                        info.elem_types.setdefault(node.output[0], TensorProto.FLOAT)
        info.used = {o.name for o in graph.output}
        for node in nodes_deep(graph.node):
            info.used.update(node.input)
        info.used.discard("")
        return info


# ---------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------

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
    inferred = _inferred(model)
    info = GraphInfo.from_graph(inferred.graph, functions=frozenset((f.domain, f.name) for f in model.functions))
    _lint_graph(inferred.graph, info, findings, where="")
    for func in model.functions:
        finfo = GraphInfo(functions=info.functions)
        finfo.used = {n for node in func.node for n in node.input} | set(func.output)
        for node in func.node:
            if node.op_type == "Constant" and node.output:
                finfo.constants.add(node.output[0])
        for node in func.node:
            _add(findings, node, _check_node(node, finfo), where=f" (in local function {func.name})")
    seen: set[LintFinding] = set()
    unique = [f for f in findings if not (f in seen or seen.add(f))]
    return sorted(unique, key=lambda f: f.severity != "error")


def tensorrt_rejects(node: onnx.NodeProto, graph_info: GraphInfo) -> str | None:
    """The first reason TensorRT's ONNX parser would reject ``node``, or None if it would import it.

    ``graph_info`` describes the graph the node sits in (see :meth:`GraphInfo.from_model`); warnings are not
    rejections and are not reported here.
    """
    for severity, reason in _check_node(node, graph_info):
        if severity == "error":
            return reason
    return None


# ---------------------------------------------------------------------------------------------------------
# Walking
# ---------------------------------------------------------------------------------------------------------

def _lint_graph(graph: onnx.GraphProto, info: GraphInfo, findings: list[LintFinding], where: str) -> None:
    for node in graph.node:
        _add(findings, node, _check_node(node, info), where)
        for attr_name, sub in named_subgraphs(node):
            sub_info = GraphInfo.from_graph(sub, outer=info)
            _lint_graph(sub, sub_info, findings, where=f"{where} (in {node.op_type}.{attr_name})")


def _add(findings: list[LintFinding], node: onnx.NodeProto, results: Iterable[tuple[Severity, str]],
         where: str) -> None:
    label = node.name or (f"-> {node.output[0]}" if node.output else "")
    for severity, reason in results:
        findings.append(LintFinding(label, node.op_type, node.domain, reason + where, severity))


# ---------------------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------------------

def _check_node(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    op = node.op_type
    if node.domain not in _STANDARD_DOMAINS:
        if (node.domain, op) in info.functions:
            return out  # inlined by the parser; its body is linted separately
        if node.domain == "org.pytorch.aten":
            out.append(("error", "custom domain 'org.pytorch.aten' (a PyTorch ATen fallback op): TensorRT's "
                                 "ONNX parser has no importer for it"))
        else:
            out.append(("error", f"custom domain '{node.domain}': no TensorRT ONNX importer; only a TensorRT "
                                 f"plugin registered as '{op}' could serve it"))
        return out
    if (node.domain, op) in info.functions:
        return out
    if op not in _OP_TYPES:
        if op == "ATen":
            out.append(("error", "ATen fallback op (older PyTorch exporters): not an ONNX operator "
                                 "TensorRT can import"))
        elif op in _OPS_MARKED_UNSUPPORTED:
            out.append(("error", f"{op} is marked unsupported in TensorRT's ONNX operator table"))
        else:
            out.append(("error", f"{op} is not in TensorRT's ONNX operator table"))
        return out
    out += _check_types(node, info)
    rule = _RULES.get(op)
    if rule is not None:
        out += rule(node, info)
    if op in _REDUCE_OPS:
        out += _check_reduce(node, info)
    return out


def _check_types(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    op = node.op_type
    names = [n for n in list(node.input) + list(node.output) if n]
    for name in dict.fromkeys(names):
        elem = info.elem_types.get(name)
        if elem is None or elem == TensorProto.UNDEFINED:
            continue
        tname = TensorProto.DataType.Name(elem)
        if elem not in _TYPE_LABEL:
            out.append(("error", f"tensor '{name}' is {tname}, a type TensorRT cannot represent"))
        elif elem == TensorProto.DOUBLE:
            out.append(("warning", f"tensor '{name}' is DOUBLE: TensorRT computes it as FP32, clamping to "
                                   f"+-FLT_MAX"))
        elif (elem == TensorProto.UINT8 and name in node.input and op not in _UINT8_READERS
              and op not in ("QuantizeLinear", "DequantizeLinear")):
            out.append(("error", f"input '{name}' is UINT8, which TensorRT accepts only as a network "
                                 f"input/output; Cast it first"))
    # The table's Supported Types column, checked on the data input (input 0).
    if node.input and node.input[0] and op not in _CONTROL_FLOW:
        elem = info.elem_types.get(node.input[0])
        label = _TYPE_LABEL.get(elem) if elem else None
        if label and label not in ("DOUBLE", "UINT8") and label not in _OP_TYPES[op]:
            if op in _FLOAT_ONLY_UNARY and label in ("INT32", "INT64", "BOOL"):
                out.append(("error", f"{op} on {label}: TensorRT's unary layer rejects integer/bool input"))
            elif op in _NO_INTEGER_INPUT and label in ("INT32", "INT64"):
                out.append(("error", f"{op} on {label}: TensorRT's importer rejects integer input; "
                                     f"Cast to float"))
            else:
                out.append(("warning", f"{op} on {label}: the table lists only {', '.join(_OP_TYPES[op])}"))
        elif elem == TensorProto.UINT8 and op == "DequantizeLinear":
            out.append(("warning", "UINT8 DequantizeLinear needs the parser flag "
                                   "kENABLE_UINT8_AND_ASYMMETRIC_QUANTIZATION_DLA (otherwise rejected)"))
    return out


def _check_pool(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    attrs = _attrs(node)
    kernel = attrs.get("kernel_shape")
    if kernel is not None and len(kernel) not in (1, 2, 3):
        out.append(("error", f"{len(kernel)}D pooling: TensorRT pools 2D or 3D only (1D via a reshape)"))
    if kernel is not None and len(kernel) == 1 and node.input:
        rank = info.ranks.get(node.input[0])
        if rank is not None and rank != 3:
            out.append(("error", f"1D pooling on a rank-{rank} input: TensorRT only reshapes rank-3 input"))
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
    if "axes" in _attrs(node) or len(node.input) < 2 or not node.input[1]:
        return []
    if node.input[1] in info.constants:
        return []
    return [("error", f"{node.op_type} axes '{node.input[1]}' come from a computed tensor: TensorRT needs an "
                      f"initializer or Constant")]


def _check_resize(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    attrs = _attrs(node)
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    if coord not in _RESIZE_COORD_MODES:
        out.append(("error", f"Resize coordinate_transformation_mode '{coord}' is not supported by TensorRT"))
    if mode not in ("nearest", "linear", "cubic"):
        out.append(("error", f"Resize mode '{mode}' is not supported by TensorRT"))
    elif mode == "cubic":
        out.append(("warning", "Resize mode 'cubic': the table lists nearest and linear only (the importer "
                               "maps cubic, on the last 2 axes)"))
    if mode == "nearest" and nearest not in _RESIZE_NEAREST_MODES:
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
    to = _attrs(node).get("to")
    if to is None:
        return []
    if to not in _TYPE_LABEL:
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


def _check_squeeze(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    # Table: "axes must be resolvable to a constant" (a computed axes tensor may still fold), so a warning.
    return _needs_constant(1, "axes", "warning")(node, info)


def _check_topk(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    out: list[tuple[Severity, str]] = []
    if _attrs(node).get("sorted", 1) != 1:
        out.append(("error", "TopK sorted=0: TensorRT requires sorted=1"))
    k_name = node.input[1] if len(node.input) > 1 else ""
    if k_name in info.constant_values:
        k = int(np.asarray(info.constant_values[k_name]).ravel()[0])
        if k >= _TOPK_K_LIMIT:
            out.append(("error", f"TopK K={k}: TensorRT needs K < {_TOPK_K_LIMIT}"))
    return out


def _check_pad(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    mode = _attrs(node).get("mode", "constant")
    if mode not in _PAD_MODES:
        return [("error", f"Pad mode '{mode}' is not supported by TensorRT")]
    return []


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


def _check_scatternd(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    reduction = _attrs(node).get("reduction", "none")
    if reduction != "none":
        return [("error", f"ScatterND reduction '{reduction}': TensorRT supports 'none' only")]
    return []


def _check_lstm(node: onnx.NodeProto, info: GraphInfo) -> list[tuple[Severity, str]]:
    attrs = _attrs(node)
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
    "Squeeze": _check_squeeze,
    "Unsqueeze": _check_squeeze,
    "OneHot": _needs_constant(1, "depth", "warning"),
    "TopK": _check_topk,
    "Pad": _check_pad,
    "Dropout": _check_dropout,
    "LayerNormalization": _check_extra_outputs_unused(1, "the first output Y"),
    "ScatterND": _check_scatternd,
    "LSTM": _check_lstm,
    "GridSample": _check_gridsample,
    "Constant": _check_constant,
}


# ---------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------

def _attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            continue
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception as err:  # partial info is still useful; the lint must not fail on odd models
        logger.debug("shape inference failed, linting with declared types only: %s", err)
        return model


def _remember_value(info: GraphInfo, name: str, tensor: onnx.TensorProto) -> None:
    """Keep the value of a small constant (scales, K, axes); big or unreadable ones stay unknown."""
    if int(np.prod(list(tensor.dims), dtype=np.int64)) > 64:
        return
    try:
        value = numpy_helper.to_array(tensor)
    except Exception:  # external data or an exotic type: the value stays unknown
        return
    if value.size:
        info.constant_values[name] = value

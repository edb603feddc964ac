"""TensorRT 10's ONNX parser support table: which ops, which input types, which opsets (its sources are
named below). Data only."""
from __future__ import annotations

from onnx import TensorProto

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

F = ("FP32", "FP16", "BF16")
I = ("INT32", "INT64")
B = ("BOOL",)
FI = F + I
FIB = F + I + B
F32_16 = ("FP32", "FP16")

#: op_type -> the "Supported Types" column of the table, for every row marked Y.
OP_TYPES: dict[str, tuple[str, ...]] = {
    "Abs": FI, "Acos": F, "Acosh": F, "Add": FI, "And": B, "ArgMax": FI, "ArgMin": FI,
    "Asin": F, "Asinh": F, "Atan": F, "Atanh": F, "Attention": F + ("INT8", "FP8"),
    "AveragePool": F, "BatchNormalization": F, "BlackmanWindow": F32_16,
    "Cast": FI + ("UINT8",) + B, "CastLike": FI + ("UINT8",) + B, "Ceil": F, "Celu": F, "Clip": F,
    "Concat": FIB, "Constant": F + ("FP8", "FP4", "INT4") + I + B,
    "ConstantOfShape": F + ("FP8", "FP4", "INT4") + I + B, "Conv": F, "ConvTranspose": F,
    "Cos": F, "Cosh": F, "CumSum": F, "DeformConv": F32_16, "DepthToSpace": FI,
    "DequantizeLinear": ("INT8", "FP8", "FP4", "INT4"), "Div": FI, "Dropout": F, "Einsum": F, "Elu": F,
    "Equal": FI, "Erf": F, "Exp": F, "Expand": FIB, "EyeLike": FIB, "Flatten": FIB, "Floor": F,
    "Gather": FIB, "GatherElements": FIB, "GatherND": FIB, "Gelu": F + ("INT8", "INT64"), "Gemm": F,
    "GlobalAveragePool": F, "GlobalLpPool": F, "GlobalMaxPool": F, "Greater": FI, "GreaterOrEqual": FI,
    "GridSample": F32_16, "GroupNormalization": F, "GRU": F, "HammingWindow": F32_16,
    "HannWindow": F32_16, "HardSigmoid": F, "HardSwish": F, "Hardmax": F, "Identity": FIB, "If": FIB,
    "ImageScaler": F, "InstanceNormalization": F, "IsInf": F, "IsNaN": F, "LayerNormalization": F,
    "LeakyRelu": F, "Less": FI, "LessOrEqual": FI, "Log": F, "LogSoftmax": F, "Loop": FIB, "LRN": F,
    "LSTM": F, "LpNormalization": F, "LpPool": F, "MatMul": F, "Max": FI, "MaxPool": F,
    "Mean": F + ("FP8",) + I, "MeanVarianceNormalization": F, "Min": FI, "Mish": F32_16, "Mod": FI,
    "Mul": FI, "Neg": FI, "NonMaxSuppression": F32_16, "NonZero": F32_16, "Not": B, "OneHot": FIB,
    "Or": B, "Pad": FI, "ParametricSoftplus": F, "Pow": FI, "PRelu": F, "QuantizeLinear": F,
    "RandomNormal": F, "RandomNormalLike": F, "RandomUniform": F, "RandomUniformLike": F, "Range": FI,
    "Reciprocal": F, "ReduceL1": FI, "ReduceL2": FI, "ReduceLogSum": FI, "ReduceLogSumExp": FI,
    "ReduceMax": FI, "ReduceMean": FI, "ReduceMin": FI, "ReduceProd": FI, "ReduceSum": FI,
    "ReduceSumSquare": FI, "Relu": F + ("INT64",), "Reshape": FIB, "Resize": F, "ReverseSequence": FIB,
    "RMSNormalization": F, "RNN": F, "RoiAlign": F32_16, "RotaryEmbedding": F, "Round": F,
    "STFT": ("FP32",), "ScaledTanh": F, "Scan": F, "Scatter": FI, "ScatterElements": FI,
    "ScatterND": FI, "Selu": F, "Shape": FIB, "Shrink": FI, "Sigmoid": F, "Sign": FI, "Sin": F,
    "Sinh": F, "Size": FIB, "Slice": FIB, "Softmax": F, "Softplus": F, "Softsign": F,
    "SpaceToDepth": FI, "Split": FIB, "Sqrt": F, "Squeeze": FIB, "Sub": FI, "Sum": FI, "Tan": F,
    "Tanh": F, "TensorScatter": F + ("INT32",), "ThresholdedRelu": F, "Tile": FIB, "TopK": FI,
    "Transpose": FIB, "Trilu": FIB, "Unsqueeze": FIB, "Upsample": F, "Where": FIB, "Xor": B,
}

#: Rows of the table marked N (listed to give a precise reason; any op absent from OP_TYPES is rejected).
OPS_MARKED_UNSUPPORTED = frozenset({
    "AffineGrid", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Col2Im",
    "CenterCropPad", "Compress", "ConcatFromSequence", "ConvInteger", "DFT", "Det", "DynamicQuantizeLinear",
    "ImageDecoder", "MatMulInteger", "MaxRoiPool", "MaxUnpool", "MelWeightMatrix", "Multinomial",
    "NegativeLogLikelihoodLoss", "Optional", "OptionalGetElement", "OptionalHasElement", "QLinearConv",
    "QLinearMatMul", "RegexFullMatch", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
    "SequenceInsert", "SequenceLength", "SequenceMap", "SoftmaxCrossEntropyLoss", "SplitToSequence",
    "StringConcat", "StringNormalizer", "StringSplit", "TfIdfVectorizer", "Unique",
})

#: Standard-domain op_types TensorRT 10's ONNX parser imports (the table's Y rows).
SUPPORTED_OPS: frozenset[str] = frozenset(OP_TYPES)

#: The default-domain opset range the 10.15 table states (10.0: 9..20).
SUPPORTED_OPSET_RANGE = (9, 24)

# ONNX element types the parser can represent (importer: convertDtype), as the table names them.
# DOUBLE is accepted but computed as FP32 (table note: cast down, clamped to +-FLT_MAX).
TYPE_LABEL: dict[int, str] = {
    TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16", TensorProto.BFLOAT16: "BF16",
    TensorProto.INT32: "INT32", TensorProto.INT64: "INT64", TensorProto.INT8: "INT8",
    TensorProto.UINT8: "UINT8", TensorProto.BOOL: "BOOL", TensorProto.FLOAT8E4M3FN: "FP8",
    TensorProto.INT4: "INT4", TensorProto.FLOAT4E2M1: "FP4", TensorProto.DOUBLE: "DOUBLE",
}

# Unary ops the importer builds with unaryHelper's default rule: no BOOL, INT32, INT64 or UINT8 input.
FLOAT_ONLY_UNARY = frozenset({
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Log",
    "Round", "Sin", "Sinh", "Sqrt", "Tan",
})

# Importers that call checkNotInvalidType(input0, {"INT32", "INT64"}).
NO_INTEGER_INPUT = frozenset({"MatMul", "Gemm", "PRelu"})

# Reductions whose axes, when given as an input, must be weights (importer: reduceTensor).
REDUCE_OPS = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare",
})

# Ops that read UINT8 (the table's note: UINT8 only as network input or output, so cast it first).
UINT8_READERS = frozenset({"Cast", "CastLike"})

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})

RESIZE_COORD_MODES = frozenset({"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric",
                                 "align_corners"})

RESIZE_NEAREST_MODES = frozenset({"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"})

PAD_MODES = frozenset({"constant", "reflect", "edge", "wrap"})

TOPK_K_LIMIT = 3840

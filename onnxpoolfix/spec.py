"""The records every stage passes along: a found node (:class:`PoolNode`) and the same node with its
shapes, dtype, opset and target (:class:`PoolSpec`). Front ends produce them, the planner and the lowerings
read them. A leaf module: it imports only onnx.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from onnx import TensorProto

Dim = int | str | None  # int: static; str: a symbolic name; None: unknown
#: where a node's graph is: (node index, attribute index, graph index in the attribute) per level from the
#: top-level graph down to the If/Loop/Scan body holding it; () for the top-level graph
BodyPath = tuple[tuple[int, int, int], ...]

SUPPORTED_DTYPES = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.DOUBLE: "float64",
}


@dataclass(frozen=True)
class InputDim:
    """An output-size entry that the exporter computed as ``Shape(input)[axis]``.

    This is how ``AdaptiveAvgPool2d((None, 7))`` is exported when the input has dynamic axes: the ``None``
    follows the input's length on that axis at runtime.
    """

    axis: int


@dataclass(frozen=True)
class RuntimeDim:
    """An output-size entry the graph computes at run time from the input's size: entry ``index`` of the
    node's size tensor ``tensor`` (``F.interpolate(x, scale_factor=0.6, mode="area")`` with dynamic H/W is
    ``Floor(Shape(x)[2] * 0.6)``; ``F.adaptive_avg_pool2d(x, (x.shape[2] // 2, 5))`` a Div). The lowering
    reads that tensor (cast to int64) instead of a constant; its output dim is the symbolic ``str(self)``."""

    tensor: str
    index: int
    # the size tensor is a 0-d scalar (the dynamo exporter's ``trunc``, a Range's limit): read as it is
    scalar: bool = False

    def __str__(self) -> str:
        return self.tensor if self.scalar else f"{self.tensor}[{self.index}]"


@dataclass(frozen=True)
class PoolNode:
    """One leftover adaptive pooling node, as found in the graph (before any shape is known)."""

    index: int  # position in graph.node
    name: str  # the node's name, or a stable synthesized one when the node has none
    op: str  # e.g. "adaptive_avg_pool2d"
    kind: str  # "avg" | "max"
    rank: int  # number of pooled (trailing) axes: 1, 2 or 3
    encoding: str  # "aten-op" | "ATen-attr" | "standard" (an exporter pool) | "dynamo" (a decomposition)
    input: str
    output: str
    indices_output: str | None  # max pooling's int64 indices output, only when something reads it
    unused_outputs: tuple[str, ...]  # outputs nothing reads (dropped by the rewrite)
    # InputDim: follows the input's length on that axis; RuntimeDim: computed by the graph at run time
    output_size: tuple[int | InputDim | RuntimeDim, ...]
    size_input: str | None  # the tensor that carried the output size (None for the attribute form)
    # why a front end took it for adaptive pooling where it is no such node (the dynamo front end: "metadata:
    # ...AdaptiveAvgPool2d", "stack trace: <line>", "structure"); "" for a leftover, which says so itself
    evidence: str = ""
    # other nodes whose outputs the lowering writes, their places left empty (the index arithmetic the dynamo
    # exporter writes after a MaxPool: the lowering writes torch's indices itself)
    replaces: tuple[int, ...] = ()
    body: BodyPath = ()  # the graph ``index`` counts in: () the top level, else an If/Loop/Scan body
    # (tensor, perm): ``input`` is no tensor of the graph but this Transpose of one, which the rewrite writes
    # first (a model's permute torch fused into its decomposition's Transpose: the dynamo front end)
    input_perm: tuple[str, tuple[int, ...]] | None = None

    @property
    def label(self) -> str:
        return f"{self.op} node '{self.name}'"


@dataclass(frozen=True)
class PoolSpec:
    """A leftover node with everything the lowerings need: shapes, dtype, opset, target."""

    node: PoolNode
    input_shape: tuple[Dim, ...]
    output_shape: tuple[Dim, ...]
    dtype: int  # onnx TensorProto elem type of the input
    opset: int  # the model's default-domain opset
    target: str = "onnxruntime"

    @property
    def kind(self) -> str:
        return self.node.kind

    @property
    def k(self) -> int:
        """Number of pooled (trailing) axes."""
        return self.node.rank

    @property
    def ndim(self) -> int:
        return len(self.input_shape)

    @property
    def lead(self) -> tuple[Dim, ...]:
        """The non-pooled leading dims (batch, channels, ...)."""
        return self.input_shape[: self.ndim - self.k]

    @property
    def axes(self) -> tuple[int, ...]:
        """Absolute indices of the pooled axes."""
        return tuple(range(self.ndim - self.k, self.ndim))

    @property
    def in_sizes(self) -> tuple[Dim, ...]:
        return self.input_shape[self.ndim - self.k:]

    @property
    def out_sizes(self) -> tuple[Dim, ...]:
        return self.output_shape[self.ndim - self.k:]

    @property
    def static(self) -> bool:
        """True when every pooled axis' input length is known (the leading dims may be symbolic)."""
        return all(isinstance(d, int) for d in self.in_sizes) and all(isinstance(d, int) for d in self.out_sizes)

    @property
    def follows_input(self) -> tuple[bool, ...]:
        """Per pooled axis: the output size is the input's own size (``None`` in torch)."""
        return tuple(isinstance(s, InputDim) for s in self.node.output_size)

    @property
    def runtime_sizes(self) -> bool:
        """Some output size is computed by the graph at run time (:class:`RuntimeDim`)."""
        return any(isinstance(s, RuntimeDim) for s in self.node.output_size)

    @property
    def dtype_name(self) -> str:
        return SUPPORTED_DTYPES.get(self.dtype, dtype_name(self.dtype).lower())

    @property
    def output_types(self) -> dict[str, tuple[int, tuple[Dim, ...]]]:
        """``{tensor: (elem type, shape)}`` of the node's outputs: the pooled one, and its int64 indices."""
        indices = {self.node.indices_output: (TensorProto.INT64, self.output_shape)} if self.node.indices_output else {}
        return {self.node.output: (self.dtype, self.output_shape), **indices}


def bind_runtime_sizes(spec: PoolSpec, values: dict[str, Sequence[int]]) -> PoolSpec:
    """``spec`` with each :class:`RuntimeDim` entry replaced by its value in one run (``values``: the size
    tensors as fetched, by name): what the reference compares that run's output with."""
    if not spec.runtime_sizes:
        return spec
    import numpy as np

    sizes = tuple(int(np.asarray(values[s.tensor]).reshape(-1)[s.index]) if isinstance(s, RuntimeDim) else s
                  for s in spec.node.output_size)
    lead = len(spec.input_shape) - spec.k
    out = tuple(spec.output_shape[:lead]) + tuple(n if isinstance(s, RuntimeDim) else d for s, n, d in zip(
        spec.node.output_size, sizes, spec.output_shape[lead:]))
    return replace(spec, node=replace(spec.node, output_size=sizes), output_shape=out)


def dtype_name(elem: int) -> str:
    """``TensorProto.DataType.Name``, also for values no onnx version defines (corrupt files)."""
    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return f"unknown dtype {elem}"

"""What the lint knows about the graph around a node: element types and ranks (declared, or from onnx
shape inference on the model's light copy, weights' bytes left out), constants and their small values,
the names something reads, and the model's local functions. Outer scopes are visible in If/Loop bodies."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..graph import STANDARD_DOMAINS, read_names
from ..graph.shapes import light_copy, onnx_inferred


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
        return cls.from_graph(inferred_model(model).graph,
                              functions=frozenset((f.domain, f.name) for f in model.functions))

    @classmethod
    def from_graph(cls, graph: onnx.GraphProto, outer: "GraphInfo | None" = None,
                   functions: frozenset[tuple[str, str]] | None = None) -> "GraphInfo":
        outer = outer or cls()
        info = cls(dict(outer.elem_types), dict(outer.ranks), set(outer.constants), dict(outer.constant_values),
                   functions=outer.functions if functions is None else functions)
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
            remember_value(info, init.name, init)
        for sparse in graph.sparse_initializer:
            info.constants.add(sparse.values.name)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in STANDARD_DOMAINS and node.output:
                info.constants.add(node.output[0])
                for attr in node.attribute:
                    if attr.name == "value" and attr.HasField("t"):
                        info.elem_types.setdefault(node.output[0], attr.t.data_type)
                        remember_value(info, node.output[0], attr.t)
                    elif attr.name in ("value_int", "value_ints"):
                        info.elem_types.setdefault(node.output[0], TensorProto.INT64)
                        info.constant_values[node.output[0]] = np.array(
                            attr.i if attr.name == "value_int" else list(attr.ints), dtype=np.int64)
                    elif attr.name in ("value_float", "value_floats"):
                        info.elem_types.setdefault(node.output[0], TensorProto.FLOAT)
        info.used = read_names(graph) | {o.name for o in graph.output}
        return info


def inferred_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with onnx's inferred value_info, inferred on its light copy (the weights' bytes are never
    copied or serialised for it, as in :func:`onnxpoolfix.graph.shapes.infer`)."""
    inferred = onnx_inferred(light_copy(model), " for the lint", data_prop=False)
    return model if inferred is None else inferred  # the lint must not fail on odd models: declared types then


def remember_value(info: GraphInfo, name: str, tensor: onnx.TensorProto) -> None:
    """Keep the value of a small constant (scales, K, axes); big or unreadable ones stay unknown."""
    if int(np.prod(list(tensor.dims), dtype=np.int64)) > 64:
        return
    try:
        value = numpy_helper.to_array(tensor)
    except Exception:  # external data or an exotic type: the value stays unknown
        return
    if value.size:
        info.constant_values[name] = value

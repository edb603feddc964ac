"""The read-once floor: onnxruntime ReduceSum over the input (reads it once, writes one number)."""
from __future__ import annotations

from typing import Sequence

import onnx
from onnx import TensorProto, helper


def floor_model(shape: Sequence[int]) -> onnx.ModelProto:
    """ReduceSum over every axis: reads the input once, writes one number."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    g = helper.make_graph([node], "floor", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


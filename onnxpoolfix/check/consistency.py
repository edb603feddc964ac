"""The layers after the replaced nodes, without running them: do they take what the replacements compute?

The check runs only the part of OUT that computes the replaced nodes (:mod:`.cut`). A replacement whose output
size rests on a reading (a frozen pool sized from a given traced shape) can be exact and still not fit the layers
after it (an Add with a fixed-shape bias), which would leave OUT running at no size. This asks onnx's strict
shape inference, on the input file's graph without its weights, with each replaced node's output fed in at the
shape its replacement computes: the replacements themselves are proven by running them, so only the layers
around them are inferred. Where the input file's graph does not infer strictly as it is (ops beyond onnx's
inference), nothing is concluded.
"""
from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto

from ..graph import keep_only
from ..graph.shapes import PoolSpec, make_value_info

__all__ = ["strict_inference_error", "layers_after_refuse"]


def strict_inference_error(light: onnx.ModelProto) -> str | None:
    """onnx's strict shape inference of ``light`` (a weight-free copy, changed here) with its declared
    intermediate and output shapes dropped (onnxruntime only warns where those differ; what is asked is whether
    every op takes what it is fed), without data propagation (the weights' bytes are not there): its error on one
    line, or None where it infers cleanly."""
    del light.graph.value_info[:]
    for vi in light.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    try:
        onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except Exception as e:  # noqa: BLE001 - onnx's own words are the answer
        return " ".join(str(e).split())[:300]
    return None


def layers_after_refuse(input_light: onnx.ModelProto, specs: Sequence[PoolSpec]) -> str | None:
    """onnx's error where the input file's graph infers strictly, but not with each replaced node's output fed in
    at the shape its replacement computes; None otherwise."""
    as_is = onnx.ModelProto()
    as_is.CopyFrom(input_light)
    if strict_inference_error(as_is) is not None:
        return None
    fed = {s.node.output: (s.dtype, s.output_shape) for s in specs}
    fed.update({s.node.indices_output: (TensorProto.INT64, s.output_shape) for s in specs if s.node.indices_output})
    light = onnx.ModelProto()
    light.CopyFrom(input_light)
    keep_only(light.graph.node, lambda n: not any(o in fed for o in n.output))
    for name, (elem, dims) in fed.items():
        light.graph.input.append(make_value_info(name, elem, [d if isinstance(d, (int, str)) else None
                                                              for d in dims]))
    return strict_inference_error(light)

"""The regions of an end that pool past an op of the model's own (frontends/dynamo/crops.py), on hand-built graphs:
a mean of the crop (PSP's 1x1 bin after ``f[:, :, :h, :w]``) selects no windows past the crop and is left as
written, as without the crop (review40 F6: it was a frozen suspect, the whole file refused); a region whose only
reading is past the crop, where the crop's result does not reach every data path into the end, stays refused
(found only by the region through the crop, which is never taken)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxpoolfix.frontends.base import Suspect
from onnxpoolfix.frontends.dynamo.dataflow import DataflowGraph, LazyInfo, find_candidate

_POOL = "['m.Net', 'torch.nn.modules.pooling.AdaptiveAvgPool2d', 'aten.mean.dim']"  # the metadata of each node


def _model(nodes, y_dims, inits):
    for n in nodes:
        n.metadata_props.add(key="pkg.torch.onnx.class_hierarchy", value=_POOL)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_dims)],
                              [numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _candidate(model):
    g = DataflowGraph(model.graph)
    return find_candidate(g, len(g.nodes) - 1, LazyInfo(model))


def test_a_mean_of_a_crop_is_no_decomposition():
    model = _model([helper.make_node("Slice", ["x", "zero", "eight", "two"], ["crop"]),
                    helper.make_node("ReduceMean", ["crop", "axes"], ["y"], keepdims=1)],
                   [1, 4, 1, 1], {"zero": [0], "eight": [8], "two": [2], "axes": [2, 3]})
    assert _candidate(model) is None  # the ReduceMean stays as it is: exact at every size


def test_a_region_only_through_the_crop_stays_refused():
    # windows gathered from the crop and from x itself: the crop's result reaches one of the two data paths only,
    # so no region starts past it; the region from x pools past the crop and is never taken
    model = _model([helper.make_node("Slice", ["x", "zero", "eight", "two"], ["crop"]),
                    helper.make_node("Gather", ["crop", "table"], ["a"], axis=2),
                    helper.make_node("Gather", ["x", "table"], ["b"], axis=2),
                    helper.make_node("Concat", ["a", "b"], ["ab"], axis=2),
                    helper.make_node("ReduceSum", ["ab", "three"], ["s"], keepdims=0),
                    helper.make_node("Div", ["s", "two"], ["y"])],
                   [1, 4, 4, "W"], {"zero": [0], "eight": [8], "two": [2], "three": [3], "table": [[0, 1], [2, 3]]})
    got = _candidate(model)
    assert isinstance(got, Suspect) and "an op of the model's own (Slice)" in got.why, got

"""graph/size_vectors.py's ``node_value`` is the one evaluator of size arithmetic: over typed arrays (every input
length at once, tests/graph/test_size_precision.py) and over object arrays of ints (graph/shape_values.py's fold of
size chains). Both read a chain of the ops torch's size arithmetic uses as onnx's reference evaluator runs it
(integer Div truncating toward zero, negative indices, Slice clamping, axes as inputs)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxpoolfix.graph.size_vectors import Value, node_value

_SHAPE = [2, 3, 10, 7]


def _chain() -> onnx.ModelProto:
    ints = {"i2": [2], "neg": [-1], "three": [3], "two": [2], "ax0": [0], "s0": [1], "e0": [100], "shape2": [1, 1],
            "z": [0, -1]}
    node = helper.make_node
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "i2"], ["h"]), node("Gather", ["s", "neg"], ["w"]),
             node("Sub", ["w", "h"], ["d"]), node("Div", ["d", "two"], ["q"]),  # (7 - 10) / 2: -1, not -2
             node("Mul", ["h", "three"], ["m"]), node("Add", ["m", "q"], ["a"]),
             node("Concat", ["a", "h", "w"], ["c"], axis=0),
             node("Slice", ["c", "s0", "e0", "ax0"], ["sl"]), node("Unsqueeze", ["sl", "ax0"], ["u"]),
             node("Reshape", ["u", "z"], ["r"]), node("Squeeze", ["r", "ax0"], ["sq"]),
             node("ReduceProd", ["sq"], ["p"], keepdims=1), node("Reshape", ["p", "shape2"], ["pr"]),
             node("Equal", ["h", "w"], ["eq"]), node("Cast", ["c"], ["ci"], to=TensorProto.INT32),
             node("Shape", ["x"], ["tail"], start=-2), node("Identity", ["tail"], ["t"])]
    outs = ["h", "w", "d", "q", "a", "c", "sl", "u", "r", "sq", "p", "pr", "eq", "ci", "t"]
    graph = helper.make_graph(nodes, "sizes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, _SHAPE)],
                              [helper.make_empty_tensor_value_info(o) for o in outs],
                              [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _evaluated(model: onnx.ModelProto, objects: bool) -> dict:
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env = {k: Value(v.astype(object) if objects else v, False) for k, v in env.items()}
    shape = Value(np.array(_SHAPE, dtype=object if objects else np.int64), False)
    for n in model.graph.node:
        if n.op_type == "ReduceProd" and not objects or n.op_type != "Shape" and any(i not in env for i in n.input):
            continue  # a flatten's length: read over ints alone (typed values are float32 vs double readings)
        env[n.output[0]] = node_value(n, [env.get(i) for i in n.input], 1, lambda _: shape)
    return env


def test_both_domains_read_size_arithmetic_as_onnxs_reference_does():
    model = _chain()
    want = dict(zip([o.name for o in model.graph.output],
                    ReferenceEvaluator(model).run(None, {"x": np.zeros(_SHAPE, np.float32)})))
    for objects in (False, True):
        got = _evaluated(model, objects)
        for name, w in want.items():
            if name not in got:
                assert not objects and name in ("p", "pr")
                continue
            v = got[name].a
            assert v.shape == w.shape, (objects, name)
            assert [int(e) for e in v.reshape(-1)] == [int(e) for e in np.asarray(w).reshape(-1)], (objects, name)
            if objects:
                assert v.dtype == object, name  # ints stay python ints there, entry by entry

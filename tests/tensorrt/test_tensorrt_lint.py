"""lint_tensorrt: what TensorRT 10's ONNX parser would reject, on tiny models built in code."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxpoolfix.tensorrt import (
    SUPPORTED_OPS,
    GraphInfo,
    LintFinding,
    lint_tensorrt,
    tensorrt_rejects,
)

FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def _vi(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _errors(findings):
    return [f for f in findings if f.severity == "error"]


def _const_i64(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def test_aten_node_is_an_error_naming_its_domain():
    size = helper.make_node("Constant", [], ["size"], value=_const_i64("v", [5, 7]))
    pool = helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["y"], domain="org.pytorch.aten",
                            name="aap")
    model = _model([size, pool], [_vi("x", [1, 3, 11, 11])], [_vi("y", None)],
                   extra_opsets=[("org.pytorch.aten", 1)])
    errors = _errors(lint_tensorrt(model))
    assert len(errors) == 1
    (err,) = errors
    assert (err.node, err.op_type, err.domain) == ("aap", "adaptive_avg_pool2d", "org.pytorch.aten")
    assert "org.pytorch.aten" in err.reason
    assert "\n" not in err.reason


def _clean_model():
    """Conv -> Relu -> AveragePool -> Reshape -> MatMul -> Gather -> Max -> ReduceMean(axes initializer)."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    shape = _const_i64("shape", [1, 4, 16])
    mat = numpy_helper.from_array(np.ones((16, 5), np.float32), "mat")
    idx = _const_i64("idx", [0, 2, 4])
    axes = _const_i64("axes", [2])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Reshape", ["p", "shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "mat"], ["mm"], name="matmul"),
        helper.make_node("Gather", ["mm", "idx"], ["g"], axis=2, name="gather"),
        helper.make_node("Max", ["g", "g"], ["mx"], name="max"),
        helper.make_node("ReduceMean", ["mx", "axes"], ["y"], keepdims=1, name="mean"),
    ]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 1])], [w, shape, mat, idx, axes], opset=18)


def test_clean_graph_has_no_findings():
    model = _clean_model()
    onnx.checker.check_model(model, full_check=True)
    assert lint_tensorrt(model) == []


def test_reduce_mean_with_computed_axes_is_an_error():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["ax"], axis=0),  # axes = shape[1]-ish: computed
        helper.make_node("ReduceMean", ["x", "ax"], ["y"], name="mean"),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", None)], [_const_i64("one", [1])], opset=18)
    errors = _errors(lint_tensorrt(model))
    assert [(e.node, e.op_type) for e in errors] == [("mean", "ReduceMean")]
    assert "'ax'" in errors[0].reason


def test_reduce_mean_axes_from_constant_node_is_fine():
    nodes = [
        helper.make_node("Constant", [], ["ax"], value=_const_i64("v", [1])),
        helper.make_node("ReduceMean", ["x", "ax"], ["y"], name="mean"),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", None)], opset=18)
    assert lint_tensorrt(model) == []


def _resize(**attrs):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", **attrs)
    return _model([node], [_vi("x", [1, 3, 4, 4])], [_vi("y", None)], [scales], opset=18)


def test_resize_nearest_asymmetric_floor_is_supported():
    model = _resize(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    assert lint_tensorrt(model) == []


@pytest.mark.parametrize("attrs, needle", [
    (dict(coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    (dict(coordinate_transformation_mode="half_pixel_symmetric"), "half_pixel_symmetric"),
    (dict(mode="linear", antialias=1), "antialias"),
    (dict(keep_aspect_ratio_policy="not_larger"), "not_larger"),
])
def test_resize_unsupported_attributes_are_errors(attrs, needle):
    errors = _errors(lint_tensorrt(_resize(**attrs)))
    assert len(errors) == 1 and needle in errors[0].reason


@pytest.mark.parametrize("scales, n_errors", [([1, 1, 2, 2, 2], 0), ([1, 2, 2, 2, 2], 1)])
def test_linear_resize_only_on_the_last_three_axes(scales, n_errors):
    scales = numpy_helper.from_array(np.array(scales, np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    model = _model([node], [_vi("x", [1, 3, 4, 4, 4])], [_vi("y", None)], [scales], opset=18)
    assert len(_errors(lint_tensorrt(model))) == n_errors


@pytest.mark.parametrize("op", ["StringNormalizer", "SequenceConstruct", "Unique", "MaxUnpool"])
def test_ops_the_table_marks_unsupported_are_errors(op):
    node = helper.make_node(op, ["x"], ["y"], name="n")
    model = _model([node], [_vi("x", [3])], [_vi("y", None)])
    errors = _errors(lint_tensorrt(model))
    assert [(e.node, e.op_type) for e in errors] == [("n", op)]
    assert op not in SUPPORTED_OPS


def test_supported_ops_contains_what_the_lowerings_emit():
    emitted = {"AveragePool", "MaxPool", "MatMul", "Gather", "GatherElements", "Max", "ReduceMean",
               "ReduceMax", "Resize", "Reshape", "Transpose", "Einsum", "CumSum", "Slice", "Concat",
               "GlobalAveragePool", "GlobalMaxPool", "Unsqueeze", "Squeeze", "Div", "Where", "Range", "Cast"}
    assert emitted <= SUPPORTED_OPS
    assert "adaptive_avg_pool2d" not in SUPPORTED_OPS


def test_float64_tensor_is_flagged():
    # TensorRT has no double type: the table's note says the parser casts DOUBLE down to FLOAT, clamping
    # to +-FLT_MAX, so it parses (a warning, not an error); a type it cannot represent at all is an error.
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model([node], [_vi("x", [2], TensorProto.DOUBLE)], [_vi("y", [2], TensorProto.DOUBLE)])
    findings = lint_tensorrt(model)
    assert findings and all(f.severity == "warning" and "DOUBLE" in f.reason for f in findings)

    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.UINT16, name="cast")
    model = _model([node], [_vi("x", [2])], [_vi("y", [2], TensorProto.UINT16)])
    errors = _errors(lint_tensorrt(model))
    assert errors and all(e.node == "cast" for e in errors)
    assert any("UINT16" in e.reason for e in errors)


def test_integer_matmul_is_an_error():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    i32 = TensorProto.INT32
    model = _model([node], [_vi("a", [2, 2], i32), _vi("b", [2, 2], i32)], [_vi("y", None, i32)])
    assert [e.node for e in _errors(lint_tensorrt(model))] == ["mm"]


def _maxpool_with_indices(indices_is_output: bool):
    pool = helper.make_node("MaxPool", ["x"], ["y", "ind"], kernel_shape=[2, 2], name="mp")
    outputs = [_vi("y", None)] + ([_vi("ind", None, TensorProto.INT64)] if indices_is_output else [])
    return _model([pool], [_vi("x", [1, 1, 4, 4])], outputs)


def test_maxpool_with_used_indices_is_an_error():
    errors = _errors(lint_tensorrt(_maxpool_with_indices(indices_is_output=True)))
    assert [(e.node, e.op_type) for e in errors] == [("mp", "MaxPool")]
    assert "Indices" in errors[0].reason


def test_maxpool_with_unused_indices_is_only_a_warning():
    findings = lint_tensorrt(_maxpool_with_indices(indices_is_output=False))
    assert [f.severity for f in findings] == ["warning"]


def test_maxpool_dilations_and_4d_kernels_are_errors():
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], name="mp")
    model = _model([pool], [_vi("x", [1, 1, 8, 8])], [_vi("y", None)])
    assert len(_errors(lint_tensorrt(model))) == 1
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2, 2], name="ap")
    model = _model([pool], [_vi("x", [1, 1, 4, 4, 4, 4])], [_vi("y", None)])
    assert len(_errors(lint_tensorrt(model))) == 1


@pytest.mark.parametrize("kernel,errors", [([316, 316], 0), ([317, 317], 1), ([50, 50, 40], 1), ([46, 46, 47], 0)])
def test_a_pooling_window_of_100000_elements_or_more_is_an_error(kernel, errors):
    """TensorRT's pooling layer takes windows of fewer than 100000 elements (onnx-tensorrt issue 937: a crash
    at 317 x 317 before the parser checked it)."""
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, name="ap")
    model = _model([pool], [_vi("x", [1, 1, *kernel])], [_vi("y", None)])
    assert len(_errors(lint_tensorrt(model))) == errors


def test_the_tensorrt_target_writes_no_pooling_window_of_100000_elements():
    """[1, 3, 1024, 1024] -> 2 x 2 has uniform windows of 512 x 512: one AveragePool would do in onnxruntime, but
    not in TensorRT; the tensorrt target cuts it another way, exact against the windows' means."""
    from helpers import make_leftover

    import onnxpoolfix

    res = onnxpoolfix.patch(make_leftover("avg", (1, 3, 1024, 1024), (2, 2)), target="tensorrt", check=False)
    assert _errors(lint_tensorrt(res.model)) == []
    kernels = [list(a.ints) for n in res.model.graph.node for a in n.attribute if a.name == "kernel_shape"]
    assert all(np.prod(k) < 100_000 for k in kernels), kernels
    x = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    import onnxruntime as ort

    (got,) = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = x.astype(np.float64).reshape(1, 3, 2, 512, 2, 512).mean(axis=(3, 5))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_1d_pooling_is_fine():
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[2])
    model = _model([pool], [_vi("x", [1, 2, 9])], [_vi("y", None)])
    assert lint_tensorrt(model) == []


def test_argmax_select_last_index_is_supported():
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)
    model = _model([node], [_vi("x", [2, 5])], [_vi("y", None, TensorProto.INT64)])
    assert lint_tensorrt(model) == []


def test_subgraphs_are_walked():
    inner = helper.make_node("StringNormalizer", ["x"], ["z"], name="inner")
    then_branch = helper.make_graph([inner], "then", [], [_vi("z", None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["w"])], "else", [],
                                    [_vi("w", None)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)
    model = _model([node], [_vi("cond", [], TensorProto.BOOL), _vi("x", [3])], [_vi("y", None)])
    errors = _errors(lint_tensorrt(model))
    assert [(e.node, e.op_type) for e in errors] == [("inner", "StringNormalizer")]


def test_cumsum_axis_must_be_constant():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ReduceMin", ["s"], ["ax"], keepdims=0),
        helper.make_node("CumSum", ["x", "ax"], ["y"], name="cs"),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", None)], opset=17)
    errors = _errors(lint_tensorrt(model))
    assert [e.node for e in errors] == ["cs"]


def test_tensorrt_rejects_gives_the_first_error_or_none():
    model = _clean_model()
    info = GraphInfo.from_model(model)
    assert all(tensorrt_rejects(n, info) is None for n in model.graph.node)
    aten = helper.make_node("adaptive_max_pool2d", ["x", "s"], ["y", "i"], domain="org.pytorch.aten")
    reason = tensorrt_rejects(aten, info)
    assert reason is not None and "org.pytorch.aten" in reason


def test_local_functions_are_inlined_not_rejected():
    body = [helper.make_node("Relu", ["a"], ["b"])]
    func = helper.make_function("my.domain", "MyRelu", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    node = helper.make_node("MyRelu", ["x"], ["y"], domain="my.domain", name="call")
    model = _model([node], [_vi("x", [2])], [_vi("y", None)], extra_opsets=[("my.domain", 1)])
    model.functions.extend([func])
    assert lint_tensorrt(model) == []


def test_findings_are_frozen_and_errors_come_first():
    pool = helper.make_node("MaxPool", ["x"], ["y", "ind"], kernel_shape=[2, 2], name="mp")
    bad = helper.make_node("Unique", ["y"], ["u"], name="u")
    model = _model([pool, bad], [_vi("x", [1, 1, 4, 4])], [_vi("u", None)])
    findings = lint_tensorrt(model)
    assert [f.severity for f in findings] == ["error", "warning"]
    with pytest.raises(AttributeError):
        findings[0].reason = "x"  # type: ignore[misc]
    assert isinstance(findings[0], LintFinding)

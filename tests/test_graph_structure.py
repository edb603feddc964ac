"""Unusual graph structure around the leftovers: names, initializers listed as inputs, subgraphs, many nodes.

Each case was found by an adversarial sweep and is checked on the written model itself (checker, inputs,
onnxruntime, the numpy reference), not only on the report.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.frontends.leftovers import ATEN_DOMAIN


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _run(model, **feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


@pytest.mark.parametrize("ir, opset", [(3, 9), (8, 17)])
def test_a_size_initializer_listed_as_an_input_goes_with_it(ir, opset):
    """IR 3 lists every initializer in graph.input (keep_initializers_as_inputs does the same later): the dead
    size initializer was dropped but its input entry stayed, a new input the caller had to feed."""
    g = helper.make_graph([helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["y"], name="p", domain=ATEN_DOMAIN)],
                          "g", [_vi("x", [1, 3, 11, 9]), _vi("size", [2], TensorProto.INT64)], [_vi("y", [1, 3, 4, 5])],
                          initializer=[numpy_helper.from_array(np.array([4, 5], np.int64), "size")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ATEN_DOMAIN, 1)])
    m.ir_version = ir
    out = onnxpoolfix.patch(m).model
    assert [i.name for i in out.graph.input] == ["x"]
    onnx.checker.check_model(out, full_check=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 11, 9)).astype(np.float32)
    (y,) = _run(out, x=x)
    np.testing.assert_allclose(y, reference.adaptive_avg_pool(x, (4, 5)), rtol=0, atol=1e-6)


def test_fresh_names_avoid_the_names_defined_in_subgraphs():
    """An If branch defines 'p/pool_matrix', the name the lowering of node 'p' would take for its matrix: the
    top-level tensor must get another name (one definition per name, subgraphs included)."""
    then_g = helper.make_graph([_const("p/pool_matrix", np.float32(1))], "then", [], [_vi("p/pool_matrix", [])])
    else_g = helper.make_graph([_const("e", np.float32(-1))], "else", [], [_vi("e", [])])
    g = helper.make_graph([
        _const("s", np.array([4, 5], np.int64)),
        helper.make_node("adaptive_avg_pool2d", ["x", "s"], ["y"], name="p", domain=ATEN_DOMAIN),
        helper.make_node("ReduceSum", ["x"], ["xs"], keepdims=0), _const("zero", np.float32(0)),
        helper.make_node("Greater", ["xs", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g, name="if")], "g",
        [_vi("x", [2, 3, 11, 9])], [_vi("y", [2, 3, 4, 5]), _vi("z", [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ATEN_DOMAIN, 1)])
    onnx.checker.check_model(m, full_check=True)
    for strategy in ("matmul", "kronecker"):
        out = onnxpoolfix.patch(m, strategy=strategy).model
        top = {o for n in out.graph.node for o in n.output} | {t.name for t in out.graph.initializer}
        assert "p/pool_matrix" not in top
        onnx.checker.check_model(out, full_check=True)


def test_nodes_with_the_same_name_are_checked_and_reported_apart():
    """Two leftovers both named 'pool': each report row has its own checked shapes and error (the check's
    results were keyed by name and merged)."""
    g = helper.make_graph([
        _const("s1", np.array([4, 5], np.int64)), _const("s2", np.array([7, 7], np.int64)),
        helper.make_node("adaptive_avg_pool2d", ["a", "s1"], ["ya"], name="pool", domain=ATEN_DOMAIN),
        helper.make_node("adaptive_avg_pool2d", ["b", "s2"], ["yb"], name="pool", domain=ATEN_DOMAIN)], "g",
        [_vi("a", [1, 2, 11, 9]), _vi("b", [1, 2, 30, 30])], [_vi("ya", [1, 2, 4, 5]), _vi("yb", [1, 2, 7, 7])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ATEN_DOMAIN, 1)])
    result = onnxpoolfix.patch(m)
    rows = result.report.nodes
    assert [r.checked_shapes for r in rows] == [[[1, 2, 11, 9]], [[1, 2, 30, 30]]]
    assert rows[0].tolerance != rows[1].tolerance


def test_the_bfloat16_check_output_name_avoids_an_existing_tensor():
    """The check fetches a bfloat16 output through a Cast named '<y>/onnxpoolfix_check_float32'; a model that
    already has a tensor of that name was refused with 'Duplicate definition'."""
    taken = "y/onnxpoolfix_check_float32"
    g = helper.make_graph([
        _const("s", np.array([4, 5], np.int64)),
        helper.make_node("adaptive_avg_pool2d", ["x", "s"], ["y"], name="p", domain=ATEN_DOMAIN),
        helper.make_node("Cast", ["y"], [taken], to=TensorProto.FLOAT)], "g",
        [_vi("x", [1, 3, 11, 9], TensorProto.BFLOAT16)], [_vi(taken, [1, 3, 4, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ATEN_DOMAIN, 1)])
    result = onnxpoolfix.patch(m)
    assert result.report.check_passed
    assert [o.name for o in result.model.graph.output] == [taken]

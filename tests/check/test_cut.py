"""The check's sessions run a cut of the graph: the nodes the fetched tensors are computed from, with their
initializers written from where they are (never the layers below, which may hold most of the weights)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import make_leftover
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix.check import ONNXRUNTIME_DOMAINS
from onnxpoolfix.check.cut import cut_bytes, cut_nodes
from onnxpoolfix.io import serialize


def _two_branch_model(rng) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> MatMul(w1) -> a -> Relu -> b; b -> MatMul(w2) -> c (output); b -> If(then: Neg(b)) -> d (output).
    w1 and w2 are big enough (256 KiB) for the writer to substitute them."""
    w = {"w1": rng.standard_normal((256, 256)).astype(np.float32),
         "w2": rng.standard_normal((256, 256)).astype(np.float32), "flag": np.array(True)}
    branch = helper.make_graph([helper.make_node("Neg", ["b"], ["nb"])], "then", [],
                               [helper.make_tensor_value_info("nb", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("MatMul", ["b", "w2"], ["c"], name="mm2"),
             helper.make_node("If", ["flag"], ["d"], name="if", then_branch=branch, else_branch=branch)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 256]),
                               helper.make_tensor_value_info("d", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def test_the_cut_holds_only_what_the_tensor_is_computed_from():
    model, w = _two_branch_model(np.random.default_rng(0))
    picked, outside = cut_nodes(model.graph, ["b"])
    assert [model.graph.node[k].name for k in picked] == ["mm1", "relu"] and outside == {"x", "w1"}
    cut = onnx.ModelProto.FromString(cut_bytes(model, [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)]))
    assert [n.name for n in cut.graph.node] == ["mm1", "relu"]
    assert [t.name for t in cut.graph.initializer] == ["w1"]  # not w2 (below b), nor the If's flag
    assert np.array_equal(numpy_helper.to_array(cut.graph.initializer[0]), w["w1"])  # written whole, as it was
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
    got = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x @ w["w1"], 0), rtol=1e-5, atol=1e-4)
    assert model.graph.node[0].name == "mm1" and len(model.graph.initializer) == 3  # the caller's model as it was


def test_a_body_reading_an_outer_tensor_brings_its_producer_into_the_cut():
    model, _ = _two_branch_model(np.random.default_rng(0))
    picked, outside = cut_nodes(model.graph, ["d"])
    assert [model.graph.node[k].name for k in picked] == ["mm1", "relu", "if"] and outside == {"x", "w1", "flag"}
    cut = onnx.ModelProto.FromString(cut_bytes(model, [helper.make_tensor_value_info("d", TensorProto.FLOAT, None)]))
    assert sorted(t.name for t in cut.graph.initializer) == ["flag", "w1"]


def test_serialize_writes_the_substituted_tensors_byte_for_byte():
    model, _ = _two_branch_model(np.random.default_rng(0))
    scratch = onnx.ModelProto()
    scratch.CopyFrom(model)
    del scratch.graph.initializer[:]
    assert serialize(scratch, list(model.graph.initializer)) == model.SerializeToString()


def test_the_check_runs_past_nodes_onnxruntime_lacks_below_the_pool_and_names_them():
    """A node of a domain onnxruntime has no kernels in, reading the pool's output: the check runs the part of the
    graph computing the pool, so the patch goes ahead, exact, and the report names the node."""
    model = make_leftover("avg", [1, 3, 17, 13], [5, 7])
    model.graph.node.append(helper.make_node("Plugin", ["y"], ["z"], name="trt_plugin", domain="com.example"))
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    model.graph.output[0].name = "z"
    result = onnxpoolfix.patch(model)
    assert result.report.check_passed
    assert [n.op_type for n in result.model.graph.node][-1] == "Plugin"
    assert any("com.example::Plugin" in note for note in result.report.notes)
    # and the replaced pool is exact against numpy, outside the tool: the graph up to y, run here
    cut = onnx.ModelProto()
    cut.CopyFrom(result.model)
    del cut.graph.node[-1]
    cut.graph.output[0].name = "y"
    x = np.random.default_rng(2).standard_normal((1, 3, 17, 13)).astype(np.float32)
    got = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = np.empty((1, 3, 5, 7), np.float64)
    for i in range(5):
        for j in range(7):
            h0, h1 = i * 17 // 5, -(-(i + 1) * 17 // 5)
            w0, w1 = j * 13 // 7, -(-(j + 1) * 13 // 7)
            want[:, :, i, j] = x[:, :, h0:h1, w0:w1].astype(np.float64).mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_domains_named_as_onnxruntimes_are_the_ones_it_has_kernels_in():
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    assert {k.domain for k in C.get_all_opkernel_def()} <= ONNXRUNTIME_DOMAINS


def test_a_stop_tensor_ends_the_walk_and_is_read_from_outside():
    """What the isolated check of a replaced subgraph needs: the nodes between its input and its output only."""
    model, _ = _two_branch_model(np.random.default_rng(0))
    picked, outside = cut_nodes(model.graph, ["c"], stop=["b"])
    assert [model.graph.node[k].name for k in picked] == ["mm2"] and outside == {"b", "w2"}


def test_nothing_to_patch_with_nodes_onnxruntime_lacks_says_so():
    """A leftover aten node that is no adaptive pool (a TorchScript export's avg_pool2d whose kernel is the dynamic
    input size): nothing is replaced, and OUT would not load in onnxruntime; the report warns instead of a bare
    "nothing to patch"."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])
    node = helper.make_node("avg_pool2d", ["x"], ["y"], name="pool", domain="org.pytorch.aten")
    model = helper.make_model(helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                              [1, 3, 1, 1])]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)])
    report = onnxpoolfix.patch(model).report
    assert not report.nodes
    warned = [n for n in report.notes if n.code == "foreign-domains"]
    assert warned and warned[0].severity == "warning" and "org.pytorch.aten::avg_pool2d" in warned[0]


def test_a_check_run_failing_in_the_input_files_own_node_says_so():
    """The input file itself fails at a check size (an Add of a constant of the traced size, as a frozen export
    does): the check's error names that node as the input file's, not one onnxpoolfix wrote."""
    model = make_leftover("avg", [1, 3, "H", "W"], [5, 7])
    pool = model.graph.node[-1]
    pool.input[0] = "x_plus"
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node("Add", ["x", "frozen"], ["x_plus"],
                                                                        name="exporters_add"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 3, 17, 13), np.float32), "frozen"))
    with pytest.raises(onnxpoolfix.CheckFailedError, match="'exporters_add', a node of the input file") as info:
        onnxpoolfix.patch(model, check_shapes=[{"x": [1, 3, 17, 13]}, {"x": [1, 3, 20, 20]}])
    assert "fails at that size too" in info.value.hint

"""Sizes computed from static shapes in exports below opset 15, where onnx propagates no values through
``Shape -> Slice -> Concat`` (graph/shape_values.py). The TorchScript exporter writes ``x.flatten(2)`` and
``x.view(n, c, -1)`` as a Reshape to such a chain, so at opset 11/13 every pool after one was refused ("the
shape of its input cannot be inferred"). Real torch exports compared with torch, and the folding itself on
hand-built graphs."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxpoolfix import patch
from onnxpoolfix.graph.shape_values import fold_size_chains
from onnxpoolfix.graph.shapes import infer

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn


class FlattenPool1d(nn.Module):
    def forward(self, x):
        return nn.functional.adaptive_avg_pool1d(x.flatten(2), 9)


class ShufflePool(nn.Module):
    """A channel shuffle (view, transpose, view: ShuffleNet's) before an adaptive max pool."""

    def forward(self, x):
        n, c, h, w = x.shape
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return nn.functional.adaptive_max_pool2d(x, (5, 7))


def _export(module, shape, opset, dynamic):
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _load(module, x, opset, {"x": {0: "n", 2: "h", 3: "w"}} if dynamic else None)


def _load(module, x, opset, axes):
    import io
    f = io.BytesIO()
    torch.onnx.export(module, (x,), f, dynamo=False, opset_version=opset, input_names=["x"], dynamic_axes=axes,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(f.getvalue())


def _max_error(module, model, shapes):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 0.0
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = module(x).numpy()
        got = sess.run(None, {"x": x.numpy()})[0]
        assert got.shape == want.shape, (shape, got.shape, want.shape)
        worst = max(worst, float(np.abs(got - want).max()))
    return worst


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("module", [FlattenPool1d(), ShufflePool()], ids=["flatten_pool1d", "shuffle_pool2d"])
def test_pools_after_a_computed_reshape_below_opset_15_are_patched(module, opset, dynamic):
    model = _export(module, (2, 4, 11, 13), opset, dynamic)
    assert any(n.domain == "org.pytorch.aten" or "adaptive" in n.op_type for n in model.graph.node)
    result = patch(model)
    shapes = [(2, 4, 11, 13)] + ([(1, 4, 17, 9), (3, 4, 6, 8)] if dynamic else [])
    assert _max_error(module, result.model, shapes) < 1e-5
    assert not any("adaptive" in n.op_type for n in result.model.graph.node)


class ViewPool1d(nn.Module):
    def forward(self, x):
        n, c, h, w = x.shape
        return nn.functional.adaptive_avg_pool1d(x.view(n, c, h * w), 2)


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_a_static_view_without_constant_folding_is_patched(opset):
    """review22 case 59: with do_constant_folding=False a static view's target is Unsqueeze(Constant)s under a
    Concat, which onnx folds only from Unsqueeze-13/Concat-13 on: the pool after it was refused (exit 4)."""
    module = ViewPool1d()
    x = torch.randn(2, 6, 11, 13)
    f = __import__("io").BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=opset, do_constant_folding=False,
                          input_names=["x"], operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    result = patch(onnx.load_from_string(f.getvalue()))
    assert _max_error(module, result.model, [(2, 6, 11, 13)]) < 1e-5


def _graph(nodes, x_dims, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _ints(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def test_a_reshape_target_from_a_static_shape_is_folded_to_its_value():
    # y = Reshape(x, [Shape(x)[0] * Shape(x)[1], Div(-7, 2) = -3 -> truncated toward zero, then -1 ...])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["a"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["b"], axis=0),
             helper.make_node("Mul", ["a", "b"], ["ab"]),
             helper.make_node("Unsqueeze", ["ab", "ax0"], ["abu"]),
             helper.make_node("Concat", ["abu", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [helper.make_tensor("i0", TensorProto.INT64, [], [0]), helper.make_tensor("i1", TensorProto.INT64, [], [1]),
             _ints("ax0", [0]), _ints("minus1", [-1])]
    model = _graph(nodes, [2, 3, 4, 5], inits)
    assert infer(model)["y"][1] == (6, 20)
    folded = fold_size_chains(onnx.shape_inference.infer_shapes(model, data_prop=True))
    target = [t for t in folded.graph.initializer if "onnxpoolfix_folded" in t.name]
    assert [list(onnx.numpy_helper.to_array(t)) for t in target] == [[6, -1]]


def test_a_partly_symbolic_target_keeps_the_copied_dims_and_the_rank():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
             helper.make_node("Concat", ["lead", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _graph(nodes, ["n", 3, "h", "w"], [_ints("zero", [0]), _ints("two", [2]), _ints("minus1", [-1])])
    elem, dims = infer(model)["y"]
    assert len(dims) == 3 and dims[0] == "n" and dims[1] == 3  # the batch symbol copied, C static


def _division_model(last: str):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Sub", ["zero", "s"], ["neg"]),  # [-2, -7]
             helper.make_node("Div", ["neg", "two"], ["half"]),  # ONNX: [-1, -3]; floor would give [-1, -4]
             helper.make_node(last, ["half", "minus1"] if last == "Mul" else ["half"], ["target"]),
             helper.make_node("Reshape", ["x2", "target"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7]),
                                       helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_ints("zero", [0]), _ints("two", [2]), _ints("minus1", [-1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_integer_division_in_a_size_chain_truncates_toward_zero():
    assert infer(_division_model("Mul"))["y"][1] == (1, 3)  # floor division would make it (1, 4)


def test_a_chain_through_an_op_not_folded_reaches_no_reshape():
    model = _division_model("Neg")
    assert fold_size_chains(onnx.shape_inference.infer_shapes(model, data_prop=True)) is None
    assert infer(model)["y"][1] is None


def test_a_slice_ending_at_a_reshaped_length_from_the_shape_is_sized():
    """torch's ``x[:, :, : h // 4 * 4]`` at opset 18: the Slice's ``ends`` is ``Reshape(h // 4 * 4, [1])``, which
    onnx's data propagation does not follow: the Slice's whole shape was unknown (review40 F6)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=2, end=3),
             helper.make_node("Squeeze", ["s"], ["h"]),
             helper.make_node("Div", ["h", "four"], ["q"]),
             helper.make_node("Mul", ["q", "four"], ["crop"]),
             helper.make_node("Reshape", ["crop", "one"], ["ends"]),
             helper.make_node("Slice", ["x", "zero", "ends", "two"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 37, 25])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("four", TensorProto.INT64, [], [4]), _ints("one", [1]),
                           _ints("zero", [0]), _ints("two", [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    assert infer(model)["y"][1] == (1, 4, 36, 25)

"""The layers after the replaced nodes are not run by the check (it runs the cut computing the replaced nodes):
whether they take what the replacements compute is asked of onnx's strict shape inference, OUT against the input
file, without the weights."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_leftover, ort_run
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix.errors import CheckFailedError


def _with_bias(bias_hw: tuple[int, int]):
    """x [1,4,17,13] -> leftover adaptive_avg_pool2d to 5x7 -> y, then z = y + bias[4, *bias_hw]."""
    model = make_leftover("avg", [1, 4, 17, 13], [5, 7])
    model.graph.initializer.append(numpy_helper.from_array(np.ones((4, *bias_hw), np.float32), "bias"))
    model.graph.node.append(helper.make_node("Add", ["y", "bias"], ["z"], name="add_bias"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, "a", "b"]))
    return model


def test_a_layer_after_the_pool_that_cannot_take_its_output_is_refused():
    """The bias is 6x6 and the pool writes 5x7: OUT would run at no size. The cut the check runs ends at the pool,
    so this is onnx's strict inference, which infers the input file cleanly (the leftover's output is unknown to
    it) and OUT not."""
    with pytest.raises(CheckFailedError, match="layers after the replaced nodes .* Incompatible dimensions"):
        onnxpoolfix.patch(_with_bias((6, 6)))


def test_a_layer_that_takes_it_passes():
    result = onnxpoolfix.patch(_with_bias((5, 7)))
    assert result.report.check_passed


def _gather_after(index: str):
    """x [N,4,17,13] -> leftover to 5x7 -> y; z = GatherElements(y, index, axis=3). ``index``: "frozen", a
    constant [1,4,5,7] (what the TorchScript exporter folds ``torch.zeros(y.shape)`` into, the leftover typed at
    its traced batch 1), or "follows", the same zeros built from Shape(y)."""
    model = make_leftover("avg", ["N", 4, 17, 13], [5, 7])
    if index == "frozen":
        model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 4, 5, 7), np.int64), "index"))
    else:
        model.graph.node.extend([
            helper.make_node("Shape", ["y"], ["y_shape"]),
            helper.make_node("ConstantOfShape", ["y_shape"], ["index"],
                             value=numpy_helper.from_array(np.zeros(1, np.int64), "zero"))])
    model.graph.node.append(helper.make_node("GatherElements", ["y", "index"], ["z"], name="gather", axis=3))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4, 5, 7]))
    return model


def test_a_frozen_index_after_the_pool_is_refused():
    """GatherElements takes its output shape from its index: a constant of the traced batch gives batch 1 at
    every batch, and nothing fails in onnxruntime to say so (review11 F2: exit 0, OUT (1,3,4,5) where torch
    gives (2,3,4,5)). Refused where the batch is symbolic, and where it is bound to another batch."""
    for input_shapes in (None, {"x": [2, 4, 17, 13]}):
        with pytest.raises(CheckFailedError, match="constant index of shape \\[1, 4, 5, 7\\]"):
            onnxpoolfix.patch(_gather_after("frozen"), input_shapes=input_shapes)
    assert onnxpoolfix.patch(_gather_after("frozen"), input_shapes={"x": [1, 4, 17, 13]}).report.check_passed


def test_an_index_that_follows_the_pool_passes_and_gathers_every_batch():
    import onnxruntime as ort

    result = onnxpoolfix.patch(_gather_after("follows"))
    assert result.report.check_passed
    x = np.random.default_rng(0).standard_normal((3, 4, 17, 13)).astype(np.float32)
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    rows = [x[:, :, (i * 17) // 5: -(-(i + 1) * 17 // 5)] for i in range(5)]  # torch's windows, written out
    first_col = np.stack([r[..., : -(-13 // 7)].mean(axis=(2, 3)) for r in rows], axis=2)  # column window 0
    np.testing.assert_allclose(got, np.repeat(first_col[..., None], 7, axis=3), rtol=1e-5, atol=1e-6)


def test_the_torchscript_exporters_frozen_index_is_refused(tmp_path):
    """The file torch writes for it (the index a Constant node, folded after a ``y[:, 0]``); and the same
    module without that read, where torch keeps Shape -> ConstantOfShape, is patched and matches torch at N=2."""
    torch = pytest.importorskip("torch")

    class Gathers(torch.nn.Module):
        def __init__(self, index_first: bool):
            super().__init__()
            self.pool, self.index_first = torch.nn.AdaptiveAvgPool2d((4, 5)), index_first

        def forward(self, x):
            y = self.pool(x)
            first = y[:, 0] if self.index_first else None  # read before the shape: torch folds the index
            gathered = torch.gather(y, 3, torch.zeros(y.shape, dtype=torch.long))
            return (first, gathered) if self.index_first else (gathered,)

    for index_first in (True, False):
        m, path = Gathers(index_first).eval(), tmp_path / f"g{index_first}.onnx"
        torch.onnx.export(m, (torch.randn(1, 3, 10, 13),), str(path), dynamo=False, input_names=["x"],
                          opset_version=17, operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
        import onnx
        import onnxruntime as ort

        if index_first:
            with pytest.raises(CheckFailedError, match="constant index"):
                onnxpoolfix.patch(onnx.load(str(path)))
            continue
        out = onnxpoolfix.patch(onnx.load(str(path))).model
        x = torch.randn(2, 3, 9, 14)
        got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x.numpy()})
        with torch.no_grad():
            want = m(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("read_first", [True, False])
def test_a_view_of_the_pools_batch_the_exporter_froze_is_refused(tmp_path, read_first):
    """``y.view(y.size(0), -1)`` after a ``y[:, 0]``: torch folds ``y.size(0)`` to the traced batch, a Reshape to
    [1, -1], which at batch 2 gives (1, 120) where torch gives (2, 60), and runs (exit 0 before). With the view
    first (the classifier's usual form) torch keeps Shape -> Gather, and the file is patched and matches torch."""
    torch = pytest.importorskip("torch")
    import onnx
    import onnxruntime as ort

    class Viewed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = torch.nn.AdaptiveAvgPool2d((4, 5))

        def forward(self, x):
            y = self.pool(x)
            if read_first:
                first = y[:, 0]
                return first, y.view(y.size(0), -1)
            flat = y.view(y.size(0), -1)
            return y[:, 0], flat

    m, path = Viewed().eval(), tmp_path / "v.onnx"
    torch.onnx.export(m, (torch.randn(1, 3, 10, 13),), str(path), dynamo=False, input_names=["x"],
                      opset_version=17, operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                      dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    if read_first:
        with pytest.raises(CheckFailedError, match="Reshape .* constant shape \\[1, -1\\]"):
            onnxpoolfix.patch(onnx.load(str(path)))
        return
    out = onnxpoolfix.patch(onnx.load(str(path))).model
    x = torch.randn(2, 3, 9, 14)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = m(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_a_reshape_to_a_constant_of_the_models_own_is_no_frozen_batch():
    """review14: ``pool(x).reshape(5, -1)`` is the model's own (5 is no traced batch torch folded in): patched."""
    model = make_leftover("avg", ["N", 4, 17, 13], [5, 7])
    model.graph.initializer.append(numpy_helper.from_array(np.array([5, -1], np.int64), "target"))
    model.graph.node.append(helper.make_node("Reshape", ["y", "target"], ["z"], name="reshape"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [5, "k"]))
    assert onnxpoolfix.patch(model).report.check_passed


def test_a_reshape_that_keeps_the_first_dim_apart_is_no_frozen_batch():
    """review41: timm's pvt_v2 pools its keys to 7x7; torch's attention decomposition reshapes [heads, 64, 49] to the
    constant [1, heads, 64, 49], whose leading 1 is no traced batch: the first dim stays a dim of its own. Exit 5
    on every dynamo export of the model (static ones too); patched, against numpy."""
    model = make_leftover("avg", [1, 4, 17, 13], [7, 7])
    model.graph.initializer.extend([numpy_helper.from_array(np.array([2, 2, 49], np.int64), "heads"),
                                    numpy_helper.from_array(np.array([1, 2, 2, 49], np.int64), "batched")])
    model.graph.node.extend([helper.make_node("Reshape", ["y", "heads"], ["h"], name="split_heads"),
                             helper.make_node("Reshape", ["h", "batched"], ["z"], name="batch_again")])
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 2, 49]))
    result = onnxpoolfix.patch(model)
    x = np.random.default_rng(0).standard_normal((1, 4, 17, 13)).astype(np.float32)
    (got,) = ort_run(result.model, {"x": x})
    windows = [[(i * n) // 7, -((-(i + 1) * n) // 7)] for n in (17, 13) for i in range(7)]
    want = np.array([[x[0, c, windows[i][0]:windows[i][1], windows[7 + j][0]:windows[7 + j][1]].mean()
                      for i in range(7) for j in range(7)] for c in range(4)])
    np.testing.assert_allclose(got.reshape(4, 49), want, rtol=1e-5, atol=1e-6)

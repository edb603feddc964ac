"""torch's TorchScript exporter writes ``t.squeeze(d)`` of a dim whose size it does not know (after a leftover and
a convolution, say) as ``If(Shape(t)[d] == 1, Squeeze, Identity)``, whose branches differ in rank, so onnx's
inference stopped at the If and a pool reading it was refused (exit 4: review20 cases 43, 50; an OCR-style head
pooling the height to 1, then a conv, a squeeze and a 1D pool). Where static dims decide the condition,
inference sees the branch taken; the If stays in OUT, which is compared with torch itself here."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from onnxpoolfix.cli import main


class HeightToOneConvSqueezePool1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 1)

    def forward(self, x):
        return F.adaptive_avg_pool1d(self.conv(F.adaptive_avg_pool2d(x, (1, None))).squeeze(2), 16)


class IndicesAddedSqueezed(nn.Module):
    def forward(self, x):
        y, i = F.adaptive_max_pool3d(x.unsqueeze(-4), 5, return_indices=True)
        return F.adaptive_avg_pool2d((y + i.float()).squeeze(-4), 3)


class SqueezeOfTheDynamicHeight(nn.Module):
    """The condition reads H, which the file leaves symbolic: the If takes either branch, and no reading of it
    holds at every size."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(F.adaptive_avg_pool2d(x, (None, 5))).squeeze(2), (2, 3))


def _export(module, dynamic, shape=(2, 4, 11, 23)):
    buf = io.BytesIO()
    torch.onnx.export(module, (torch.randn(*shape),), buf, dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}} if dynamic else None,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(buf.getvalue())


def _patched(tmp_path, model):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    return r, out


@pytest.mark.parametrize("module,dynamic,sizes", [
    (HeightToOneConvSqueezePool1d, True, [(2, 4, 11, 23), (1, 4, 7, 30), (3, 4, 16, 9), (1, 4, 1, 1)]),
    (IndicesAddedSqueezed, False, [(2, 4, 11, 23)]),
], ids=["ocr-dynamic", "indices-static"])
def test_a_squeeze_if_static_dims_decide_is_read_through_and_matches_torch(tmp_path, module, dynamic, sizes):
    torch.manual_seed(0)
    m = module().eval()
    model = _export(m, dynamic)
    assert any(n.op_type == "If" for n in model.graph.node)
    r, out = _patched(tmp_path, model)
    assert r.exit_code == 0, r.output
    assert any(n.op_type == "If" for n in onnx.load(str(out)).graph.node)  # the If itself stays, as torch wrote it
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for shape in sizes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = m(x).numpy()
        (got,) = sess.run(None, {"x": x.numpy()})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_squeeze_if_of_a_symbolic_dim_stays_refused(tmp_path):
    model = _export(SqueezeOfTheDynamicHeight().eval(), True)
    r, out = _patched(tmp_path, model)
    assert r.exit_code == 4 and not out.exists() and "cannot be inferred" in r.stderr


def test_an_equal_is_read_for_an_ifs_condition_only():
    """The value of ``Shape(x)[1] == 3`` decides an If; handed to inference in place of a bool input elsewhere (a
    Where's condition) it would be an int64 tensor there, which fails the whole second inference."""
    from onnx import TensorProto, helper

    from onnxpoolfix.graph.shape_values import fold_size_chains

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Equal", ["c", "three"], ["eq"]), helper.make_node("Where", ["eq", "x", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                                       helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("one", TensorProto.INT64, [], [1]),
                           helper.make_tensor("three", TensorProto.INT64, [], [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    folded = fold_size_chains(onnx.shape_inference.infer_shapes(model))
    where = [n for n in (folded or model).graph.node if n.op_type == "Where"][0]
    assert where.input[0] == "eq"

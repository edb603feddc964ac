"""Plain dynamo exports of half-precision pools under symbolic H/W: the proof feeds the tensors the region reads
only the shape of as zeros of their own dtype, which for bfloat16 numpy cannot hand to onnxruntime directly (the
proof failed at every size, and the file was refused at its right traced size; the float16 twin was patched)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxpoolfix
from onnxpoolfix.sessions import ort_value

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_region_is_patched_and_matches_torch(dtype, tmp_path: Path):
    tdt = getattr(torch, dtype)
    m = torch.nn.AdaptiveAvgPool2d((5, 7)).eval().to(tdt)
    path = tmp_path / "in.onnx"
    dims = {2: torch.export.Dim("h", min=2, max=4096), 3: torch.export.Dim("w", min=2, max=4096)}
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(m, (torch.randn(1, 3, 17, 13).to(tdt),), str(path), dynamo=True, input_names=["x"],
                          dynamic_shapes=(dims,))
    out = onnxpoolfix.patch(onnx.load(str(path)), traced_shapes={"x": [1, 3, 17, 13]}).model
    y = out.graph.output[0]  # read back as float32 (exact for both): numpy has no bfloat16 onnxruntime returns
    out.graph.node.append(onnx.helper.make_node("Cast", [y.name], ["y32"], to=onnx.TensorProto.FLOAT))
    out.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y32", onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(out.SerializeToString())
    for shape in ((1, 3, 17, 13), (1, 3, 23, 9), (1, 3, 4, 30)):
        x = torch.randn(*shape).to(tdt)
        bits = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if dtype == "bfloat16" else x.numpy()
        got = sess.run_with_ort_values(None, {"x": ort_value(bits)})[0].numpy()
        np.testing.assert_allclose(got, m(x).float().numpy(), rtol=2 ** -7, atol=1e-3)


def test_a_bfloat16_pool_inside_a_float32_model_is_exported(tmp_path: Path):
    """review12 F20: a pool under torch.autocast(bfloat16) in a float32 model. The check's size probe fetched the
    bfloat16 pooled tensor as numpy (which has no bfloat16) at every size, and onnxpoolfix.export said the model
    ran at none of them, blaming the Dim ranges. The probe reads only shapes now."""

    class Autocast(torch.nn.Module):
        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = torch.nn.functional.adaptive_avg_pool2d(x.to(torch.bfloat16), (3, 5))
            return y.float()

    m = Autocast().eval()
    dims = {2: torch.export.Dim("h", min=2, max=64), 3: torch.export.Dim("w", min=2, max=64)}
    path = tmp_path / "m.onnx"
    onnxpoolfix.export(m, (torch.randn(1, 3, 17, 13),), path, input_names=["x"], dynamic_shapes={"x": dims},
                       external_data=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 17, 13), (1, 3, 23, 9), (1, 3, 4, 30)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = m(x).numpy()
        (got,) = sess.run(None, {"x": x.numpy()})
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2, err_msg=str(shape))  # bfloat16's rounding

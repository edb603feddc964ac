"""A leftover's output size computed inside a model-local function (export_modules_as_functions with constant
folding off: a value the W of ``(1, None)`` is computed from is an output of the Conv2d module's function) is read once that function is inlined, not refused as a size known only at run time (review22 case
514)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from onnxpoolfix.cli import main

torch = pytest.importorskip("torch")
nn = torch.nn


class _OcrHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 16, 3, padding=1)
        self.hpool = nn.AdaptiveMaxPool2d((1, None))
        self.tpool = nn.AdaptiveAvgPool1d(10)

    def forward(self, x):
        h = self.hpool(torch.relu(self.conv(x))).squeeze(-2)
        return self.tpool(h).flatten(1)


def test_a_size_computed_inside_a_module_function_is_read_and_exact_against_torch(tmp_path):
    torch.manual_seed(0)
    m = _OcrHead().eval()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    torch.onnx.export(m, (torch.randn(2, 6, 3, 13),), src, dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {2: "H"}}, do_constant_folding=False, export_modules_as_functions=True,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    written = onnx.load(src)
    conv = next(f for f in written.functions if any(n.op_type == "Conv" for n in f.node))
    assert len(conv.output) == 2  # the case: a value of the pool's size comes out of the Conv2d function
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for h in (1, 3, 8, 17):
        x = torch.randn(2, 6, h, 13)
        (y,) = session.run(None, {"x": x.numpy()})
        with torch.no_grad():
            np.testing.assert_allclose(y, m(x).numpy(), rtol=1e-5, atol=1e-6)

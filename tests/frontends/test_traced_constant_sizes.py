"""A size Python computes from the traced input's size (``int(H * 0.5)``, timm's VGG head ``max(7, H)``) is a
constant in a TorchScript file, which no reading can tell from ``AdaptiveAvgPool2d(10)``: OUT keeps it and is
wrong at other sizes (review41: exit 0, 0.1-0.4 off). The report says so for every leftover that pools symbolic
axes to a constant; ``onnxpoolfix.export`` compares with torch instead and refuses it."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from helpers import ort_run
from runtime_fixtures import FIXTURES

import onnxpoolfix

torch = pytest.importorskip("torch")
F = torch.nn.functional


class HalfTheHeight(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (int(x.shape[2] * 0.5), 5))


def _fallthrough(module, x) -> onnx.ModelProto:
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.filterwarnings("ignore")
def test_a_constant_size_on_symbolic_axes_is_named_in_the_report():
    m = HalfTheHeight().eval()
    result = onnxpoolfix.patch(_fallthrough(m, torch.randn(1, 2, 20, 13)))
    (note,) = [n for n in result.report.notes if n.code == "constant-output-size"]
    assert note.data["count"] == 1 and "10x5" in note and "onnxpoolfix.export" in note
    x = np.random.default_rng(0).standard_normal((1, 2, 31, 13)).astype(np.float32)
    (got,) = ort_run(result.model, {"x": x})
    assert got.shape != tuple(m(torch.from_numpy(x)).shape)  # what the note warns of: the traced size's 10 rows


class HalfTheHeightTraced(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x.shape[2] // 2, 5))


@pytest.mark.filterwarnings("ignore")
def test_a_static_file_or_a_computed_size_gets_no_such_note():
    static = onnxpoolfix.patch(onnx.load(FIXTURES / "avg2d_8x9_to_5x7.onnx"))
    computed = onnxpoolfix.patch(_fallthrough(HalfTheHeightTraced().eval(), torch.randn(1, 2, 20, 13)))
    for result in (static, computed):
        assert result.report.nodes and not [n for n in result.report.notes if n.code == "constant-output-size"]

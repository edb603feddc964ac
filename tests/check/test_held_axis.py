"""check/sizes.py: a file whose own ops run only at the traced size of one symbolic axis (timm's BAT attention,
exported at 256x512, runs at height 256 alone: a branch on H // 8 frozen) is checked at the sizes it runs at,
that axis held, instead of refused for want of sizes (review41: exit 4, 'the model ran at none of the input
sizes tried', though the file and OUT ran at 256x256)."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from helpers import ort_run

import onnxpoolfix

torch = pytest.importorskip("torch")
F = torch.nn.functional


class HeldHeight(torch.nn.Module):
    """A [16, 16] MatMul over the rows (runs only where H is 16, its traced size), then adaptive pools."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        y = torch.matmul(self.mix, x)
        return F.adaptive_max_pool2d(y, (4, 1)) + F.adaptive_avg_pool2d(y, (1, 3))[..., :1, :1]


@pytest.mark.filterwarnings("ignore")
def test_an_axis_the_file_runs_at_one_size_of_is_held_and_the_others_checked():
    torch.manual_seed(0)
    m = HeldHeight().eval()
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.randn(1, 2, 16, 20),), buf, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    result = onnxpoolfix.patch(onnx.load_from_string(buf.getvalue()))  # refused before: no size it runs at
    assert result.report.check_passed
    (note,) = [n for n in result.report.notes if n.code == "checked-sizes"]
    assert note.data["held"] == [{"input": "x", "axis": 2, "size": 16}]
    shapes = {tuple(s) for n in result.report.nodes for s in n.checked_shapes}
    assert {s[2] for s in shapes} == {16} and len({s[3] for s in shapes}) >= 3, shapes  # W still varies
    for w in (7, 20, 33):
        x = np.random.default_rng(w).standard_normal((1, 2, 16, w)).astype(np.float32)
        (got,) = ort_run(result.model, {"x": x})
        with torch.no_grad():
            np.testing.assert_allclose(got, m(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)

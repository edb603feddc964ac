"""--input-shape kept in OUT at a size other than the traced one: torch declared the dims no dynamic_axes names
(a graph output's T, an intermediate's) at the traced size. onnxruntime refused OUT where the NaN guard's If of a
max pool reads such a tensor ("Can't merge shape info": review22 case 243), after exit 0. The declarations are
dropped where the binding stays; OUT loads and equals torch at the bound size."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from onnxpoolfix import patch


class CrnnHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.hpool = nn.AdaptiveAvgPool2d((1, None))
        self.rnn = nn.Linear(8, 8)
        self.tpool = nn.AdaptiveMaxPool1d(7)

    def forward(self, x):
        h = self.hpool(x).flatten(2)
        r = self.rnn(h.permute(2, 0, 1))
        return r, self.tpool(r.permute(1, 2, 0)).flatten(1)


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_a_binding_kept_in_out_drops_torchs_traced_declarations(opset):
    torch.manual_seed(0)
    m = CrnnHead().eval()
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.randn(3, 8, 18, 31),), buf, dynamo=False, opset_version=opset, input_names=["x"],
                      dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    result = patch(onnx.load_from_string(buf.getvalue()), input_shapes={"x": [3, 8, 9, 23]})
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 8, 9, 23)
    with torch.no_grad():
        want = [t.numpy() for t in m(x)]
    for got, w in zip(sess.run(None, {"x": x.numpy()}), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


class Pyramid(nn.Module):
    """Pooled levels concatenated: the graph output is a Concat's, a standard op's, whose declaration goes."""

    def __init__(self):
        super().__init__()
        self.pools = nn.ModuleList([nn.AdaptiveAvgPool2d(k) for k in (2, 3, 6)])

    def forward(self, x):
        return torch.cat([nn.functional.interpolate(p(x), size=(8, 8)) for p in self.pools], 1)


@pytest.mark.parametrize("target", ["onnxruntime", "portable"])
def test_a_binding_kept_in_out_keeps_the_outputs_shape_field(target):
    """review61: the graph output lost its whole ``shape`` (not only the traced dims), and the ONNX checker refuses
    a top-level output without one ("Field 'shape' of 'type' is required but missing"), after exit 0 (portable)."""
    m = Pyramid().eval()
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.randn(1, 3, 17, 13),), buf, dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    result = patch(onnx.load_from_string(buf.getvalue()), target=target, input_shapes={"x": [1, 3, 17, 13]})
    assert "input-shapes-kept" in [n.code for n in result.report.notes]
    onnx.checker.check_model(result.model, full_check=True)
    x = torch.randn(1, 3, 17, 13)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], m(x).numpy(), rtol=1e-5, atol=1e-6)

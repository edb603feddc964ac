"""A symbolic axis pooled to 1, or following the input (torch's None), needs no window arithmetic: the global
lowering's ReduceMean/ReduceMax, at any opset (review44: an opset 9 CRNN's `(None, 1)` and `(1, None)` under
dynamic H/W were refused "needs opset 11 (Range)"). OUT is compared with torch at sizes other than the traced
one, odd and non-square, and with a NumPy mean."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from helpers import ort_run

import onnxpoolfix

torch = pytest.importorskip("torch")
nn = torch.nn


class NoneOnePermuted(nn.Module):  # EasyOCR's head: [b, c, h, w] -> [b, w, c, h], h pooled to 1
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((None, 1))

    def forward(self, x):
        return self.pool(x.permute(0, 3, 1, 2)).squeeze(3)


class OneNone(nn.Module):  # a CRNN's height pooled to 1, the width kept
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((1, None))

    def forward(self, x):
        return self.pool(x).squeeze(2)


def _export(module, path, opset):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, 3, 37, 23),), str(path), dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load(str(path))


@pytest.mark.parametrize("opset", [9, 17])
@pytest.mark.parametrize("cls", [NoneOnePermuted, OneNone])
def test_symbolic_global_pool_exact_at_other_sizes(tmp_path, cls, opset):
    module = cls().eval()
    model = _export(module, tmp_path / "m.onnx", opset)
    assert any(n.domain == "org.pytorch.aten" or n.op_type == "ATen" for n in model.graph.node)
    result = onnxpoolfix.patch(model)
    (node,) = result.report.nodes
    assert node.lowering == "global"
    ops = {n.op_type for n in result.model.graph.node}
    assert "Range" not in ops and not any(n.domain == "org.pytorch.aten" for n in result.model.graph.node)
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 37, 23), (2, 3, 5, 41), (1, 3, 1, 1), (1, 3, 64, 7), (3, 3, 2, 13)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = ort_run(result.model, {"x": x})
        want = module(torch.from_numpy(x)).numpy()
        mean = x.mean(axis=2) if cls is OneNone else x.transpose(0, 3, 1, 2).mean(axis=3)
        assert got.shape == want.shape == mean.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, mean, rtol=1e-5, atol=1e-6)


def test_symbolic_pool_to_more_than_one_still_needs_the_dynamic_lowering(tmp_path):
    """The global lowering takes only 1 and None: `(None, 3)` of a symbolic axis at opset 9 stays refused, with
    the opset that would do."""
    class NoneThree(nn.Module):
        def forward(self, x):
            return nn.functional.adaptive_avg_pool2d(x, (None, 3))

    model = _export(NoneThree().eval(), tmp_path / "m.onnx", 9)
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as e:
        onnxpoolfix.patch(model)
    assert e.value.data["opset"] == 11

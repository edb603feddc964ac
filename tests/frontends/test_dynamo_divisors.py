"""A Div by a constant that holds no window lengths ends no adaptive average. timm's csatv2 normalises its DCT
coefficients as ``(x[:, :, zigzag] - mean) / std``: under symbolic H/W that Gather + Div by a constant looked
like a decomposition frozen at the traced size, and a model with no adaptive pooling at all (or with pools
onnxpoolfix does replace) was refused, exit 4, in every dynamic export, onnxpoolfix.export included. Every
OUT is compared with torch at sizes other than the traced one."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from export_cache import dynamo_export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from onnxpoolfix import patch

pytestmark = pytest.mark.torch


class DctNorm(nn.Module):
    """csatv2's LearnableDct2d tail: k x k patches, the zigzag Gather, (x - mean) / std; then, with ``pool``,
    an AdaptiveAvgPool2d(3) of the result (csatv2's SpatialAttention pools to 7x7)."""

    def __init__(self, pool: bool = False, k: int = 4):
        super().__init__()
        self.k = k
        self.perm = torch.randperm(k * k).tolist()
        self.register_buffer("mean", torch.randn(3, k * k))
        self.register_buffer("var", torch.rand(3, k * k) + 0.5)
        self.conv = nn.Conv2d(k * k, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(3) if pool else None

    def forward(self, x):
        b, c, h, w = x.shape
        x = x.reshape(b, c, h // self.k, self.k, w // self.k, self.k).permute(0, 2, 4, 1, 3, 5)
        x = x.reshape(-1, c, self.k * self.k)[:, :, self.perm]
        x = (x - self.mean) / (self.var ** 0.5 + 1e-8)
        x = self.conv(x.reshape(b, h // self.k, w // self.k, c, -1).permute(0, 3, 4, 1, 2)[:, 0])  # as csatv2
        return x if self.pool is None else self.pool(x)


TRACED = (1, 3, 32, 24)
SIZES = [(1, 3, 44, 36), (1, 3, 20, 52), (1, 3, 64, 64)]


def _module(pool: bool) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return DctNorm(pool).eval()


def _torchscript(module) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(*TRACED),), f, dynamo=False, input_names=["x"], opset_version=17,
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(f.getvalue())


def _dynamo(module) -> onnx.ModelProto:
    h, w = torch.export.Dim("H", min=8, max=256), torch.export.Dim("W", min=8, max=256)
    return dynamo_export(module, (torch.randn(*TRACED),), input_names=["x"], dynamic_shapes={"x": {2: h, 3: w}})


def _assert_matches_torch(module, model):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for shape in [TRACED, *SIZES]:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(shape))


@pytest.mark.parametrize("exporter", [_torchscript, _dynamo])
def test_a_division_by_a_non_length_constant_is_no_frozen_region(exporter):
    module = _module(pool=False)
    result = patch(exporter(module))
    assert not result.report.nodes and not result.report.suspects
    _assert_matches_torch(module, result.model)


@pytest.mark.parametrize("exporter", [_torchscript, _dynamo])
def test_the_pool_after_it_is_replaced_and_exact(exporter):
    module = _module(pool=True)
    result = patch(exporter(module), traced_shapes={"x": list(TRACED)})
    assert [n.lowering for n in result.report.nodes] == ["dynamic"] and not result.report.suspects
    _assert_matches_torch(module, result.model)

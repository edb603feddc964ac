"""Real network architectures exported at sizes where their adaptive pooling is non-divisible.

The architectures are written out here (torchvision's definitions; torchvision itself does not import
beside torch 2.13's CPU wheel). Weights are random: the pooling arithmetic does not care, and no hub
download is possible. Fast variants shrink the channel widths; the slow ones are full size.
"""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxpoolfix
from onnxpoolfix.frontends.leftovers import ATEN_DOMAIN

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def alexnet(width: float = 1.0) -> nn.Module:
    c = [max(4, int(v * width)) for v in (64, 192, 384, 256, 256)]
    hidden = max(8, int(4096 * width))
    return nn.Sequential(
        nn.Conv2d(3, c[0], 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(c[0], c[1], 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(c[1], c[2], 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(c[2], c[3], 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(c[3], c[4], 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(),
        nn.Dropout(), nn.Linear(c[4] * 36, hidden), nn.ReLU(inplace=True),
        nn.Dropout(), nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, 1000),
    )


def vgg11(width: float = 1.0) -> nn.Module:
    cfg = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    layers, cin = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            cout = max(4, int(v * width))
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
            cin = cout
    hidden = max(8, int(4096 * width))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
                         nn.Linear(cin * 49, hidden), nn.ReLU(True), nn.Linear(hidden, 1000))


class PyramidPoolingModule(nn.Module):
    """PSPNet's / UPerNet's PPM: pool to 1, 2, 3, 6; 1x1 conv; upsample back; concat; fuse."""

    def __init__(self, cin: int = 64, bins=(1, 2, 3, 6)):
        super().__init__()
        self.stages = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(b), nn.Conv2d(cin, cin // 4, 1, bias=False), nn.ReLU()) for b in bins)
        self.fuse = nn.Conv2d(cin + len(bins) * (cin // 4), 16, 3, padding=1)

    def forward(self, x):
        h, w = x.shape[-2:]
        feats = [x] + [F.interpolate(s(x), size=(h, w), mode="bilinear", align_corners=False) for s in self.stages]
        return self.fuse(torch.cat(feats, 1))


class AreaDownsampleNet(nn.Module):
    """F.interpolate(mode='area') as used for mask/feature downsampling."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return F.interpolate(self.conv(x), size=(13, 17), mode="area")


def _export(module, x, **kw) -> onnx.ModelProto:
    module.eval()
    f = io.BytesIO()
    torch.onnx.export(module, (x,), f, dynamo=False, input_names=["x"], output_names=["y"],
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, **kw)
    return onnx.load_from_string(f.getvalue())


def _assert_patched_matches_torch(module, x, min_nodes=1):
    torch.manual_seed(0)
    model = _export(module, x)
    n_left = sum(n.domain == ATEN_DOMAIN for n in model.graph.node)
    assert n_left >= min_nodes, "the exporter lowered the pooling itself: not a case for this test"
    result = onnxpoolfix.patch(model)
    assert len(result.report.nodes) == n_left and result.report.check_passed
    assert not any(n.domain == ATEN_DOMAIN for n in result.model.graph.node)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = module(x).numpy()
    got = sess.run(None, {"x": x.numpy()})[0]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)
    return result.report


def test_alexnet_at_300x300_pools_8x8_to_6x6():
    torch.manual_seed(0)
    report = _assert_patched_matches_torch(alexnet(width=0.125), torch.randn(2, 3, 300, 300))
    node = report.nodes[0]
    assert node.input_shape[2:] == [8, 8] and node.output_shape[2:] == [6, 6]
    assert node.lowering != "pool"  # 8 -> 6 has no single kernel/stride


def test_vgg11_at_300x300_pools_9x9_to_7x7():
    torch.manual_seed(0)
    report = _assert_patched_matches_torch(vgg11(width=0.125), torch.randn(1, 3, 300, 300))
    assert report.nodes[0].input_shape[2:] == [9, 9]


def test_pyramid_pooling_on_a_16x16_feature_map():
    torch.manual_seed(0)
    report = _assert_patched_matches_torch(PyramidPoolingModule(), torch.randn(1, 64, 16, 16), min_nodes=2)
    assert sorted(tuple(n.output_shape[2:]) for n in report.nodes) == [(3, 3), (6, 6)]


def test_area_interpolation():
    torch.manual_seed(0)
    _assert_patched_matches_torch(AreaDownsampleNet(), torch.randn(1, 3, 40, 45))


class AreaScaleNet(nn.Module):
    """F.interpolate(mode='area', scale_factor=...): the exporter writes the size as Constant -> Floor ->
    Unsqueeze -> Concat (all constants at a static input size), not as one constant."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale, mode="area")


@pytest.mark.parametrize("scale, size", [(0.5, (45, 61)), ((0.3, 0.7), (37, 23)), (1.5, (9, 10))])
def test_area_interpolation_with_a_scale_factor(scale, size):
    torch.manual_seed(0)
    model = _export(AreaScaleNet(scale), torch.randn(1, 3, *size))
    assert {"Floor", "Concat"} <= {n.op_type for n in model.graph.node}, "the size is computed: a case for this test"
    _assert_patched_matches_torch(AreaScaleNet(scale), torch.randn(1, 3, *size))
    patched = onnxpoolfix.patch(model).model
    assert [n.op_type for n in patched.graph.node if n.op_type in ("Floor", "Concat", "Unsqueeze")] == [], \
        "the folded size's nodes go with the leftover"


@pytest.mark.slow
@pytest.mark.parametrize("size", [(300, 300), (256, 320)])
def test_full_size_alexnet(size):
    torch.manual_seed(0)
    _assert_patched_matches_torch(alexnet(), torch.randn(1, 3, *size))

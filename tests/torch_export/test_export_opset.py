"""The dynamo exporter's opset_version below 18: torch converts its graph down through onnx's C API, which drops
every node's metadata, and without it a genuine MaxPool2d(2, 2) under symbolic H/W cannot be told from an
adaptive pool frozen at the traced size. Patching torch's own file must refuse (never a file wrong at other sizes);
onnxpoolfix.export converts keeping the metadata, and its file matches torch at sizes the test picks."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import ort_session

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
pytestmark = pytest.mark.torch


def vgg_like() -> nn.Module:
    """VGG's layout, small: genuine 2x2 max pools (kernel = stride, as an adaptive pool of a divisible size
    decomposes), then AdaptiveAvgPool2d((5, 7)) (non-uniform windows at the example's size)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(4, 4, 3, padding=1),
                         nn.MaxPool2d(2, 2), nn.AdaptiveAvgPool2d((5, 7))).eval()


X = (1, 3, 37, 41)  # pooled 8x9 -> 5x7


def _dims():
    return {"input": {2: torch.export.Dim("H", min=20, max=400), 3: torch.export.Dim("W", min=20, max=400)}}


def test_torchs_opset_17_file_is_refused_not_patched(tmp_path: Path) -> None:
    path = tmp_path / "torch17.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(vgg_like(), (torch.randn(*X),), str(path), dynamo=True, opset_version=17,
                          input_names=["x"], dynamic_shapes=_dims())
    model = onnx.load(str(path))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert not any(n.metadata_props for n in model.graph.node)  # what the test is about: torch dropped it
    with pytest.raises(UnsupportedNodeError) as err:  # with the traced size too: the MaxPools stay undecided
        onnxpoolfix.patch(model, traced_shapes={"x": list(X)})
    assert "max_pool2d" in str(err.value)


@pytest.mark.parametrize("opset", [17, 16])
def test_export_below_opset_18_keeps_what_tells_the_pools_apart(tmp_path: Path, opset: int) -> None:
    m, out = vgg_like(), tmp_path / "vgg.onnx"
    report = onnxpoolfix.export(m, (torch.randn(*X),), out, opset_version=opset, input_names=["x"],
                                dynamic_shapes=_dims())
    assert report.check_passed and [n.lowering for n in report.nodes] == ["dynamic"]
    model = onnx.load(str(out))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    assert [n.op_type for n in model.graph.node].count("MaxPool") == 2  # the genuine pools, as written
    sess = ort_session(model)
    for hw in [(37, 41), (22, 23), (35, 400), (100, 61), (399, 33), (30, 30)]:  # odd, non-square, upsampling
        x = torch.randn(1, 3, *hw)
        got = sess.run(None, {"x": x.numpy()})[0]
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"at {hw}")


def test_a_graph_the_converter_cannot_take_stays_valid(tmp_path: Path) -> None:
    """A mean over [2, 3] (ReduceMean with its axes as an input from opset 18) that onnx's converter cannot
    take to opset 17: the file stays at opset 18 as torch leaves it, valid, and matches torch (converted from a
    later opset, torchvision's MNASNet came out at 17 with ReduceMean-18's attributes: measured)."""
    torch.manual_seed(0)

    class MeanHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.pool = nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((5, 7))

        def forward(self, x):
            y = self.conv(x)
            return self.pool(y), y.mean([2, 3])

    m, out = MeanHead().eval(), tmp_path / "mean.onnx"
    onnxpoolfix.export(m, (torch.randn(*X),), out, opset_version=17, input_names=["x"])
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    x = torch.randn(*X)
    got = ort_session(model).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = [t.numpy() for t in m(x)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

"""onnxpoolfix.export where the file follows a branch torch took at the example (found by a review, items 4-7).

* A range torch narrowed, where the module fails at every size tried past it but runs at others (a branch
  needing H % 7 == 0): refused, since failing at a sample shows nothing.
* Dims declared apart that torch unified (a branch on H == W): refused where torch runs them apart.
* Dims declared down to 1: compared with torch at 1 each alone and all together (a branch on H == W == 1).
* dynamic_axes (either exporter): the same checks as dynamic_shapes.

Each premise (the module runs where the file would be wrong) is checked in torch itself.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional
Dim = torch.export.Dim
pytestmark = pytest.mark.torch


class _BandsOfSeven(nn.Module):
    """Past H = 64, 7-row bands are averaged first: torch runs there only at H % 7 == 0."""

    def forward(self, x):
        b, c, h, w = x.shape
        if h > 64:
            x = x.view(b, c, h // 7, 7, w).mean(3) * 2.0
        return F.adaptive_avg_pool2d(x, (3, 3))


@pytest.mark.parametrize("dim", ["named", "DYNAMIC"])
def test_a_narrowed_range_torch_fails_at_every_try_past_is_refused(tmp_path: Path, dim: str) -> None:
    from onnxpoolfix.torch_export.outside import outside_sizes
    from onnxpoolfix.torch_export.specialised import Specialised

    m, out = _BandsOfSeven().eval(), tmp_path / "m.onnx"
    tried = outside_sizes(Specialised("x", 2, "h", None, ranges=((8, 2048), (8, 64))))
    assert all(v % 7 for v in tried) and m(torch.randn(1, 2, 70, 9)).shape == (1, 2, 3, 3)  # the premise
    d = Dim("h", min=8, max=2048) if dim == "named" else Dim.DYNAMIC
    with pytest.raises(onnxpoolfix.ShapeError, match=r"but torch narrowed it to \[\d, 64\]"):
        onnxpoolfix.export(m, (torch.randn(1, 2, 56, 9),), out, dynamic_shapes={"x": {2: d}})
    assert not out.exists()


class _SquareBranch(nn.Module):
    def forward(self, x):
        y = x * 3.0 if x.shape[2] == x.shape[3] else x * 2.0
        return F.adaptive_avg_pool2d(y, (3, 3))


@pytest.mark.parametrize("how", ["DYNAMIC", "AUTO", "str", "named"])
def test_dims_declared_apart_that_torch_unified_are_refused(tmp_path: Path, how: str) -> None:
    m, out = _SquareBranch().eval(), tmp_path / "m.onnx"
    assert not torch.allclose(m(torch.ones(1, 2, 32, 40))[0, 0, 0, 0], torch.tensor(3.0))  # the premise
    h, w = {"DYNAMIC": (Dim.DYNAMIC,) * 2, "AUTO": (Dim.AUTO,) * 2, "str": ("h", "w"),
            "named": (Dim("h", min=8, max=512), Dim("w", min=8, max=512))}[how]
    with pytest.raises(onnxpoolfix.ShapeError, match=r"dim 3 of input 'x' .* declared apart from dim 2 of input "
                                                     r"'x' but torch made them one dim") as info:
        onnxpoolfix.export(m, (torch.randn(1, 2, 32, 32),), out, dynamic_shapes={"x": {2: h, 3: w}})
    assert "the same Dim" in info.value.hint and not out.exists()


def test_dims_torch_unified_because_the_module_needs_them_equal_export(tmp_path: Path) -> None:
    """x + y: torch runs only at equal batches (2 and up), so unifying them loses nothing."""
    class Add(nn.Module):
        def forward(self, x, y):
            return F.adaptive_avg_pool2d(x + y, (3, 3))

    m, out = Add().eval(), tmp_path / "m.onnx"
    d = {0: Dim.DYNAMIC}
    onnxpoolfix.export(m, (torch.randn(2, 2, 9, 9), torch.randn(2, 2, 9, 9)), out, dynamic_shapes=(d, d))
    assert out.exists()


class _OneByOne(nn.Module):
    def forward(self, x):
        y = x * 3.0 if x.shape[2] == 1 and x.shape[3] == 1 else x
        return F.adaptive_avg_pool2d(y, (3, 3))


def test_dims_declared_from_one_are_compared_at_one_together(tmp_path: Path) -> None:
    m, out = _OneByOne().eval(), tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"at x:1x2x1x1"):
        onnxpoolfix.export(m, (torch.randn(1, 2, 20, 21),), out, dynamic_shapes={"x": {2: Dim.DYNAMIC,
                                                                                       3: Dim.DYNAMIC}})
    assert not out.exists()


class _Branches(nn.Module):
    def __init__(self, which: str):
        super().__init__()
        self.which = which

    def forward(self, x):
        b, c, h, w = x.shape
        if self.which == "big" and h > 64:
            x = x.view(b, c, h // 8, 8, w).mean(3) * 2.0
        if self.which == "one" and h == 1:
            x = x * 3.0
        return F.adaptive_avg_pool2d(x, (3, 3))


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("which", ["big", "one"])
def test_dynamic_axes_get_the_range_checks(tmp_path: Path, which: str, dynamo: bool) -> None:
    m, out = _Branches(which).eval(), tmp_path / "m.onnx"
    narrowed = r"torch narrowed it" if dynamo else r"torch.export, probing the module, narrowed it"  # the probe's
    error, match = ((onnxpoolfix.ShapeError, rf"\(dynamic_axes\) but {narrowed} to \[\d, 64\]") if which == "big"
                    else (onnxpoolfix.TorchMismatchError, r"at x:1x2x1x"))
    with pytest.raises(error, match=match):
        onnxpoolfix.export(m, (torch.randn(1, 2, 56, 9),), out, dynamo=dynamo, input_names=["x"],
                           dynamic_axes={"x": {2: "H", 3: "W"}})
    assert not out.exists()


class _CoordAttention(nn.Module):
    """CoordAttention's pools, concatenated and split back: torch.export, probing dynamic_axes, narrows W to
    [3, inf] (its floor of 2 on the strided convolution's output); no branch, the TorchScript file right at
    W = 2 as everywhere."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):
        x = self.conv(x)
        h, w = x.shape[2], x.shape[3]
        y = torch.cat([F.adaptive_avg_pool2d(x, (None, 1)), F.adaptive_avg_pool2d(x, (1, None)).transpose(2, 3)], 2)
        a, b = torch.split(y, [h, w], dim=2)
        return x * a.sigmoid() * b.transpose(2, 3).sigmoid()


class _FourWide(nn.Module):
    """From W = 4 a 4-wide scale (torch.export: W in [4, inf]); the traced file multiplies by it at every W and
    crashes at W = 2 and 3, where torch runs (at W = 1 both broadcast)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.arange(1.0, 5.0))

    def forward(self, x):
        y = F.adaptive_avg_pool2d(x, (3, None))
        return y[..., :4] * self.scale if x.shape[3] >= 4 or x.shape[3] == 1 else y


class _BranchAtTwo(nn.Module):
    def forward(self, x):
        y = F.adaptive_avg_pool2d(x, (3, 5))
        return y * 2.0 if x.shape[3] > 3 or x.shape[3] == 1 else y  # torch.export: W in [4, inf]


def test_a_torchscript_file_is_compared_with_torch_where_torch_export_narrowed(tmp_path: Path) -> None:
    """With dynamo=False the file is the tracer's, not torch.export's: a range torch.export narrowed was refused
    as if the file kept to it (CoordAttention, PSPNet, mobilenet_v3_small: '[3, inf]'). The sizes left out are
    compared with torch instead: the file is written where it matches there (onnxruntime and torch compared
    here again, at W = 2 among others), and refused where a branch at those sizes makes it wrong."""
    out = tmp_path / "m.onnx"
    m = _CoordAttention().eval()
    onnxpoolfix.export(m, (torch.randn(1, 3, 37, 53),), out, dynamo=False, input_names=["x"],
                       dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 37, 2), (2, 3, 2, 9), (1, 3, 37, 53), (3, 3, 64, 31)]:
        x = torch.randn(*shape)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], m(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"onnxruntime fails at x:1x3x37x[23], where the torch"):
        onnxpoolfix.export(_FourWide().eval(), (torch.randn(1, 3, 37, 53),), tmp_path / "c.onnx", dynamo=False,
                           input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    assert not (tmp_path / "c.onnx").exists()  # a file that crashes where torch runs is no file for those sizes
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"at x:1x3x37x2"):
        onnxpoolfix.export(_BranchAtTwo().eval(), (torch.randn(1, 3, 37, 53),), tmp_path / "b.onnx", dynamo=False,
                           input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    assert not (tmp_path / "b.onnx").exists()

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
    from onnxpoolfix.torch_export.declared import Specialised
    from onnxpoolfix.torch_export.sizes import outside_sizes

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
    error, match = ((onnxpoolfix.ShapeError, r"\(dynamic_axes\) but torch narrowed it to \[\d, 64\]") if which == "big"
                    else (onnxpoolfix.TorchMismatchError, r"at x:1x2x1x"))
    with pytest.raises(error, match=match):
        onnxpoolfix.export(m, (torch.randn(1, 2, 56, 9),), out, dynamo=dynamo, input_names=["x"],
                           dynamic_axes={"x": {2: "H", 3: "W"}})
    assert not out.exists()

"""onnxpoolfix.export of a module that branches on one exact size (``if x.shape[3] == 41``), traced elsewhere:
both exporters write the branch taken at the example, so the file is wrong at W = 41 while it accepts every
W. torch.export records no range for it, only a guard (``L['x'].size()[3] != 41``); the comparison with
torch samples sizes and used to miss 41 (exit without error, the file 0.2 off there). It is now also run where
a guard of torch.export is false: refused, naming the guard; a branch that gives the same result there, or a
declared range that leaves 41 out, still exports, and the file matches torch."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
F = torch.nn.functional
Dim = torch.export.Dim
pytestmark = pytest.mark.torch


class Branch(torch.nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        y = F.adaptive_avg_pool2d(x, (3, 5))
        if x.shape[3] == 41:  # traced at 67: the file holds the other branch
            y = y * self.factor
        return y


ROUTES = {
    "dynamo, Dim ranges": dict(dynamo=True, dynamic_shapes=({2: Dim("H", min=2, max=400), 3: Dim("W", min=2, max=400)},)),
    "dynamo, Dim.DYNAMIC": dict(dynamo=True, dynamic_shapes=({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},)),
    "torchscript, dynamic_axes": dict(dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}}),
}


def _skip_where_torch_refuses(route: str, tmp_path: Path) -> None:
    """torch 2.9's torch.onnx.export refuses a Dim range that the branch narrows (torch's own error, no file);
    from 2.13 on it retries without the range and writes the one branch, which the comparison then finds."""
    if "Dim ranges" not in route:
        return
    try:
        torch.onnx.export(Branch(1.0).eval(), (torch.randn(1, 3, 45, 67),), str(tmp_path / "probe.onnx"),
                          **ROUTES[route])
    except Exception as e:  # torch's TorchExportError around torch.export's UserError
        if "Constraints violated" not in str(e):
            raise
        pytest.skip(f"torch {torch.__version__} refuses the range itself (Constraints violated)")


def _torch_and_file(module, path: Path, shape) -> tuple[np.ndarray, np.ndarray]:
    x = torch.randn(*shape)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        return sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0], module(x).numpy()


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_branch_on_one_exact_size_is_refused_naming_the_guard(route, tmp_path: Path):
    _skip_where_torch_refuses(route, tmp_path)
    module, out = Branch(2.0).eval(), tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"x:1x3x\d+x41\b.*size\(\)\[3\] != 41") as err:
        onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, **ROUTES[route])
    assert "torch.cond" in err.value.hint
    assert not out.exists()
    # the premise, run here (not through the tool's own comparison): the file written without the comparison
    # is wrong at 41 and right at 40
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, verify=False, **ROUTES[route])
    got, want = _torch_and_file(module, out, (1, 3, 20, 41))
    assert np.abs(got - want).max() > 1e-2
    got, want = _torch_and_file(module, out, (1, 3, 20, 40))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_branch_that_changes_nothing_there_still_exports(route, tmp_path: Path):
    _skip_where_torch_refuses(route, tmp_path)
    module, out = Branch(1.0).eval(), tmp_path / "m.onnx"
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, **ROUTES[route])
    for shape in [(1, 3, 45, 41), (1, 3, 7, 40), (1, 3, 45, 67), (1, 3, 2, 9)]:
        got, want = _torch_and_file(module, out, shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_range_that_leaves_the_size_out_exports(tmp_path: Path):
    module, out = Branch(2.0).eval(), tmp_path / "m.onnx"
    dims = ({2: Dim("H", min=2, max=400), 3: Dim("W", min=42, max=400)},)
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, dynamo=True, dynamic_shapes=dims)
    assert onnx.load(out).graph.input[0].type.tensor_type.shape.dim[3].dim_param
    for shape in [(1, 3, 45, 42), (1, 3, 7, 400), (1, 3, 45, 67)]:
        got, want = _torch_and_file(module, out, shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class EvenBranch(torch.nn.Module):
    def forward(self, x):
        y = F.adaptive_avg_pool2d(x, (3, 5))
        if x.shape[3] == 82:  # W = 41 of the width declared as 2 * W
            y = y * 2.0
        return y


def test_a_guard_on_a_dim_declared_as_an_expression_is_compared_too(tmp_path: Path):
    # the width is 2 * W: torch's symbol for W appears in no dim alone, and its guards used to add no size
    module, out = EvenBranch().eval(), tmp_path / "m.onnx"
    dims = ({3: 2 * Dim("W", min=2, max=200)},)
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"x:1x3x45x82\b.*size\(\)\[3\] != 82"):
        onnxpoolfix.export(module, (torch.randn(1, 3, 45, 68),), out, dynamo=True, dynamic_shapes=dims)
    assert not out.exists()
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 68),), out, dynamo=True, dynamic_shapes=dims, verify=False)
    got, want = _torch_and_file(module, out, (1, 3, 45, 82))
    assert np.abs(got - want).max() > 1e-2


class Scaled(torch.nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (3, 5)), F.interpolate(x, scale_factor=self.scale, mode="nearest")


@pytest.mark.parametrize("route", ["dynamo, Dim.DYNAMIC", "torchscript, dynamic_axes"])
def test_a_size_torch_computes_in_double_is_compared_where_float32_rounds_apart(route, tmp_path: Path):
    # torch's output height is trunc(0.7 * H) in double: 62 at H = 90; the file's Resize computes it in
    # float32 (63). No guard and no range says so, and the sampled sizes missed 90.
    module, out = Scaled(0.7).eval(), tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"x:1x3x\d+x90\b.*in double") as err:
        onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, **ROUTES[route])
    assert "integers" in err.value.hint
    assert not out.exists()
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, verify=False, **ROUTES[route])
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: np.zeros((1, 3, 20, 90), np.float32)})[1]
    assert got.shape[3] == 63 and int(0.7 * 90) == 62  # the premise, apart from the tool


@pytest.mark.parametrize("route", ["dynamo, Dim.DYNAMIC", "torchscript, dynamic_axes"])
def test_a_scale_float32_holds_exactly_adds_no_refusal(route, tmp_path: Path):
    module, out = Scaled(0.5).eval(), tmp_path / "m.onnx"
    onnxpoolfix.export(module, (torch.randn(1, 3, 45, 67),), out, **ROUTES[route])
    for shape in [(1, 3, 45, 90), (1, 3, 7, 41), (1, 3, 2, 9)]:
        sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        x = torch.randn(*shape)
        got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
        for g, w in zip(got, module(x)):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_a_guard_naming_a_huge_integer_adds_no_size_torch_cannot_allocate(tmp_path: Path):
    # torch 2.9 keeps guards such as L['x'].size()[2] <= 2147483647: its integer +-2 was a length to compare
    # at, and building that input failed the export with torch's out-of-memory error
    from types import SimpleNamespace

    from onnxpoolfix.torch_export.guards import NAMED_MAX, guard_points

    module, x = Branch(2.0).eval(), torch.randn(1, 3, 45, 67)
    dims = ({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},)
    ep = torch.export.export(module, (x,), dynamic_shapes=dims)
    ep._guards_code = ["L['x'].size()[2] <= 2147483647", "L['x'].size()[3] != 41"]
    program = SimpleNamespace(exported_program=ep)
    out = tmp_path / "m.onnx"
    onnxpoolfix.export(module, (x,), out, dynamo=True, dynamic_shapes=dims, verify=False)
    points = guard_points(torch, module, (x,), {}, program, onnx.load(out), {"dynamic_shapes": dims}, True)
    lengths = [n for sizes in points.values() for n, _ in sizes]
    assert 41 in lengths and max(lengths) <= NAMED_MAX, points

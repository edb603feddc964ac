"""``--input-shape`` on a dynamo file binds OUT (review61): where a region pools a symbolic axis, OUT's inputs are
bound at the given size and the planner picks a static lowering (no window arithmetic at run time: the portable
target's windows are AveragePools, no one-axis ReduceMean whose axes input pnnx drops at opset 18), the report says
so (``input-shapes-kept``, as for a FALLTHROUGH leftover), the differential check compares the bound OUT with the
file as torch wrote it at that size (``equals-original``), and OUT equals torch there. A bound size other than a
given traced size is refused (nothing known right there would check OUT). Before, OUT kept its symbolic dims and
its ``dynamic`` / ``window_slices`` lowerings, which the converters needing static windows cannot take."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import assert_matches_torch, export_dynamic_hw, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import ArgumentError, ShapeError

pytestmark = pytest.mark.torch


class AvgPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        return self.pool(x)


class MaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d((5, 7))

    def forward(self, x):
        return self.pool(x)


class Area(nn.Module):
    def forward(self, x):
        return F.interpolate(x, size=(6, 6), mode="area")


class Pyramid(nn.Module):
    """PSPNet's pyramid (1, 2, 3, 6), each level upsampled back to the map's size."""

    def __init__(self):
        super().__init__()
        self.pools = nn.ModuleList([nn.AdaptiveAvgPool2d(k) for k in (1, 2, 3, 6)])

    def forward(self, x):
        return torch.cat([F.interpolate(p(x), size=x.shape[-2:], mode="nearest") for p in self.pools], 1)


#: name -> (module, traced H x W, whether only the traced size decides it: a frozen MaxPool's output size)
CASES = {
    "avg": (AvgPool, (17, 13), False),
    "pyramid": (Pyramid, (17, 13), False),
    "area": (Area, (17, 13), False),
    "max": (MaxPool, (15, 14), True),  # symbolic sizes export a max pool only where it divides: k3x2 there
}
_EXPORTS: dict = {}


def _case(name: str, named: bool = False):
    if (name, named) not in _EXPORTS:
        cls, hw, traced = CASES[name]
        module = cls().eval()
        model = export_symbolic_hw(module, hw, low=4, high=256) if named else export_dynamic_hw(module, hw)
        _EXPORTS[name, named] = module, model, hw, traced
    return _EXPORTS[name, named]


def _dims(model: onnx.ModelProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]


def _one_axis_means(model: onnx.ModelProto) -> list[str]:
    """ReduceMeans reading their axes from an input of one axis (what pnnx drops at opset 18)."""
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    consts.update({n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    return [n.name for n in model.graph.node if n.op_type == "ReduceMean" and len(n.input) > 1 and n.input[1]
            and (n.input[1] not in consts or np.asarray(consts[n.input[1]]).size == 1)]


def _assert_bound(result, module, shape, target: str) -> None:
    out = result.model
    assert _dims(out) == list(shape)  # bound, as given
    codes = [n.code for n in result.report.notes]
    assert "input-shapes-kept" in codes and "equals-original" in codes, codes
    assert all(n.lowering not in ("dynamic", "dynamic_max") for n in result.report.nodes), result.report.nodes
    ops = [n.op_type for n in out.graph.node]
    assert "Range" not in ops  # no window arithmetic at run time
    if target == "portable":
        assert not _one_axis_means(out), _one_axis_means(out)
    onnx.checker.check_model(out, full_check=True)
    torch.manual_seed(1)
    assert_matches_torch(out, module, [shape], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["onnxruntime", "portable"])
@pytest.mark.parametrize("name", list(CASES))
def test_bound_at_the_traced_size(name, target):
    module, model, hw, traced = _case(name)
    shape = [1, 3, *hw]
    r = patch(model, target=target, input_shapes={"x": shape}, traced_shapes={"x": shape} if traced else None)
    _assert_bound(r, module, shape, target)


@pytest.mark.parametrize("target", ["onnxruntime", "portable"])
@pytest.mark.parametrize("name", ["avg", "area"])
def test_bound_at_another_size_the_graph_is_right_at(name, target):
    """20x15, not the traced 17x13: these decompositions are right there (they prove there), so the bound OUT is
    compared with the file at 20x15 and with torch."""
    module, model, _, _ = _case(name)
    shape = [1, 3, 20, 15]
    _assert_bound(patch(model, target=target, input_shapes={"x": shape}), module, shape, target)


def test_named_dims_bound():
    """Dim("H"), Dim("W"): the same with the exporter's declared symbols named."""
    module, model, hw, _ = _case("pyramid", named=True)
    shape = [1, 3, *hw]
    _assert_bound(patch(model, target="portable", input_shapes={"x": shape}), module, shape, "portable")


def test_contradicted_binding_still_refused():
    """The pyramid's 3x3 and 6x6 levels are torch's decomposition frozen on the branches 17x13 took: at 20x15 they
    are wrong, and the binding is refused as before (exit 4), never a static OUT made of a wrong reading."""
    _, model, _, _ = _case("pyramid")
    with pytest.raises(ShapeError):
        patch(model, target="portable", input_shapes={"x": [1, 3, 20, 15]})


def test_bound_size_other_than_the_traced_size_refused(tmp_path):
    """--traced-shape T and --input-shape B != T: OUT bound at B never runs at T, where the file is known right, so
    nothing would check it: refused (exit 2) with one line naming the remedy, nothing written."""
    _, model, hw, _ = _case("avg")
    with pytest.raises(ArgumentError):
        patch(model, target="portable", input_shapes={"x": [1, 3, 20, 15]}, traced_shapes={"x": [1, 3, *hw]})
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--target", "portable", "--input-shape", "x:1,3,20,15",
                                  "--traced-shape", f"x:1,3,{hw[0]},{hw[1]}"])
    assert r.exit_code == 2 and not out.exists(), r.output
    assert "--input-shape" in r.stderr and "--traced-shape" in r.stderr, r.stderr


def test_cli_binds_and_says_so(tmp_path):
    module, model, hw, _ = _case("area")
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--target", "portable", "--input-shape",
                                  f"x:1,3,{hw[0]},{hw[1]}"])
    assert r.exit_code == 0, r.output
    assert "kept as bound" in r.output, r.output
    assert _dims(onnx.load(out)) == [1, 3, *hw]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["avg", "area", "pyramid"])
def test_bound_portable_out_exact_in_ncnn(name):
    """The converter the binding is for: the dynamo exporter's opset (18 and later) bound portable OUT through pnnx
    runs exact in ncnn (the symbolic one's one-axis ReduceMeans come out un-averaged there: review58)."""
    import importlib.util

    from ncnn_runner import ncnn_run, pnnx_binary

    if importlib.util.find_spec("ncnn") is None or pnnx_binary() is None:
        pytest.skip("pnnx and ncnn are not installed (the runtimes extra: make test-runtimes)")
    module, model, hw, _ = _case(name)
    assert any(o.domain in ("", "ai.onnx") and o.version >= 18 for o in model.opset_import)
    out = patch(model, target="portable", input_shapes={"x": [1, 3, *hw]}).model
    x = np.random.default_rng(0).standard_normal((1, 3, *hw)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    (got,) = ncnn_run(out, {"x": x}).values()
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)

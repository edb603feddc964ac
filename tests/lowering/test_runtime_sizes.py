"""Output sizes the graph computes from the input's size (issue 23): ``F.interpolate(x, scale_factor=s,
mode="area")``, ``F.adaptive_avg_pool2d(x, (x.shape[2] // 2, ...))`` exported by TorchScript with dynamic
H/W. The ``dynamic`` lowering reads the graph's own size tensor at run time: one patched file matches torch at
sizes where the output is smaller than, larger than and equal to the input, and an empty output where torch's
size is 0; both targets."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import assert_avg_close, assert_bits_equal, ort_session
from runtime_size_modules import Area, HalfThird, MaxThirdPlusOne

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.inspection.model import inspect_model
from onnxpoolfix.tensorrt import lint_tensorrt

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Max3d(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_max_pool3d(x, (2, x.shape[3] + 1, x.shape[4] // 2))


class Avg3d(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool3d(x, (x.shape[2] * 2, 3, x.shape[4] // 2))


# name: (module, traced shape, run shapes: incl. an output larger than the input and one equal to it)
CASES = {
    "area2d_0.625": (Area(0.625), (1, 3, 20, 17), [(1, 3, 20, 17), (2, 3, 7, 9), (1, 3, 33, 5), (1, 3, 1, 4)]),
    "avg2d_h2_w3": (HalfThird(), (1, 3, 20, 17), [(1, 3, 20, 17), (2, 3, 7, 9), (1, 3, 33, 5), (1, 3, 2, 3)]),
    "max2d_h3p1_5_indices": (MaxThirdPlusOne(True), (1, 3, 20, 17),
                             [(1, 3, 20, 17), (2, 3, 7, 3), (1, 3, 33, 2), (1, 3, 2, 5)]),
    "max2d_h3p1_5": (MaxThirdPlusOne(False), (1, 3, 20, 17), [(1, 3, 20, 17), (2, 3, 7, 3), (1, 3, 1, 5)]),
    "area1d_1.75": (Area(1.75), (1, 3, 20), [(1, 3, 20), (2, 3, 7), (1, 3, 33), (1, 3, 1)]),
    "max3d": (Max3d(), (1, 2, 3, 4, 5), [(1, 2, 3, 4, 5), (2, 2, 5, 2, 9), (1, 2, 2, 3, 1)]),
    "avg3d": (Avg3d(), (1, 2, 3, 4, 5), [(1, 2, 3, 4, 5), (2, 2, 1, 3, 9), (1, 2, 2, 3, 1)]),
}


# the kinds the output sizes take at the run shapes where not all three (n * 0.625, n // 2 never exceed n)
KINDS = {"area2d_0.625": {"down"}, "avg2d_h2_w3": {"down"}, "area1d_1.75": {"up", "equal"}}


def export(module, shape, opset: int = 17) -> onnx.ModelProto:
    x = torch.randn(*shape)
    axes = {0: "N"} | {a: f"d{a}" for a in range(2, len(shape))}
    outs = ["y", "i"] if getattr(module, "indices", False) else ["y"]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=opset, input_names=["x"], output_names=outs,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": axes})
    return onnx.load_from_string(f.getvalue())


@pytest.fixture(scope="module")
def exported():
    return {name: export(module, traced) for name, (module, traced, _) in CASES.items()}


def assert_matches_torch(model: onnx.ModelProto, module, shapes, seed=0) -> set[str]:
    """``model`` against ``module`` at each shape; returns the kinds the output sizes took."""
    sess = ort_session(model)
    rng = np.random.default_rng(seed)
    kinds = set()
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x))
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        got = sess.run(None, {"x": x})
        assert len(got) == len(want)
        for n, m in zip(shape[-(want[0].ndim - 2):], want[0].shape[2:]):
            kinds.add("down" if m < n else "up" if m > n else "equal")
        if isinstance(module, (MaxThirdPlusOne, Max3d)):
            assert_bits_equal(got[0], want[0], f"values at {shape}")
            if len(want) > 1:
                assert np.array_equal(got[1], want[1]), f"indices at {shape}"
        else:
            assert_avg_close(got[0], want[0], x, rel=2e-6)
    return kinds


@pytest.mark.parametrize("name", list(CASES))
def test_runtime_output_size_matches_torch(name, exported):
    module, _, shapes = CASES[name]
    result = onnxpoolfix.patch(exported[name])
    assert [n.lowering for n in result.report.nodes] == ["dynamic"] and result.report.check_passed
    kinds = assert_matches_torch(result.model, module, shapes)
    assert kinds == KINDS.get(name, {"down", "up", "equal"})


def test_empty_output_where_torch_computes_size_zero(exported):
    """floor(1 * 0.625) = 0: torch returns an empty tensor; so does the patched graph (no division by zero)."""
    model = onnxpoolfix.patch(exported["area2d_0.625"]).model
    got = ort_session(model).run(None, {"x": np.ones((1, 3, 1, 4), np.float32)})[0]
    assert got.shape == (1, 3, 0, 2)


@pytest.mark.parametrize("name", ["area2d_0.625", "avg3d"])
def test_runtime_output_size_tensorrt_target_average_is_refused_with_the_remedy(name, exported):
    """The tensorrt target's averages are pooling and reductions (a MatMul spreads NaN and runs in TF32 in a
    TensorRT build), whose windows need a constant output size: refused, the remedy binding the input's sizes."""
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as err:
        onnxpoolfix.patch(exported[name], target="tensorrt")
    assert err.value.exit_code == 4 and "input_shapes" in err.value.hint


@pytest.mark.parametrize("name", ["max2d_h3p1_5_indices", "max2d_h3p1_5"])
def test_runtime_output_size_tensorrt_target(name, exported):
    module, _, shapes = CASES[name]
    result = onnxpoolfix.patch(exported[name], target="tensorrt")
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]
    assert [f for f in lint_tensorrt(result.model) if f.severity == "error"] == []
    assert not [n for n in result.model.graph.node if n.op_type in ("If", "Loop", "Scan")]
    assert_matches_torch(result.model, module, shapes)


def test_cli_patches_a_runtime_size_and_matches_torch(exported, tmp_path, capsys):
    src, out = tmp_path / "area.onnx", tmp_path / "out.onnx"
    onnx.save(exported["area1d_1.75"], src)
    result = CliRunner().invoke(main, [str(src), str(out), "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    module, _, shapes = CASES["area1d_1.75"]
    assert assert_matches_torch(onnx.load(out), module, shapes) >= {"up"}


def test_a_static_entry_beside_a_runtime_one_stays_a_constant(exported):
    """(H // 3 + 1, 5): W's 5 is read as a constant, H's entry at run time."""
    spec = inspect_model(exported["max2d_h3p1_5_indices"]).nodes[0]
    assert spec.output_shape[-1] == 5 and isinstance(spec.output_shape[-2], str)


# the kinds a computed output size can take at all (n // 2 never equals n; H + 1 always exceeds H): the check
# must reach each of them, and say so
REACHABLE = {"area2d_0.625": "downsampling", "avg2d_h2_w3": "downsampling", "max2d_h3p1_5_indices": "downsampling, equal",
             "max2d_h3p1_5": "downsampling, equal", "area1d_1.75": "equal, upsampling",
             "max3d": "downsampling, upsampling", "avg3d": "downsampling, upsampling"}


@pytest.mark.parametrize("name", list(CASES))
def test_the_check_reaches_every_kind_of_computed_size_and_says_so(name, exported):
    note = onnxpoolfix.patch(exported[name]).report.check_note
    assert f"the output sizes the graph computes reached: {REACHABLE[name]};" in note


@pytest.mark.parametrize("name,shape", [("area2d_0.625", (1, 3, 20, 17)), ("max2d_h3p1_5_indices", (2, 3, 11, 4))])
def test_a_bound_input_folds_the_computed_size_to_a_constant(name, shape, exported):
    """--input-shape makes the pooled size static: the computed size is folded, a static lowering applies."""
    module = CASES[name][0]
    result = onnxpoolfix.patch(exported[name], input_shapes={"x": list(shape)})
    assert [n.lowering for n in result.report.nodes] != ["dynamic"] and result.report.check_passed
    assert all(isinstance(d, int) for d in result.report.nodes[0].output_shape)
    assert not [n for n in result.model.graph.node if n.op_type == "Floor"]  # the size computation is gone
    assert_matches_torch(result.model, module, [shape])


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("name", ["area2d_0.625", "max2d_h3p1_5_indices", "max2d_h3p1_5"])
def test_runtime_output_size_older_opsets(name, opset):
    """Opset 11 (Range's first; no int64 Min/Max: Where) and 13 (no Shape slices: Gather)."""
    module, traced, shapes = CASES[name]
    result = onnxpoolfix.patch(export(module, traced, opset))
    assert [n.lowering for n in result.report.nodes] == ["dynamic"] and result.report.check_passed
    assert_matches_torch(result.model, module, shapes)

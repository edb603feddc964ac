"""onnxpoolfix.export with dynamic shapes of adaptive pools whose output size is computed from the input's
size (issue 23): the size stays symbolic in the exported graph (torch.export would freeze an ``int[]`` size,
``adaptive_avg_pool1d`` and every max pool, to its traced value) and the patched file matches torch at sizes
the test chooses, the output smaller than, larger than and equal to the input."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import ort_session
from runtime_size_modules import Area, HalfThird, MaxThirdPlusOne

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
F = torch.nn.functional
Dim = torch.export.Dim
pytestmark = pytest.mark.torch


HW = {"x": {2: Dim("H", min=2, max=64), 3: Dim("W", min=3, max=64)}}
CASES = {  # module, example, dynamic shapes, sizes checked here
    "area2d_0.625": (Area(0.625), (1, 3, 20, 17), HW, [(1, 3, 7, 9), (1, 3, 33, 5), (1, 3, 64, 64)]),
    "avg2d_h2_w3": (HalfThird(), (1, 3, 20, 17), HW, [(1, 3, 7, 9), (1, 3, 33, 5), (1, 3, 2, 3)]),
    "max2d_h3p1_5": (MaxThirdPlusOne(), (1, 3, 20, 17), HW, [(1, 3, 7, 3), (1, 3, 33, 5), (1, 3, 2, 4)]),
    "area1d_1.75": (Area(1.75), (1, 3, 20), {"x": {2: Dim("L", min=2, max=600)}}, [(1, 3, 21), (1, 3, 566), (1, 3, 3)]),
    # scales a double cannot hold: the file alone is refused (tests/graph/test_size_precision.py); export reads
    # torch's double from the module, and its sizes are the file's float32 ones at every length (5 x 0.6 = 3,
    # 10 x 1.7 = 17: where a double beside the scale would floor one lower)
    "area2d_0.6": (Area(0.6), (1, 3, 20, 17), HW, [(1, 3, 5, 10), (1, 3, 33, 5), (1, 3, 64, 63)]),
    "area1d_1.7": (Area(1.7), (1, 3, 20), {"x": {2: Dim("L", min=2, max=600)}}, [(1, 3, 10), (1, 3, 566), (1, 3, 3)]),
    # traced where torch's output is empty (floor(20 / 32) = 0): the check's sizes were aimed from that 0 and
    # crashed (found by review)
    "area1d_0.03125_empty": (Area(1 / 32), (1, 3, 20), {"x": {2: Dim("L", min=1, max=600)}},
                             [(1, 3, 5), (1, 3, 32), (1, 3, 100)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_export_keeps_a_computed_size_and_matches_torch(name, tmp_path: Path):
    module, example, dynamic, sizes = CASES[name]
    out = tmp_path / f"{name}.onnx"
    report = onnxpoolfix.export(module, (torch.randn(*example),), out, dynamic_shapes=dynamic)
    assert [n.lowering for n in report.nodes] == ["dynamic"]
    sess = ort_session(onnx.load(out))
    kinds = set()
    for shape in sizes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = module(x)
        want = want if isinstance(want, tuple) else (want,)
        got = sess.run(None, {"x": x.numpy()})
        assert [g.shape for g in got] == [tuple(w.shape) for w in want], shape
        np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-5, atol=1e-6)
        if len(want) > 1:
            assert np.array_equal(got[1], want[1].numpy())
        kinds |= {"down" if m < n else "up" if m > n else "equal" for n, m in zip(shape[2:], want[0].shape[2:])}
    assert "up" in kinds or name in ("area2d_0.625", "area2d_0.6", "avg2d_h2_w3", "area1d_0.03125_empty")


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("scale", [0.7, 1 / 1.3, (0.7, 0.35)], ids=["0.7", "1/1.3", "0.7,0.35"])
def test_export_computes_a_size_in_double_where_the_files_float32_differs_from_torchs(dynamo, scale, tmp_path):
    """scale_factor=0.7: both exporters compute the size in float32 (90 x 0.7 -> 63), torch in double (62);
    1/1.3: the file 30 rows at 39, torch 29. export knows torch's double, so OUT computes the size in float64
    with it: torch's sizes and values at every length compared here (the lengths where the two differ
    included), through either exporter."""
    module, out = Area(scale), tmp_path / "area.onnx"
    assert Area(0.7)(torch.zeros(1, 1, 90, 5)).shape[2] == 62 and Area(1 / 1.3)(torch.zeros(1, 1, 39, 5)).shape[2] == 29
    dims = {"x": {2: Dim("H", min=2, max=400), 3: Dim("W", min=3, max=400)}}
    kwargs = {"dynamic_shapes": dims} if dynamo else {"dynamic_axes": {"x": {2: "H", 3: "W"}}, "input_names": ["x"]}
    onnxpoolfix.export(module, (torch.randn(1, 3, 20, 17),), out, dynamo=dynamo, **kwargs)
    sess = ort_session(onnx.load(out))
    rng = np.random.default_rng(0)
    for h in [*range(2, 131), 390]:
        x = torch.from_numpy(rng.standard_normal((1, 3, h, 3 + (h * 7) % 97)).astype(np.float32))
        with torch.no_grad():
            want = module(x).numpy()
        got = sess.run(None, {"x": x.numpy()})[0]
        assert got.shape == want.shape, h
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_1d_area_size_in_double_through_the_torchscript_exporter(tmp_path: Path):
    """torch 2.13's adaptive_avg_pool1d takes int[]: its probe froze the size (no double to read) until the probe
    kept pool sizes symbolic, as the TorchScript file computes them; refused before, exact now."""
    module, out = Area(0.7), tmp_path / "area1d.onnx"
    onnxpoolfix.export(module, (torch.randn(1, 3, 45),), out, dynamo=False, input_names=["x"],
                       dynamic_axes={"x": {2: "L"}})
    sess = ort_session(onnx.load(out))
    for n in [*range(2, 131), 390]:
        x = torch.randn(1, 3, n)
        with torch.no_grad():
            want = module(x).numpy()
        got = sess.run(None, {"x": x.numpy()})[0]
        assert got.shape == want.shape, n
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["tensorrt", "portable"])
def test_export_refuses_the_double_size_for_targets_without_float64(target, tmp_path: Path):
    """The tensorrt and portable targets write no float64 arithmetic: there the differing size is refused, the
    hint naming the default target, and nothing is written."""
    out = tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.UnsupportedNodeError, match=r"at length 39 on axis 2 the file's size is 30, torch's 29") as err:
        onnxpoolfix.export(Area(1 / 1.3), (torch.randn(1, 3, 20, 17),), out, dynamic_shapes=HW, target=target)
    assert "target='onnxruntime'" in err.value.hint
    assert not out.exists()


def test_a_none_entry_of_a_max_pool_stays_dynamic(tmp_path: Path):
    """AdaptiveMaxPool2d((None, 3)): torch.export pinned H to the example (int[] sizes); kept symbolic now."""
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveMaxPool2d((None, 3))).eval()
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(module, (torch.randn(1, 3, 22, 20),), out, dynamic_shapes={"input": HW["x"]})
    assert "specialised" not in report.check_note and [n.lowering for n in report.nodes] == ["dynamic"]
    sess = ort_session(onnx.load(out))
    for shape in [(1, 3, 22, 20), (1, 3, 5, 9), (1, 3, 40, 4)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
            np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-5, atol=1e-6)  # (the Conv rounds)


def test_a_file_whose_size_torch_computes_in_double_otherwise_is_refused(tmp_path: Path):
    """scale_factor=0.7 in a file torch.onnx.export wrote: float32 gives 63 at 90 where torch computes 62 in
    double, and the file's 0.7f reads as several doubles (the hint sends to onnxpoolfix.export, which knows)."""
    module, out = Area(0.7), tmp_path / "area.onnx"
    dims = {"x": {2: Dim("H", min=2, max=400), 3: Dim("W", min=3, max=400)}}
    torch.onnx.export(module, (torch.randn(1, 3, 20, 17),), str(out), dynamo=True, dynamic_shapes=dims)
    with pytest.raises(onnxpoolfix.PoolFixError, match="float32") as err:
        onnxpoolfix.patch(onnx.load(out), traced_shapes={"x": [1, 3, 20, 17]})
    assert "F.interpolate(size=...)" in err.value.hint and "onnxpoolfix.export" in err.value.hint, err.value.hint


@pytest.mark.torch
def test_a_size_of_zero_inside_the_declared_range_is_compared_not_a_crash(tmp_path):
    """scale_factor=0.25 over H, W >= 2: at 2 torch's output length is floor(0.5) = 0, an empty output, which the
    comparison with torch reached and could not name a window kind for (a bare ValueError): now compared."""
    class Quarter(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=0.25, mode="area")

    dims = ({2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)},)
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(Quarter().eval(), (torch.randn(1, 3, 17, 13),), out, dynamic_shapes=dims)
    assert "matched torch" in report.check_note
    got = ort_session(onnx.load(str(out))).run(None, {"x": np.ones((1, 3, 2, 13), np.float32)})[0]
    assert got.shape == (1, 3, 0, 3)


class GenuineBeside(torch.nn.Module):
    """A genuine F.avg_pool2d / F.max_pool2d on the same source line as adaptive pools (a dynamo file's metadata
    names the line, so the file alone reads it two ways and is refused as possibly frozen). The first output, a
    mean of random data, cancels to ~1e-5: float32 noise exceeds 1e-4 of its scale at some sizes (torch 2.9
    compares this file off its form, 2*s - 1, at 38x41: 4.4e-09 against 9e-10), where torch's float64 decides."""

    def forward(self, x):
        return F.avg_pool2d(x, 2) .mean() + F.adaptive_avg_pool2d(x, (5, 7)).mean(), F.adaptive_max_pool2d(F.max_pool2d(x, 3, 2, 1), (3, 4))  # noqa: E501


def test_export_takes_a_genuine_pool_beside_adaptive_ones_on_one_line(tmp_path: Path):
    """onnxpoolfix.export kept every adaptive pool as a node (its translation table), so the exporter's AveragePool
    and MaxPool in the file are the module's own: they are not refused as frozen (they were), and the file matches
    torch at sizes away from the traced one."""
    module = GenuineBeside()
    out = tmp_path / "beside.onnx"
    dyn = {"x": {2: Dim("H", min=8, max=200), 3: Dim("W", min=8, max=200)}}
    report = onnxpoolfix.export(module, (torch.randn(1, 3, 37, 41),), out, dynamic_shapes=dyn)
    assert sorted(n.op for n in report.nodes) == ["adaptive_avg_pool2d", "adaptive_max_pool2d"]
    sess = ort_session(onnx.load(out))
    for shape in [(1, 3, 37, 41), (1, 3, 8, 61), (1, 3, 99, 13)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = module(x)
        got = sess.run(None, {"x": x.numpy()})
        np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-5, atol=1e-5)
        assert np.array_equal(got[1], want[1].numpy()), shape


class _Cancels(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (5, 7)).mean()


def test_an_output_that_cancels_is_judged_against_torchs_float64():
    """A mean of random data (~1e-3 here) is off by float32 rounding in any other summation order, which can pass
    1e-4 of its own scale: OUT twice as far from torch's float64 as torch's float32 is passes; 1e-3 off does not."""
    from onnxpoolfix.torch_export.sizes import TorchRunner
    from onnxpoolfix.torch_export.torch_check import float32_noise

    inputs = [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "H", "W"])]
    runner = TorchRunner(torch, _Cancels().eval(), (torch.randn(1, 3, 57, 61),), {}, inputs, seed=0)
    tensors, (w32,), _ = runner.run(runner.inputs({"H": 57, "W": 61}))
    w64 = F.adaptive_avg_pool2d(tensors[0].double(), (5, 7)).mean().item()
    twice = w64 + 2 * (float(w32) - w64)
    assert float32_noise(torch, runner, tensors, [np.array(twice)], [w32])
    assert not float32_noise(torch, runner, tensors, [np.array(float(w32) + 1e-3)], [w32])
    assert next(runner.module.parameters(), torch.zeros(1)).dtype == torch.float32  # the module left as it was

"""onnxpoolfix.export(dynamo=False): torch.onnx.export (TorchScript, FALLTHROUGH) + patch + save, and torch staying
optional. The dynamo path (the default) is tested in tests/torch_export/test_export_dynamo.py."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import ort_run

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.frontends.leftovers import find_pool_nodes

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _module(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d((5, 7))).eval()


def _torch_out(module, x):
    import torch

    with torch.no_grad():
        return module(x).numpy()


@pytest.mark.torch
def test_export_matches_torch(torch_mod, tmp_path: Path) -> None:
    m, x = _module(torch_mod), torch_mod.randn(1, 3, 8, 9)
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(m, (x,), out, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
    assert isinstance(report, onnxpoolfix.PatchReport)
    assert report.status == "patched" and report.checked and report.check_passed
    (node,) = report.nodes
    assert node.op == "adaptive_avg_pool2d" and node.output_shape == [1, 4, 5, 7]
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert not find_pool_nodes(model.graph)
    assert all(o.domain != "org.pytorch.aten" for o in model.opset_import)
    (got,) = ort_run(model, {"x": x.numpy()})
    np.testing.assert_allclose(got, _torch_out(m, x), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_export_to_a_file_object(torch_mod) -> None:
    m, x = _module(torch_mod), torch_mod.randn(1, 3, 8, 9)
    buf = io.BytesIO()
    report = onnxpoolfix.export(m, x, buf, dynamo=False, input_names=["x"])  # a bare tensor as args, as torch allows
    assert len(report.nodes) == 1
    model = onnx.load_from_string(buf.getvalue())
    (got,) = ort_run(model, {"x": x.numpy()})
    np.testing.assert_allclose(got, _torch_out(m, x), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_export_with_dynamic_batch(torch_mod, tmp_path: Path) -> None:
    m = _module(torch_mod)
    out = tmp_path / "m.onnx"
    onnxpoolfix.export(m, (torch_mod.randn(1, 3, 8, 9),), out, dynamo=False, input_names=["x"], output_names=["y"],
                       dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    model = onnx.load(out)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "n"
    x = torch_mod.randn(3, 3, 8, 9)
    (got,) = ort_run(model, {"x": x.numpy()})
    np.testing.assert_allclose(got, _torch_out(m, x), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_export_with_dynamic_spatial_axes(torch_mod, tmp_path: Path) -> None:
    """Symbolic H/W need the dynamic lowering; without one the export fails cleanly and writes nothing."""
    from onnxpoolfix.lowering import BY_NAME

    m = _module(torch_mod)
    out = tmp_path / "m.onnx"
    kwargs = dict(dynamo=False, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}})
    if "dynamic" not in BY_NAME:
        with pytest.raises(onnxpoolfix.UnsupportedNodeError):
            onnxpoolfix.export(m, (torch_mod.randn(1, 3, 8, 9),), out, **kwargs)
        assert not out.exists()
        return
    report = onnxpoolfix.export(m, (torch_mod.randn(1, 3, 8, 9),), out, **kwargs)
    assert [n.lowering for n in report.nodes] == ["dynamic"]
    model = onnx.load(out)
    for shape in [(1, 3, 8, 9), (2, 3, 11, 13), (1, 3, 20, 9), (1, 3, 5, 7), (1, 3, 3, 4)]:
        x = torch_mod.randn(*shape)
        (got,) = ort_run(model, {"x": x.numpy()})
        np.testing.assert_allclose(got, _torch_out(m, x), rtol=1e-5, atol=1e-6, err_msg=str(shape))


@pytest.mark.torch
def test_export_max_pool_with_indices(torch_mod, tmp_path: Path) -> None:
    m = torch_mod.nn.AdaptiveMaxPool2d((5, 7), return_indices=True).eval()
    x = torch_mod.randn(1, 2, 8, 9)
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(m, (x,), out, dynamo=False, input_names=["x"], output_names=["values", "indices"])
    assert report.nodes[0].indices == "computed"
    values, indices = ort_run(onnx.load(out), {"x": x.numpy()})
    want_v, want_i = m(x)
    np.testing.assert_array_equal(values, want_v.numpy())
    np.testing.assert_array_equal(indices, want_i.numpy())


@pytest.mark.torch
@pytest.mark.parametrize("k", [1, 2])
def test_export_global_max_pool_indices_under_dynamic_sizes(torch_mod, tmp_path: Path, k) -> None:
    """torch's TorchScript exporter stops on an all-ones adaptive max pool whose indices are used once the sizes
    are dynamic (its GlobalMaxPool has none); the export now keeps that node for the patch."""
    nn = torch_mod.nn
    m = (nn.AdaptiveMaxPool2d(1, return_indices=True) if k == 2 else nn.AdaptiveMaxPool1d(1, return_indices=True)).eval()
    axes = {2: "h", 3: "w"} if k == 2 else {2: "l"}
    out = tmp_path / "m.onnx"
    onnxpoolfix.export(m, (torch_mod.randn(1, 2, *(9, 8)[:k]),), out, dynamo=False, input_names=["x"],
                       output_names=["values", "indices"], dynamic_axes={"x": axes})
    for size in ((9, 8), (5, 13), (1, 1)):
        x = torch_mod.randn(1, 2, *size[:k])
        values, indices = ort_run(onnx.load(out), {"x": x.numpy()})
        want_v, want_i = m(x)
        np.testing.assert_array_equal(values, want_v.numpy())
        np.testing.assert_array_equal(indices, want_i.numpy())


@pytest.mark.torch
@pytest.mark.parametrize("kwargs, needle", [
    ({"operator_export_type": "ONNX"}, "operator_export_type"),
    ({"operator_export_type": "ONNX_ATEN_FALLBACK"}, "operator_export_type"),
    ({"dynamic_shapes": {"x": {2: "h"}}}, "dynamic_axes"),
    ({"optimize": True}, "optimize"),
    ({"export_modules_as_functions": True}, "functions"),
])
def test_conflicting_kwargs_are_refused(torch_mod, tmp_path: Path, kwargs, needle) -> None:
    if "operator_export_type" in kwargs:
        kwargs = {"operator_export_type": getattr(torch_mod.onnx.OperatorExportTypes, kwargs["operator_export_type"])}
    out = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match=needle):
        onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), out, dynamo=False, **kwargs)
    assert not out.exists()


@pytest.mark.torch
def test_the_settings_it_imposes_are_accepted_when_repeated(torch_mod, tmp_path: Path) -> None:
    fallthrough = torch_mod.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
    report = onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), tmp_path / "m.onnx",
                                dynamo=False, operator_export_type=fallthrough, check=False)
    assert len(report.nodes) == 1 and not report.checked


@pytest.mark.torch
def test_export_passes_strategy_and_target(torch_mod, tmp_path: Path) -> None:
    report = onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), tmp_path / "m.onnx",
                                dynamo=False, strategy="window_slices", target="tensorrt", opset_version=18)
    assert report.target == "tensorrt" and report.opset == 18
    assert [n.lowering for n in report.nodes] == ["window_slices"]


@pytest.mark.torch
@pytest.mark.parametrize("kwargs", [{"target": "trt"}, {"strategy": "fast"}])
def test_a_bad_target_or_strategy_is_refused_before_the_export(torch_mod, tmp_path: Path, monkeypatch, kwargs) -> None:
    # the patch checks them too, but only after a (possibly long) torch export: export checks them first
    monkeypatch.setattr(torch_mod.onnx, "export", lambda *a, **k: pytest.fail("exported before the check"))
    with pytest.raises(onnxpoolfix.ArgumentError, match=f"{next(iter(kwargs))} must be one of"):
        onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), tmp_path / "m.onnx", **kwargs)
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.torch
def test_export_seeds_the_patch_and_the_comparison_with_torch(torch_mod, tmp_path: Path, monkeypatch) -> None:
    from onnxpoolfix.torch_export import exporter

    seeds = []
    for name in ("patch_as_written", "verify_against_torch"):
        real = getattr(exporter, name)
        monkeypatch.setattr(exporter, name, lambda *a, _real=real, _name=name, **k: seeds.append((_name, k["seed"]))
                            or _real(*a, **k))
    onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), tmp_path / "m.onnx", dynamo=False, seed=9)
    assert seeds == [("patch_as_written", 9), ("verify_against_torch", 9)]
    with pytest.raises(ValueError, match="seed"):
        onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), tmp_path / "n.onnx", seed=-1)


@pytest.mark.torch
def test_nothing_to_patch_still_saves(torch_mod, tmp_path: Path) -> None:
    m = torch_mod.nn.Sequential(torch_mod.nn.Conv2d(3, 4, 3), torch_mod.nn.AdaptiveAvgPool2d(1)).eval()
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(m, (torch_mod.randn(1, 3, 8, 9),), out, dynamo=False)
    assert report.status == "nothing-to-patch" and out.exists()


def test_without_torch_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" now raises ImportError
    monkeypatch.setitem(sys.modules, "torch.onnx", None)
    out = tmp_path / "m.onnx"
    with pytest.raises(ImportError, match=r"pip install '\.\[torch\]' in a checkout") as info:
        onnxpoolfix.export(object(), (), out)
    assert "torch==2.13.0" in str(info.value)
    assert not out.exists()


def test_import_does_not_import_torch() -> None:
    code = ("import sys, onnxpoolfix, onnxpoolfix.cli, onnxpoolfix.inspection.model, onnxpoolfix.torch_export.exporter; "
            "assert callable(onnxpoolfix.export); assert 'torch' not in sys.modules, 'torch was imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr


def test_console_script_help() -> None:
    exe = Path(sys.executable).with_name("onnxpoolfix")
    cmd = [str(exe), "--help"] if exe.exists() else [sys.executable, "-m", "onnxpoolfix", "--help"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "inspect" in r.stdout and "patch" in r.stdout


@pytest.mark.torch
@pytest.mark.parametrize("dynamo", [True, False])
@pytest.mark.parametrize("where", ["missing folder", "a directory"])
def test_a_bad_path_fails_before_the_export(torch_mod, tmp_path: Path, monkeypatch, dynamo, where) -> None:
    """As the CLI does: a path that cannot be written fails in milliseconds, not after a long export."""
    def no_export(*a, **k):
        raise AssertionError("torch.onnx.export ran although f cannot be written")

    monkeypatch.setattr(torch_mod.onnx, "export", no_export)
    f = tmp_path / "nope" / "m.onnx" if where == "missing folder" else tmp_path
    with pytest.raises(onnxpoolfix.OutputError):
        onnxpoolfix.export(_module(torch_mod), (torch_mod.randn(1, 3, 8, 9),), f, dynamo=dynamo)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.torch
def test_export_of_a_script_module_with_python_scalar_arguments(torch_mod, tmp_path: Path) -> None:
    """A ScriptModule's bool/int arguments (an If's flag, a Loop's count) become graph inputs: the comparison
    with torch must feed them, not refuse the export as 'cannot match them to compare with torch'."""
    torch = torch_mod
    F = torch.nn.functional

    class Branches(torch.nn.Module):
        def forward(self, x, flag: bool, n: int):
            y = F.adaptive_avg_pool2d(x, [5, 7]) if flag else F.adaptive_max_pool2d(x, [5, 7])
            for _ in range(n):
                y = y * 2.0
            return y

    module = torch.jit.script(Branches().eval())
    x = torch.randn(1, 2, 8, 9)
    out = tmp_path / "m.onnx"
    report = onnxpoolfix.export(module, (x, True, 2), out, dynamo=False)
    assert "matched torch" in report.check_note
    patched = onnx.load(out)
    assert len(patched.graph.input) == 3  # x, flag, n
    names = [i.name for i in patched.graph.input]
    for flag, n in ((True, 2), (False, 0), (False, 3)):
        got = ort_run(patched, {names[0]: x.numpy(), names[1]: np.array(flag), names[2]: np.array(n)})[0]
        with torch.no_grad():
            want = module(x, flag, n).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.torch
def test_export_of_torch_cond_is_compared_with_torch(torch_mod, tmp_path: Path) -> None:
    """torch.cond refuses a TorchDispatchMode that does not declare higher-order support: the comparison
    with torch (which records the pools torch runs through one) took that for 'the torch module fails'."""
    torch = torch_mod
    F = torch.nn.functional

    class Cond(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: F.adaptive_avg_pool2d(x, [5, 7]),
                              lambda x: F.adaptive_max_pool2d(x, [5, 7]), (x,))

    out = tmp_path / "cond.onnx"
    report = onnxpoolfix.export(Cond(), (torch.randn(1, 2, 8, 9),), out)
    assert "matched torch" in report.check_note
    patched = onnx.load(out)
    for sign in (1, -1):
        x = sign * torch.randn(1, 2, 8, 9).abs()
        got = ort_run(patched, {patched.graph.input[0].name: x.numpy()})[0]
        want = F.adaptive_avg_pool2d(x, [5, 7]) if sign > 0 else F.adaptive_max_pool2d(x, [5, 7])
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.torch
def test_a_module_failing_in_the_comparison_says_why(torch_mod, tmp_path: Path) -> None:
    """The comparison with torch runs the module again; where that fails, the error carries torch's reason."""
    torch = torch_mod

    class OnlyWhileExporting(torch.nn.Module):
        def forward(self, x):
            if not torch.onnx.is_in_onnx_export():
                raise RuntimeError("refusing to run outside an export")
            return torch.nn.functional.adaptive_avg_pool2d(x, (5, 7))

    out = tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.TorchMismatchError, match="refusing to run outside an export"):
        onnxpoolfix.export(OnlyWhileExporting(), (torch.randn(1, 2, 8, 9),), out, dynamo=False)
    assert not out.exists()


@pytest.mark.torch
def test_export_keeping_nodes_onnxruntime_cannot_run_is_refused_not_a_raw_runtime_error(torch_mod, tmp_path: Path):
    """F.avg_pool2d with the dynamic input size as kernel stays an org.pytorch.aten node (no adaptive pool): the
    file cannot be run against torch, which export says as a PoolFixError, writing nothing (verify=False writes)."""
    F = torch_mod.nn.functional

    class GlobalByKernel(torch_mod.nn.Module):
        def forward(self, x):
            return F.avg_pool2d(x, kernel_size=(x.shape[2], x.shape[3])) + F.adaptive_avg_pool2d(x, (5, 7)).mean(
                (2, 3), keepdim=True)

    out, kwargs = tmp_path / "m.onnx", dict(dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    with pytest.raises(UnsupportedNodeError, match="org.pytorch.aten::avg_pool2d"):
        onnxpoolfix.export(GlobalByKernel().eval(), (torch_mod.randn(1, 3, 16, 14),), out, **kwargs)
    assert not out.exists()
    onnxpoolfix.export(GlobalByKernel().eval(), (torch_mod.randn(1, 3, 16, 14),), out, verify=False, **kwargs)
    assert out.exists()

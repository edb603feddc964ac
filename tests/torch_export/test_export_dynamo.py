"""onnxpoolfix.export(dynamo=True) and onnxpoolfix.translation_table(), with real torch 2.13 dynamo exports.

Every test compares the saved file, run in onnxruntime, with the torch module at sizes the test chooses
itself (not only through the tool's own checks): windows uniform, non-uniform and upsampling.
"""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import ort_session

import onnxpoolfix
from onnxpoolfix.frontends.leftovers import find_pool_nodes

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


def alexnet(pool: nn.Module | None = None) -> nn.Module:
    """torchvision's AlexNet layout (features conv/relu/maxpool, AdaptiveAvgPool2d((6, 6)), classifier),
    with small channel counts: at 300x300 the pool sees 8x8 -> 6x6 (non-uniform windows)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(8, 12, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(12, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        pool if pool is not None else nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(), nn.Linear(16 * 36, 10)).eval()


# input size -> pooled length at the AdaptiveAvgPool2d: 300 -> 8 (non-uniform), 224 -> 6 (kept),
# 416 -> 12 (uniform k2 s2), 100 -> 2 and 64 -> 1 (upsampling), 512x384 -> 15x11 (non-uniform)
ALEXNET_SIZES = [(300, 300), (224, 224), (416, 416), (100, 128), (64, 64), (512, 384)]


def _ort(path: Path, feed: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _torch_outs(module, *xs) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*xs)
    leaves = torch.utils._pytree.tree_leaves(out)
    return [t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in leaves]


def _assert_standard(path: Path) -> onnx.ModelProto:
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert not find_pool_nodes(model.graph)
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}, model.opset_import
    ops = {n.op_type for n in model.graph.node}
    assert "GatherND" not in ops and "ScatterND" not in ops, ops  # no decomposition left
    return model


def _assert_matches(path: Path, module, shapes, *, dtype=torch.float32, atol=1e-5) -> None:
    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    for shape in shapes:
        x = torch.randn(*shape).to(dtype)
        got = _ort(path, {name: x.numpy()})
        want = _torch_outs(module, x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol, err_msg=f"at {shape}")


def test_alexnet_with_symbolic_h_w_matches_torch_at_every_size(tmp_path: Path) -> None:
    m = alexnet()
    out = tmp_path / "alexnet.onnx"
    H, W = torch.export.Dim("H", min=64, max=512), torch.export.Dim("W", min=64, max=512)
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 300, 300),), out, dynamic_shapes={"input": {2: H, 3: W}})
    assert [n.lowering for n in report.nodes] == ["dynamic"] and report.check_passed
    # the tool's own comparison with torch ran at several sizes and reached every kind of window
    assert "matched torch at" in report.check_note
    assert all(kind in report.check_note.split("matched torch at")[1] for kind in ("uniform", "non-uniform", "upsampling"))
    model = _assert_standard(out)
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[2:] == ["H", "W"], dims
    _assert_matches(out, m, [(1, 3, h, w) for h, w in ALEXNET_SIZES])


def test_plain_dynamo_export_is_caught_by_the_comparison_with_torch(tmp_path: Path) -> None:
    """Without the table, torch decomposes the pool with windows frozen at the traced size: the
    comparison with torch (what export(verify=True) runs) must catch it at other sizes."""
    from onnxpoolfix import TorchMismatchError
    from onnxpoolfix.torch_export import verify_against_torch

    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((7, 7))).eval()
    H, W = torch.export.Dim("H", min=4, max=64), torch.export.Dim("W", min=4, max=64)
    f = tmp_path / "plain.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(m, (torch.randn(1, 3, 10, 10),), str(f), dynamo=True, dynamic_shapes={"input": {2: H, 3: W}})
    assert "adaptive" not in {n.op_type for n in onnx.load(str(f)).graph.node}
    with pytest.raises(TorchMismatchError, match="max error|onnxruntime fails"):
        verify_against_torch(f, m, (torch.randn(1, 3, 10, 10),), ranges={(0, 2): (4, 64), (0, 3): (4, 64)})


def test_translation_table_with_torch_onnx_export_then_patch(tmp_path: Path) -> None:
    """The public table, passed by a caller to torch.onnx.export itself; a None size with a symbolic H
    arrives as a SymInt and must be written as 'follows the input'."""
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((None, 7))).eval()
    H = torch.export.Dim("H", min=4, max=64)
    with contextlib.redirect_stdout(io.StringIO()):
        program = torch.onnx.export(m, (torch.randn(1, 3, 10, 11),), dynamo=True, dynamic_shapes={"input": {2: H}},
                                    custom_translation_table=onnxpoolfix.translation_table())
    exported = program.model_proto
    (node,) = [n for n in exported.graph.node if n.domain == "org.pytorch.aten"]
    assert node.op_type == "adaptive_avg_pool2d"
    (found,) = find_pool_nodes(exported.graph)
    assert found.output_size[1] == 7 and not isinstance(found.output_size[0], int)  # None follows H
    result = onnxpoolfix.patch(exported)
    assert result.report.check_passed
    out = tmp_path / "p.onnx"
    onnx.save(result.model, str(out))
    _assert_matches(out, m, [(1, 3, h, 11) for h in (10, 4, 17, 33, 64)])


def test_adaptive_max_pool_with_symbolic_h_w(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveMaxPool2d((5, 7))).eval()
    out = tmp_path / "max.onnx"
    H, W = torch.export.Dim("H", min=2, max=48), torch.export.Dim("W", min=2, max=48)
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), out, dynamic_shapes={"input": {2: H, 3: W}})
    assert report.check_passed
    _assert_standard(out)
    _assert_matches(out, m, [(1, 3, 8, 9), (1, 3, 10, 14), (1, 3, 13, 9), (1, 3, 3, 4), (1, 3, 40, 21)], atol=1e-6)


def test_adaptive_max_pool_indices_with_symbolic_h_w(tmp_path: Path) -> None:
    """Indices read with symbolic H/W: exact where a lowering computes them, else a clean refusal."""
    m = nn.AdaptiveMaxPool2d((5, 7), return_indices=True).eval()
    out = tmp_path / "max.onnx"
    H = torch.export.Dim("H", min=2, max=48)
    try:
        onnxpoolfix.export(m, (torch.randn(1, 2, 8, 9),), out, dynamic_shapes={"input": {2: H}})
    except onnxpoolfix.UnsupportedNodeError as e:
        assert "indices" in str(e) and not out.exists()
        return
    _assert_standard(out)
    _assert_matches(out, m, [(1, 2, 8, 9), (1, 2, 13, 9), (1, 2, 3, 9)], atol=0)


def test_adaptive_max_pool_indices_static(tmp_path: Path) -> None:
    m = nn.AdaptiveMaxPool2d((5, 7), return_indices=True).eval()
    out = tmp_path / "max.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 2, 8, 9),), out, output_names=["values", "indices"])
    assert report.nodes[0].indices == "computed"
    _assert_standard(out)
    _assert_matches(out, m, [(1, 2, 8, 9)], atol=0)


def test_avg_pool_3d_which_plain_dynamo_cannot_export(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv3d(2, 3, 3, padding=1), nn.AdaptiveAvgPool3d((2, 3, 5))).eval()
    out = tmp_path / "avg3d.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 2, 5, 8, 9),), out)
    assert report.check_passed and [n.op for n in report.nodes] == ["adaptive_avg_pool3d"]
    _assert_standard(out)
    _assert_matches(out, m, [(1, 2, 5, 8, 9)])


def test_area_interpolation_with_symbolic_h_w(tmp_path: Path) -> None:
    class Area(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return F.interpolate(self.conv(x), size=(5, 7), mode="area")

    m = Area().eval()
    out = tmp_path / "area.onnx"
    H, W = torch.export.Dim("H", min=2, max=64), torch.export.Dim("W", min=2, max=64)
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 11, 13),), out, dynamic_shapes={"x": {2: H, 3: W}})
    assert [n.op for n in report.nodes] == ["adaptive_avg_pool2d"]
    _assert_standard(out)
    _assert_matches(out, m, [(1, 3, 11, 13), (1, 3, 10, 14), (1, 3, 23, 7), (1, 3, 3, 4), (1, 3, 64, 50)])


def test_export_does_not_log_torchs_notes_on_its_own_translations(tmp_path: Path, caplog) -> None:
    """torch 2.9 logs a WARNING per parameter of each unannotated translation (28 lines on every export:
    "Missing annotation for parameter 'x' from (x, output_size)"); onnxpoolfix's own are not the caller's news."""
    import logging

    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))).eval()
    with caplog.at_level(logging.WARNING):
        onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), tmp_path / "m.onnx")
    assert [r.getMessage() for r in caplog.records if "Missing annotation" in r.getMessage()] == []
    logger = logging.getLogger("torch.onnx._internal.exporter._schemas")
    assert not [f for f in logger.filters if type(f).__name__ == "_QuietUnannotatedTranslations"]  # the export's only


def test_dynamic_axes_are_passed_through(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))).eval()
    out = tmp_path / "m.onnx"
    onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), out, input_names=["x"],
                       dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    model = _assert_standard(out)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    # torch 2.9 turns dynamic_axes into Dim.DYNAMIC and keeps its own symbol names (s31, ...); later torch
    # renames them to the given ones: the file has what torch.onnx.export itself writes
    torch_dims = _torch_input_dims(m, (torch.randn(1, 3, 8, 9),), tmp_path, input_names=["x"],
                                   dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    assert dims[1] == 3 and all(isinstance(d, str) and d for d in (dims[0], dims[2], dims[3]))
    assert len({dims[0], dims[2], dims[3]}) == 3  # three independent symbols
    if torch_dims == ["N", 3, "H", "W"]:  # a torch that keeps the names: the patched file keeps them too
        assert dims == torch_dims
    _assert_matches(out, m, [(2, 3, 8, 9), (1, 3, 12, 5), (1, 3, 40, 33)])


def _torch_input_dims(m, args, tmp_path: Path, **kwargs) -> list:
    """The first input's dims as torch.onnx.export(dynamo=True) writes them alone."""
    path = tmp_path / "torch_alone.onnx"
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, args, str(path), dynamo=True, **kwargs)
    model = onnx.load(path, load_external_data=False)
    return [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("dynamo", [True, False])
def test_verify_failure_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dynamo: bool) -> None:
    """A mismatch with torch (here: torch's side changed after the export) fails with the max error and
    leaves no file, on both exporters' paths."""
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))).eval()
    out = tmp_path / "m.onnx"
    from onnxpoolfix.torch_export.sizes import TorchRunner

    real_run = TorchRunner.run

    def off_by_a_bit(self, tensors, recorder=None):
        got = real_run(self, tensors, recorder)
        return None if got is None else (got[0], [t + 0.01 for t in got[1]], got[2])

    monkeypatch.setattr(TorchRunner, "run", off_by_a_bit)
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"max error 0\.01"):
        onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), out, dynamo=dynamo)
    assert not out.exists() and not list(tmp_path.iterdir())
    monkeypatch.setattr(TorchRunner, "run", real_run)
    onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), out, dynamo=dynamo, verify=False)
    assert out.exists()


def test_an_exported_program_is_taken(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))).eval()
    H = torch.export.Dim("H", min=3, max=40)
    ep = torch.export.export(m, (torch.randn(1, 3, 8, 9),), dynamic_shapes={"input": {2: H}})
    out = tmp_path / "ep.onnx"
    report = onnxpoolfix.export(ep, (torch.randn(1, 3, 8, 9),), out)
    assert [n.lowering for n in report.nodes] == ["dynamic"] and "matched torch at" in report.check_note
    _assert_standard(out)
    _assert_matches(out, m, [(1, 3, 8, 9), (1, 3, 23, 9), (1, 3, 4, 9)])


def test_operator_export_type_is_refused_with_dynamo(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="operator_export_type"):
        onnxpoolfix.export(nn.AdaptiveAvgPool2d(3), (torch.randn(1, 2, 7, 7),), tmp_path / "m.onnx",
                           operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)


def test_translation_module_does_not_import_torch() -> None:
    code = ("import sys, onnxpoolfix.torch_export.translation, onnxpoolfix.torch_export.torch_check; "
            "assert callable(onnxpoolfix.translation_table); assert 'torch' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_table_registers_no_schema_globally() -> None:
    """A registered org.pytorch.aten schema would make onnx's checker judge every leftover node of any model
    this process loads later by it (tests/test_fuzz.py's mutated dtypes then crash the checker)."""
    table = onnxpoolfix.translation_table()
    assert {op.__name__.split(".")[0] for op in table} >= {f"adaptive_{k}_pool{d}d" for k in ("avg", "max") for d in (2, 3)}
    assert not onnx.defs.has("adaptive_avg_pool2d", "org.pytorch.aten")


@pytest.mark.slow
def test_alexnet_static_300(tmp_path: Path) -> None:
    m = alexnet()
    out = tmp_path / "alexnet.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 300, 300),), out)
    assert report.nodes[0].input_shape == [1, 16, 8, 8] and report.check_passed
    _assert_standard(out)
    _assert_matches(out, m, [(1, 3, 300, 300)])


@pytest.mark.slow
@pytest.mark.parametrize("dtype, atol", [(torch.float16, 2e-3), (torch.float64, 1e-12), (torch.bfloat16, 2e-2)])
def test_dtypes(tmp_path: Path, dtype, atol) -> None:
    m = nn.Sequential(nn.AdaptiveAvgPool2d((5, 7))).eval()
    out = tmp_path / "m.onnx"
    x = torch.randn(1, 3, 8, 9).to(dtype)
    report = onnxpoolfix.export(m, (x,), out)
    assert report.check_passed
    _assert_standard(out)
    if dtype == torch.bfloat16:
        return  # numpy has no bfloat16 to feed directly; the export's own comparison with torch ran
    _assert_matches(out, m, [(1, 3, 8, 9)], dtype=dtype, atol=atol)


def test_unbatched_1d_3d_max_and_nested_outputs(tmp_path: Path) -> None:
    class Many(nn.Module):
        def forward(self, x):  # x: (C, H, W), unbatched
            v, i = F.adaptive_max_pool2d(x, (3, 5), return_indices=True)
            return {"avg": F.adaptive_avg_pool2d(x, (3, 4)), "max": (v, i)}, \
                [F.adaptive_avg_pool1d(x.flatten(1), 5), F.adaptive_max_pool1d(x.flatten(1), 4),
                 F.adaptive_avg_pool3d(x.unsqueeze(0), (2, 3, 4)), F.adaptive_max_pool3d(x.unsqueeze(0), (2, 3, 4))]

    m = Many().eval()
    out = tmp_path / "many.onnx"
    report = onnxpoolfix.export(m, (torch.randn(4, 8, 9),), out)
    assert len(report.nodes) == 6 and report.check_passed
    _assert_standard(out)
    _assert_matches(out, m, [(4, 8, 9)], atol=1e-6)


@pytest.mark.slow
def test_file_object_and_external_data(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 64, 3), nn.AdaptiveAvgPool2d((5, 7))).eval()
    buf = io.BytesIO()
    onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), buf)
    f = tmp_path / "from_buffer.onnx"
    f.write_bytes(buf.getvalue())
    _assert_matches(f, m, [(1, 3, 8, 9)])
    out = tmp_path / "ext.onnx"
    onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), out)  # external_data=True, as torch's default
    assert (tmp_path / "ext.onnx.data").exists()
    _assert_matches(out, m, [(1, 3, 8, 9)])
    one = tmp_path / "one.onnx"
    onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), one, external_data=False)
    assert not (tmp_path / "one.onnx.data").exists()


def test_a_size_computed_from_the_input_is_computed_at_run_time(tmp_path: Path) -> None:
    """A symbolic size that is not the input's own dim (H // 2): the graph computes it, the lowering reads it."""
    class Half(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(x, (x.shape[2] // 2, 7))

    out = tmp_path / "half.onnx"
    report = onnxpoolfix.export(Half(), (torch.randn(1, 3, 10, 11),), out,
                                dynamic_shapes={"x": {2: torch.export.Dim("H", min=4, max=64)}})
    assert [n.lowering for n in report.nodes] == ["dynamic"]
    sess = ort_session(onnx.load(out))
    for h in (4, 13, 64):
        x = torch.randn(1, 3, h, 11)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], Half()(x).numpy(), rtol=1e-5, atol=1e-6)


def test_training_mode_mismatch_says_eval(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout(0.5), nn.AdaptiveAvgPool2d(3))  # not .eval()
    with pytest.raises(onnxpoolfix.TorchMismatchError) as info:
        onnxpoolfix.export(m, (torch.randn(1, 3, 10, 11),), tmp_path / "m.onnx")
    assert "max error" in str(info.value) and "eval()" in info.value.hint

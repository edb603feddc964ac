"""A 1-D adaptive module traced where its output size equals the input length (AdaptiveAvgPool1d(10) at L = 10):
torch writes a kernel-1 pool frozen there. Its one-element windows were refused as "torch's None or the size 10",
but a 1-D adaptive pool takes an int size only (AdaptiveAvgPool1d(None) is a TypeError in torch), so the traced
size gives it: patched with --traced-shape, exact at other lengths (review46; exit 4 before). Without the traced
size it is still refused, asking for it."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

import onnx
from dynamo_exports import assert_matches_torch

from onnxpoolfix.cli import main


def _export(module, length: int, tmp_path) -> str:
    from export_cache import dynamo_export

    torch.manual_seed(0)
    model = dynamo_export(module.eval(), (torch.randn(1, 4, length),), input_names=["x"],
                          dynamic_shapes=({2: torch.export.Dim.DYNAMIC},))
    src = tmp_path / "in.onnx"
    onnx.save(model, src)
    return str(src)


def test_a_1d_module_traced_at_its_own_size_is_patched_with_the_traced_size(tmp_path):
    module = nn.AdaptiveAvgPool1d(10)
    src, out = _export(module, 10, tmp_path), tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [src, str(out)])
    assert r.exit_code == 4 and not out.exists() and "--traced-shape" in r.stderr, r.output
    r = CliRunner().invoke(main, [src, str(out), "--traced-shape", "x:1,4,10"])
    assert r.exit_code == 0, r.output
    assert_matches_torch(onnx.load(out), module, [(1, 4, n) for n in (10, 37, 9, 1, 157)])


def test_a_2d_module_traced_at_its_own_size_stays_refused(tmp_path):
    """(4, 6) at 4x6 and (None, 6) at 4x6 write the same file: no traced size decides it."""
    from export_cache import dynamo_export

    torch.manual_seed(0)
    dims = ({2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC},)
    model = dynamo_export(nn.AdaptiveAvgPool2d((4, 6)).eval(), (torch.randn(1, 3, 4, 6),), input_names=["x"],
                          dynamic_shapes=dims)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,4,6"])
    assert r.exit_code == 4 and not out.exists() and "None" in r.stderr, r.output

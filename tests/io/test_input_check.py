"""One input check for every entry point (issue 23): where the CLI exits 3 (the ONNX checker rejects IN),
``patch``, ``patch_model`` and ``inspect_model`` raise the same ``InvalidModelError``, message and hint (the
CLI names the file, the API "model"). torch's TorchScript exports of unbatched inputs whose own pools
onnxruntime cannot run (an AveragePool with an empty kernel, "Attribute strides has incorrect size") came
back from ``patch()`` as "nothing to patch", unrunnable."""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.errors import InvalidModelError
from onnxpoolfix.inspection.model import inspect_model

torch = pytest.importorskip("torch")


def _export(module, shape) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = module(torch.randn(*shape))
        names = ["y", "i"] if isinstance(outs, tuple) else ["y"]
        torch.onnx.export(module, (torch.randn(*shape),), f, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=names, operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(f.getvalue())


UNBATCHED = {  # torch's own lowering of an unbatched adaptive pool: not runnable in onnxruntime
    "avg1d_(C,L)": (torch.nn.AdaptiveAvgPool1d(3), (4, 12)),  # AveragePool with an empty kernel
    "max2d_indices_(C,H,W)": (torch.nn.AdaptiveMaxPool2d((2, 2), return_indices=True), (3, 8, 8)),  # strides
}


@pytest.fixture(scope="module")
def models():
    return {name: _export(m.eval(), shape) for name, (m, shape) in UNBATCHED.items()}


def _cli_error(model: onnx.ModelProto, tmp_path: Path, *args) -> tuple[str, str, int]:
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    result = CliRunner().invoke(main, [*args, str(src)] + ([str(out)] if not args else []), catch_exceptions=False)
    lines = result.stderr.rstrip("\n").splitlines()
    assert len(lines) == 2 and not out.exists(), result.output
    message = lines[0].removeprefix("onnxpoolfix: error: ").replace(str(src), "model")
    return message, lines[1].removeprefix("  hint: "), result.exit_code


@pytest.mark.parametrize("name", list(UNBATCHED))
def test_every_entry_point_raises_what_the_cli_exits_3_with(name, models, tmp_path):
    model = models[name]
    message, hint, code = _cli_error(model, tmp_path)
    assert code == 3 and "fails the ONNX checker" in message and "unbatched" in hint
    assert _cli_error(model, tmp_path, "inspect") == (message, hint, 3)
    for call in (onnxpoolfix.patch, onnxpoolfix.patch_model, inspect_model,
                 lambda m: onnxpoolfix.patch(m, check=False)):
        with pytest.raises(InvalidModelError) as info:
            call(model)
        assert (str(info.value), info.value.hint, info.value.exit_code) == (message, hint, 3)


def test_a_valid_model_still_patches_through_the_api(models):
    """The check passes what the checker accepts: a batched export of the same pool patches as before."""
    result = onnxpoolfix.patch(_export(torch.nn.AdaptiveAvgPool1d(3).eval(), (1, 4, 12)))
    assert result.report.check_passed or result.report.nodes == []


def test_a_pool_the_patch_repairs_is_judged_repaired_by_every_entry_point(tmp_path):
    """A kernel of the pooling rank on an unbatched input fails the ONNX checker ("Attribute strides has
    incorrect size"), but its sizes are all in the graph: the check judges the model as repaired (as it
    judges leftovers in bodies typed), so the CLI and the API both patch it."""
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[4, 2], strides=[4, 2])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(Exception, match="Attribute strides has incorrect size"):
        onnx.checker.check_model(model, full_check=True)
    assert onnxpoolfix.patch(model).report.nodes[0].why.startswith("repaired: ")
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    result = CliRunner().invoke(main, [str(src), str(out), "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and out.exists(), result.output


def test_a_scripted_export_whose_if_reads_a_leftover_patches_from_the_cli_too(tmp_path):
    """torch leaves the If's outputs untyped where a branch reads a top-level leftover's result: the API
    patched it, the CLI refused it (exit 3). One check: both patch it."""
    from control_flow_models import chained_modules, export_scripted

    module = chained_modules(torch)["if_after_pool"]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"])
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(exported, src)
    result = CliRunner().invoke(main, [str(src), str(out), "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and out.exists(), result.output
    assert onnxpoolfix.patch(exported).report.check_passed

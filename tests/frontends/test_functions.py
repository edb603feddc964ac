"""Leftovers hidden in model-local functions (torch's export_modules_as_functions) are inlined and patched,
never silently left behind."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from helpers import model_with_function
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.frontends.leftovers import ATEN_DOMAIN


def test_leftover_inside_a_local_function_is_inlined_and_patched():
    result = onnxpoolfix.patch(model_with_function())
    assert result.report.status == "patched" and result.report.check_passed
    assert [n.code for n in result.report.notes][0] == "inlined-functions"
    model = result.model
    assert not model.functions or not any(n.domain == ATEN_DOMAIN for f in model.functions for n in f.node)
    assert not any(n.domain in (ATEN_DOMAIN, "local") for n in model.graph.node)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 9)).astype(np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = np.maximum(reference.adaptive_avg_pool(x, (5, 7)), 0)
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-6)


def test_cli_patches_a_function_wrapped_leftover(tmp_path):
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model_with_function(), src)
    result = CliRunner().invoke(main, [str(src), str(dst)])
    assert result.exit_code == 0, result.output
    assert "inlined the local function(s) Block" in result.output
    assert not any(n.domain == ATEN_DOMAIN for n in onnx.load(dst).graph.node)


def _nested_functions() -> onnx.ModelProto:
    """The graph calls Outer, Outer calls Inner, Inner holds the leftover (nested modules as functions)."""
    inner = helper.make_function("local", "Inner", ["fx"], ["fy"], [
        helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([4, 5], np.int64))),
        helper.make_node("adaptive_avg_pool2d", ["fx", "s"], ["fy"], domain=ATEN_DOMAIN)],
        [helper.make_opsetid("", 17), helper.make_opsetid(ATEN_DOMAIN, 1)])
    outer = helper.make_function("local", "Outer", ["ox"], ["oy"], [
        helper.make_node("Inner", ["ox"], ["t"], domain="local"), helper.make_node("Relu", ["t"], ["oy"])],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    graph = helper.make_graph([helper.make_node("Outer", ["x"], ["y"], domain="local", name="call")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 11, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 5])])
    return helper.make_model(graph, functions=[inner, outer], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ATEN_DOMAIN, 1), helper.make_opsetid("local", 1)])


def test_a_leftover_in_a_function_called_by_a_function_is_inlined_down_to_the_graph():
    """Inlining only the function holding the pool left it inside its caller, still a function: the patch
    said 'nothing to patch' and wrote a model onnxruntime refuses."""
    result = onnxpoolfix.patch(_nested_functions())
    assert result.report.status == "patched" and result.report.check_passed
    (inlined,) = [n for n in result.report.notes if n.code == "inlined-functions"]
    assert "Inner" in inlined and "Outer" in inlined
    model = result.model
    assert not any(n.domain == ATEN_DOMAIN for f in model.functions for n in f.node)
    assert not any(n.domain in (ATEN_DOMAIN, "local") for n in model.graph.node)
    x = np.random.default_rng(0).standard_normal((2, 3, 11, 9)).astype(np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(reference.adaptive_avg_pool(x, (4, 5)), 0), rtol=0, atol=1e-6)


def test_cli_takes_a_torch_export_of_nested_modules_as_functions(tmp_path):
    """torch's export_modules_as_functions of Sequential(conv, pool, ReLU): the ONNX checker refuses the export
    itself (inferring the function bodies, the aten output has no type for the ReLU); the CLI checks the
    model as the patch will inline it instead of stopping with exit 3."""
    import io
    import warnings

    import pytest

    torch = pytest.importorskip("torch")
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.AdaptiveAvgPool2d((4, 5)), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 11, 9)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), f, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17,
                          export_modules_as_functions=True,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(f.getvalue())
    result = CliRunner().invoke(main, [str(src), str(dst)])
    assert result.exit_code == 0, result.output
    model = onnx.load(dst)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(y, net(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_function_wrapped_export_with_external_data_is_patched_against_torch(tmp_path):
    """review22 cases 404/420: with external data the checker's retry on the inlined model checked the file by its
    path again (the un-inlined model), so the export was refused (exit 3); without external data it passed."""
    import pytest
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    torch = pytest.importorskip("torch")
    nn = torch.nn

    class SppHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(8, 4, 3, padding=1)
            self.l1, self.l2 = nn.AdaptiveAvgPool2d(2), nn.AdaptiveAvgPool2d(3)

        def forward(self, x):
            f = torch.relu(self.c(x))
            return torch.cat([torch.flatten(self.l1(f), 1), torch.flatten(self.l2(f), 1)], 1)

    torch.manual_seed(0)
    m, x = SppHead().eval(), torch.randn(2, 8, 7, 5)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    torch.onnx.export(m, (x,), src, dynamo=False, opset_version=18, input_names=["x"],
                      export_modules_as_functions=True,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    onnx.save(onnx.load(src), src, save_as_external_data=True, location="in.onnx.data", size_threshold=0)
    assert onnx.load(src).functions
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(y, m(x).numpy(), rtol=1e-5, atol=1e-6)

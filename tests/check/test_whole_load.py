"""The check loads the whole patched model in onnxruntime, not only the part of the graph that computes the
replaced nodes: torch's opset-9 Upsample after a pool can be invalid in the file torch wrote, and exit 0 wrote an
OUT onnxruntime refuses at load (review22 cases 140, 301)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import make_leftover
from onnx import TensorProto, helper

from onnxpoolfix import reference
from onnxpoolfix.check import whole
from onnxpoolfix.cli import main
from onnxpoolfix.sessions import ort_session


def _psp_branch(opset: int, tmp_path):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Branch(torch.nn.Module):
        def forward(self, f):
            h, w = f.shape[-2:]
            return torch.cat([f, F.interpolate(F.adaptive_avg_pool2d(f, 5), size=(h, w), mode="nearest")], 1)

    src = tmp_path / f"psp{opset}.onnx"
    x = torch.randn(2, 8, 16, 19)  # 19 / 5 as a float32 scale: 5 * 3.8 is 18.99..., floored to 18 by onnxruntime
    torch.onnx.export(Branch(), (x,), src, dynamo=False, opset_version=opset, input_names=["x"],
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return Branch(), x, src


@pytest.mark.filterwarnings("ignore")
def test_an_out_onnxruntime_refuses_past_the_replaced_nodes_is_refused_and_not_written(tmp_path):
    _, _, src = _psp_branch(9, tmp_path)
    dst = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [str(src), str(dst)])
    assert r.exit_code == 5, r.output
    assert "Concat" in r.output and "Inferred=18" in r.output
    assert not dst.exists()


@pytest.mark.filterwarnings("ignore")
def test_the_same_branch_at_opset_11_is_written_and_exact_against_torch(tmp_path):
    m, x, src = _psp_branch(11, tmp_path)
    dst = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [str(src), str(dst)])
    assert r.exit_code == 0, r.output
    (y,) = ort_session(str(dst)).run(None, {"x": x.numpy()})
    np.testing.assert_allclose(y, m(x).numpy(), rtol=1e-5, atol=1e-6)


def test_an_op_onnxruntime_has_no_kernel_for_is_a_warning_not_a_refusal(tmp_path):
    """OUT may be for TensorRT, which runs what onnxruntime's CPU build lacks (a bfloat16 Relu): the replaced node
    is proven on its own part of the graph, and OUT written, with the op named."""
    model = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    g = model.graph
    g.node[-1].output[0] = "pooled"
    g.node.extend([helper.make_node("Cast", ["pooled"], ["b"], to=TensorProto.BFLOAT16),
                   helper.make_node("Relu", ["b"], ["y"])])
    g.output[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(dst), "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert "no kernel" in r.output and "Relu" in r.output
    out = onnx.load(dst)
    out.graph.output[0].name = "pooled"  # the pooled tensor of OUT, against the numpy reference
    del out.graph.node[-2:]
    out.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 9)).astype(np.float32)
    (y,) = ort_session(out).run(None, {"x": x})
    np.testing.assert_allclose(y, reference.adaptive_avg_pool(x, (5, 7)), rtol=1e-6, atol=1e-6)


def test_the_skeleton_keeps_small_constants_and_declares_big_ones_as_inputs():
    w = np.ones((whole.SKELETON_CONSTANT_ELEMENTS + 1,), np.float32)
    s = np.ones((1,), np.float32)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Mul", ["t", "s"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [w.size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(s, "s")])
    skeleton = onnx.load_from_string(whole._graph_bytes(helper.make_model(g), skeleton=True))
    assert [t.name for t in skeleton.graph.initializer] == ["s"]
    assert [i.name for i in skeleton.graph.input] == ["x", "w"]

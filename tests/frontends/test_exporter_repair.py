"""The exporter's own pools that cannot run as written are repaired by default
(onnxpoolfix/frontends/exporter_repair.py).

Each case is a real torch 2.13 TorchScript export (dynamo=False, ONNX_FALLTHROUGH): first shown to fail in
onnxruntime as exported, then patched with default options, then compared with torch directly.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from helpers import assert_avg_close, assert_bits_equal, ort_run, ort_session
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.errors import InvalidModelError
from onnxpoolfix.frontends.exporter_repair import REPAIRED


def _export(torch, module, x, dynamic=False):
    f = io.BytesIO()
    axes = {"x": {a: f"d{a}" for a in range(x.ndim)}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, dynamic_axes=axes)
    return onnx.load_from_string(f.getvalue())


def _fails_as_exported(model, x) -> str:
    try:
        ort_session(model, log_level=4).run(None, {"x": x})
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal is the point
        return str(e)
    raise AssertionError("the export runs as written: this test no longer shows the exporter's bug")


# (name, module, input, dynamic, onnxruntime's complaint about the export, exporter op)
CASES = {
    "avg1d_global_unbatched": (lambda nn: nn.AdaptiveAvgPool1d(1), (3, 8), "float32", False,
                               "cannot be less than 3", "GlobalAveragePool"),
    "avg1d_global_unbatched_dynamic": (lambda nn: nn.AdaptiveAvgPool1d(1), (3, 8), "float32", True,
                                       "cannot be less than 3", "GlobalAveragePool"),
    "avg2d_float64": (lambda nn: nn.AdaptiveAvgPool2d((2, 4)), (1, 3, 8, 8), "float64", False,
                      "NOT_IMPLEMENTED", "AveragePool"),
    "avg2d_global_float64": (lambda nn: nn.AdaptiveAvgPool2d(1), (2, 3, 5, 7), "float64", False,
                             "NOT_IMPLEMENTED", "GlobalAveragePool"),
    "avg3d_global_float64_dynamic": (lambda nn: nn.AdaptiveAvgPool3d(1), (1, 2, 3, 4, 5), "float64", True,
                                     "NOT_IMPLEMENTED", "GlobalAveragePool"),
    "max2d_global_float64_dynamic": (lambda nn: nn.AdaptiveMaxPool2d(1), (2, 3, 5, 7), "float64", True,
                                     "NOT_IMPLEMENTED", "GlobalMaxPool"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_broken_exporter_pool_is_repaired_and_matches_torch(name, torch_mod):
    torch = torch_mod
    make, shape, dtype, dynamic, complaint, op = CASES[name]
    module = make(torch.nn).eval()
    x = torch.randn(*shape, dtype=getattr(torch, dtype))
    exported = _export(torch, module, x, dynamic)
    assert [n.op_type for n in exported.graph.node if "Pool" in n.op_type] == [op]
    assert complaint in _fails_as_exported(exported, x.numpy())

    result = onnxpoolfix.patch(exported)
    assert result.report.check_passed
    [node] = result.report.nodes
    assert node.op == op and node.encoding == "standard"
    assert node.why.startswith(REPAIRED), node.why
    assert op not in [n.op_type for n in result.model.graph.node]
    sess = ort_session(result.model, log_level=4)
    rng = np.random.default_rng(0)
    shapes = [shape] + ([tuple(d + 2 for d in shape)] if dynamic else [])
    for s in shapes:
        xi = rng.standard_normal(s).astype(dtype)
        if "max" in name:
            xi.reshape(-1)[::7] = np.nan
            xi.reshape(-1)[::5] = -np.inf
        got = sess.run(None, {"x": xi})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(xi)).numpy()
        if "max" in name:
            assert_bits_equal(got, want, f"{name} at {s}")
        else:
            assert_avg_close(got, want, xi)


def test_a_valid_runnable_exporter_pool_stays(torch_mod):
    torch = torch_mod
    module = torch.nn.AdaptiveAvgPool2d((2, 4)).eval()
    exported = _export(torch, module, torch.randn(1, 3, 8, 8))
    result = onnxpoolfix.patch(exported)
    assert result.report.nodes == [] and [n.code for n in result.report.notes] == ["nothing-to-patch"]
    assert [n.op_type for n in result.model.graph.node] == ["AveragePool"]


def test_float64_pools_are_not_repaired_for_tensorrt(torch_mod):
    """The dtype repair is onnxruntime's missing kernel; TensorRT's parser takes the node (as FP32)."""
    torch = torch_mod
    exported = _export(torch, torch.nn.AdaptiveAvgPool2d(1).eval(), torch.randn(1, 3, 8, 8, dtype=torch.float64))
    result = onnxpoolfix.patch(exported, target="tensorrt", check=False)
    assert result.report.nodes == [] and [n.op_type for n in result.model.graph.node] == ["GlobalAveragePool"]
    # and the report warns that OUT then does not run in onnxruntime
    [kept] = [n for n in result.report.notes if n.code == "float64-pool-kept"]
    assert kept.severity == "warning"


@pytest.mark.parametrize("op", ["GlobalAveragePool", "AveragePool"])
def test_float64_pools_are_repaired_for_the_portable_target(op):
    # portable's runtimes include onnxruntime: the node used to stay, and OUT did not load there (exit 0)
    result = onnxpoolfix.patch(_float64_global_pool(ops=(op,)), target="portable")
    assert op not in {n.op_type for n in result.model.graph.node}
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8))
    got = ort_session(result.model).run(None, {"x": x})[0]
    want = x.mean(axis=(2, 3), keepdims=True) if op.startswith("Global") else x.reshape(1, 3, 2, 4, 2, 4).mean((3, 5))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_intent_not_in_the_graph_is_left_as_written(torch_mod):
    """Unbatched (C, H, W): the exporter pooled only W (kernel [4], as if H were the channels) and wrote
    a valid node; nothing in the graph says H was meant too. (C, L) with an output size > 1: AveragePool with
    an empty kernel, the size is nowhere. The first stays as the exporter wrote it (README); the second is not
    valid ONNX: patch() raises the InvalidModelError the CLI exits 3 with (issue 23), not "nothing to patch"."""
    torch = torch_mod
    exported = _export(torch, torch.nn.AdaptiveAvgPool2d((2, 2)).eval(), torch.randn(3, 8, 8))
    result = onnxpoolfix.patch(exported)
    assert result.report.nodes == []
    assert [n.op_type for n in result.model.graph.node] == [n.op_type for n in exported.graph.node]
    exported = _export(torch, torch.nn.AdaptiveAvgPool1d(5).eval(), torch.randn(8, 8))
    with pytest.raises(InvalidModelError, match="at least 3 dimensions") as info:
        onnxpoolfix.patch(exported)
    assert "unbatched" in info.value.hint


def _hand_built_unbatched(kernel, shape, op="AveragePool", dtype=TensorProto.FLOAT):
    """A pooling node whose kernel has the POOLING rank on an unbatched input (one rank less than ONNX wants):
    what an exporter that forgets the batch writes; torch's own helper MaxPool has this form."""
    attrs = {} if op.startswith("Global") else {"kernel_shape": list(kernel), "strides": list(kernel)}
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
                              [helper.make_tensor_value_info("y", dtype, [None] * len(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kind", ["AveragePool", "MaxPool"])
def test_kernel_rank_above_the_inputs_spatial_rank_pools_the_last_axes(kind, torch_mod):
    torch = torch_mod
    model = _hand_built_unbatched((4, 2), (3, 8, 6), kind)
    x = np.random.default_rng(1).standard_normal((3, 8, 6)).astype(np.float32)
    assert "incorrect size" in _fails_as_exported(model, x) or "kernel" in _fails_as_exported(model, x).lower()
    result = onnxpoolfix.patch(model)
    [node] = result.report.nodes
    assert node.why.startswith(REPAIRED) and "rank-2 kernel on a rank-3" in node.why
    got = ort_session(result.model, log_level=4).run(None, {"x": x})[0]
    fn = torch.nn.functional.adaptive_avg_pool2d if kind == "AveragePool" else torch.nn.functional.adaptive_max_pool2d
    want = fn(torch.from_numpy(x), (2, 3))
    want = (want[0] if isinstance(want, tuple) else want).numpy()
    assert_bits_equal(got, want) if kind == "MaxPool" else assert_avg_close(got, want, x)


def test_a_pool_with_a_partial_window_is_not_repaired():
    """kernel 3 stride 3 over 8 (a partial last window) is no adaptive pool: not repaired (no exact lowering)."""
    # not valid ONNX either way, and nothing to repair it into: the InvalidModelError the CLI exits 3 with
    for kernel, shape in [((3,), (8,)), ((3, 3), (3, 8, 8))]:  # rank-1 input: kernel rank 1 >= input rank
        with pytest.raises(InvalidModelError, match="fails the ONNX checker"):
            onnxpoolfix.patch(_hand_built_unbatched(kernel, shape, "AveragePool"))


# --- through plan_model: inspect sees what patch repairs, and the other exporter front end does not plan it twice

def _float64_global_pool(shape=(1, 3, 8, 8), ops=("GlobalAveragePool",)):
    nodes = [helper.make_node(op, ["x"], [f"y{i}"], name=f"pool{i}",
                              **({} if op.startswith("Global") else {"kernel_shape": [4, 4], "strides": [4, 4]}))
             for i, op in enumerate(ops)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(shape))],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.DOUBLE, list(shape[:2]) + (
                                  [1, 1] if op.startswith("Global") else [d // 4 for d in shape[2:]]))
                               for i, op in enumerate(ops)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_inspect_lists_the_repaired_node_with_its_reason():
    from onnxpoolfix.inspection.model import inspect_model

    ins = inspect_model(_float64_global_pool())
    [node] = ins.nodes
    assert node.op == "GlobalAveragePool" and node.chosen and node.blocker is None
    assert node.why.startswith(REPAIRED + "onnxruntime has no float64 kernel for GlobalAveragePool"), node.why
    assert ins.would_patch and ins.exit_code == 0
    assert "repaired: onnxruntime has no float64 kernel" in ins.format_text()
    # and it is what patch does
    [row] = onnxpoolfix.patch(_float64_global_pool()).report.nodes
    assert row.lowering == node.chosen and row.why == node.why


def test_cli_inspect_shows_the_repair(tmp_path):
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    path = tmp_path / "broken.onnx"
    onnx.save(_float64_global_pool(), str(path))
    out = CliRunner().invoke(main, ["inspect", str(path)])
    assert out.exit_code == 0, out.output
    assert "chosen: repaired: onnxruntime has no float64 kernel for GlobalAveragePool" in out.output


def test_a_repaired_node_is_planned_once_with_optimize_exporter_pools():
    """Both exporter front ends see a float64 GlobalAveragePool; only the repair plans it."""
    from onnxpoolfix.inspection.model import inspect_model

    result = onnxpoolfix.patch(_float64_global_pool(), optimize_exporter_pools=True)
    assert result.report.check_passed
    [row] = result.report.nodes
    assert row.why.startswith(REPAIRED)
    assert len(inspect_model(_float64_global_pool(), optimize_exporter_pools=True).nodes) == 1


def test_repaired_pools_of_one_tensor_are_not_grouped():
    """Two float64 pools of one input would be a pyramid; each repaired node keeps its own line and reason."""
    result = onnxpoolfix.patch(_float64_global_pool(ops=("GlobalAveragePool", "AveragePool")))
    assert result.report.check_passed
    assert len(result.report.nodes) == 2
    for row in result.report.nodes:
        assert row.why.startswith(REPAIRED) and row.lowering != "pyramid", row
    assert not {"GlobalAveragePool", "AveragePool"} & {n.op_type for n in result.model.graph.node}


def test_a_symbolic_repair_below_opset_11_is_a_reduce():
    """Opset 10, symbolic sizes: the dynamic lowering needs Range (opset 11), a pool to 1 does not (it was left
    as written): a float64 ReduceMean, equal to NumPy's mean at sizes of every kind."""
    model = _float64_global_pool(shape=(1, 3, "H", "W"))
    model.opset_import[0].version = 10
    result = onnxpoolfix.patch(model)
    [row] = result.report.nodes
    assert row.lowering == "global" and {n.op_type for n in result.model.graph.node} == {"ReduceMean"}
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 5, 7), (1, 3, 1, 1), (1, 3, 64, 3)]:
        x = rng.standard_normal(shape)
        np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], x.mean(axis=(2, 3), keepdims=True), rtol=1e-13)


def test_a_repair_no_lowering_applies_to_stays_with_a_note():
    """Opset 7, symbolic sizes, float64 max: no lowering keeps a NaN below the guards' opset. Left as written,
    said so."""
    from onnxpoolfix.inspection.model import inspect_model

    model = _float64_global_pool(shape=(1, 3, "H", "W"), ops=("GlobalMaxPool",))
    model.opset_import[0].version = 7
    result = onnxpoolfix.patch(model)
    assert result.report.nodes == [] and [n.severity for n in result.report.notes if n.code == "cannot-run-left"] == [
        "warning"]
    ins = inspect_model(model)
    [node] = ins.nodes
    assert node.blocker is None and node.chosen is None and ins.would_patch


def test_the_cli_names_the_unbatched_export_when_the_checker_refuses_it(tmp_path, torch_mod):
    """(C, L) -> AdaptiveAvgPool1d(4): torch writes an AveragePool with an empty kernel that the ONNX checker
    refuses. Exit 3, nothing written, and the hint says what torch did and how to export it instead (the
    generic "malformed" hint sent users of a plain torch export hunting for a bug in their model)."""
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    src, out = tmp_path / "unbatched.onnx", tmp_path / "out.onnx"
    onnx.save(_export(torch_mod, torch_mod.nn.AdaptiveAvgPool1d(4).eval(), torch_mod.randn(3, 11)), src)
    res = CliRunner().invoke(main, [str(src), str(out)])
    assert res.exit_code == 3 and not out.exists()
    assert "fails the ONNX checker" in res.output and "unbatched input" in res.output
    assert "x.unsqueeze(0)" in res.output and "malformed" not in res.output

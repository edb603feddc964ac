"""The portable target and ncnn (through pnnx), which has no layer for Gathers, comparisons, Where or If: the planner
writes a form without them wherever one applies (its static max pooling as window Slices, or one MaxPool where
the windows are uniform), though the Gathers are faster in onnxruntime (review89 and review91: 1.3x to 12.6x);
where none applies (indices read, an axis of more than 64 windows, a strategy that forces one) the note
``ncnn-layers`` names the nodes and why. tests/test_runtime_ncnn.py runs the files in ncnn."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import NCNN_LACKS, leftovers_in_if_branches
from onnx import TensorProto, helper, numpy_helper
from runtime_fixtures import runs

import onnxpoolfix
from onnxpoolfix.cli import main

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
STATIC = [c for c in CASES if not c["dynamic"]]
STATIC_MAX = [c for c in STATIC if c["kind"] == "max"]


def ncnn_notes(result):
    return [n for n in result.report.notes if n.code == "ncnn-layers"]


def lacking_ops(model) -> set[str]:
    return {n.op_type for n in model.graph.node} & NCNN_LACKS


def assert_exact(model, feeds, want: list[np.ndarray]) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    assert len(got) >= len(want)
    for g, expected in zip(got, want):
        np.testing.assert_array_equal(g, expected)


@pytest.mark.parametrize("case", STATIC_MAX, ids=[c["name"] for c in STATIC_MAX])
def test_the_portable_max_is_written_without_what_ncnn_lacks_where_a_form_applies(case):
    result = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable")
    if "indices" in case["name"]:  # the indices need Gathers and comparisons: the note says so
        (note,) = ncnn_notes(result)
        assert set(note.data["ops"]) == lacking_ops(result.model) and len(note.data["nodes"]) == 1
        assert note.data["forced"] is False
        assert result.report.nodes[0].name in note.data["nodes"][0] and "indices output is read" in str(note)
        return
    assert not lacking_ops(result.model) and not ncnn_notes(result)
    # a form with Gathers applies too (and runs faster in onnxruntime): the planner chose the other for ncnn
    gathers = []
    for strategy in ("argmax", "window_gather", "pool_cover"):
        try:
            gathers.append(onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", strategy=strategy))
        except onnxpoolfix.PoolFixError:
            continue
    assert gathers and all(lacking_ops(g.model) for g in gathers)
    assert all(n.data["forced"] for g in gathers for n in ncnn_notes(g)) and all(ncnn_notes(g) for g in gathers)
    _, feeds, want = next(runs(case))  # torch's saved input and output (a static file takes one size)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert want and set(want) <= set(got)
    for name, expected in want.items():
        np.testing.assert_array_equal(got[name], expected)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
def test_no_note_where_nothing_ncnn_lacks_is_written_by_the_portable_target(target):
    """Static averages of every target, max pooling of the other targets (their own notes say what ncnn
    refuses there: the If guards), and symbolic files (their Gathers read the input's shape; pnnx converts one
    size at a time: bind it) get no such note."""
    for case in CASES:
        if case["kind"] == "max" and target == "portable" and not case["dynamic"]:
            continue
        try:
            result = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, check=False)
        except onnxpoolfix.PoolFixError:
            continue
        assert not ncnn_notes(result), (case["name"], target)
        if target == "portable" and not case["dynamic"]:
            assert not lacking_ops(result.model), case["name"]


def test_the_cli_says_why_and_what_a_forced_strategy_does(tmp_path):
    out = tmp_path / "out.onnx"
    run = CliRunner().invoke(main, [str(FIXTURES / "max2d_indices_output.onnx"), str(out), "--target", "portable"])
    assert run.exit_code == 0, run.output
    assert "ncnn (through pnnx) has no layer for" in run.output and "indices output is read" in run.output
    run = CliRunner().invoke(main, [str(FIXTURES / "max2d.onnx"), str(out), "--target", "portable",
                                    "--strategy", "argmax"])
    assert run.exit_code == 0, run.output
    assert "forced by --strategy; drop --strategy for a form without them" in run.output


def pools_of_one_input(pools, shape):
    """x -> one FALLTHROUGH leftover per ``(kind, size)`` of ``pools``, each its own output; every node named
    'pool' (torch names nodes by their module path: two calls of one module share it)."""
    nodes, outputs = [], []
    for i, (kind, size) in enumerate(pools):
        nodes.append(helper.make_node("Constant", [], [f"size{i}"],
                                      value=numpy_helper.from_array(np.array(size, np.int64))))
        nodes.append(helper.make_node(f"adaptive_{kind}_pool{len(size)}d", ["x", f"size{i}"], [f"y{i}"], name="pool",
                                      domain="org.pytorch.aten"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, list(shape[:2]) + list(size)))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)],
                             ir_version=8)


def torch_pool(kind, x, size):
    return getattr(torch.nn.functional, f"adaptive_{kind}_pool{len(size)}d")(torch.from_numpy(x), size).numpy()


def test_nodes_of_one_name_and_in_if_branches_are_written_without_what_ncnn_lacks():
    """Two max pools named alike, and two in the branches of a user's If (review92: the note keyed its nodes by
    name, and two of one name made it fail with an internal error)."""
    two = pools_of_one_input([("max", (3, 4)), ("max", (2, 5))], (1, 3, 20, 22))
    branches = leftovers_in_if_branches()
    for graph in (a.g for n in branches.graph.node for a in n.attribute if a.type == a.GRAPH):
        for n in graph.node:
            n.op_type = "adaptive_max_pool2d"
    x = np.random.default_rng(2).standard_normal((1, 3, 20, 22)).astype(np.float32)
    xb = np.random.default_rng(3).standard_normal((1, 2, 8, 9)).astype(np.float32)
    for model, feeds, want in [(two, {"x": x}, [torch_pool("max", x, (3, 4)), torch_pool("max", x, (2, 5))]),
                               (branches, {"x": xb, "c": np.array(True)}, [torch_pool("max", xb, (5, 7))])]:
        result = onnxpoolfix.patch(model, target="portable")
        assert not ncnn_notes(result)
        graphs = [result.model.graph] + [a.g for n in result.model.graph.node for a in n.attribute if a.type == a.GRAPH]
        assert not {n.op_type for g in graphs for n in g.node} & (NCNN_LACKS - {"If"})  # (the user's own If)
        assert_exact(result.model, feeds, want)


def test_the_note_names_the_nodes_no_form_fits():
    """Beside a max pool, an average of 67 windows on an axis (more than the window Slices cut: window sums, a
    Gather): the note names the average alone, with the reason."""
    model = pools_of_one_input([("max", (3, 4)), ("avg", (67, 7))], (1, 3, 141, 22))
    result = onnxpoolfix.patch(model, target="portable")
    (note,) = ncnn_notes(result)
    assert note.data["ops"] == ["Gather"] and len(note.data["nodes"]) == 1 and "67 windows" in str(note)
    x = np.random.default_rng(4).standard_normal((1, 3, 141, 22)).astype(np.float32)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})
    np.testing.assert_array_equal(got[0], torch_pool("max", x, (3, 4)))
    np.testing.assert_allclose(got[1], torch_pool("avg", x, (67, 7)), rtol=1e-5, atol=1e-6)

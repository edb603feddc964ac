"""The portable target's note where it writes ops ncnn (through pnnx) has no layer for (``ncnn-layers``): its
static max pooling's Gathers and comparisons (kept by default: the fastest exact forms in onnxruntime, exact after
quantize_static; review89 and review91 measured the forms without them 1.3x to 12.6x slower). The note names the
nodes and the remedy, ``window_slices``, where it applies; following it gives a file with none of those ops, as
exact as torch. tests/test_runtime_ncnn.py runs both kinds of file in ncnn."""
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
from onnxpoolfix.errors import PoolFixError, UnsupportedNodeError

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
STATIC = [c for c in CASES if not c["dynamic"]]
STATIC_MAX = [c for c in STATIC if c["kind"] == "max"]


def ncnn_notes(result):
    return [n for n in result.report.notes if n.code == "ncnn-layers"]


def lacking_ops(model) -> set[str]:
    return {n.op_type for n in model.graph.node} & NCNN_LACKS


@pytest.mark.parametrize("case", STATIC_MAX, ids=[c["name"] for c in STATIC_MAX])
def test_the_note_names_what_ncnn_lacks_and_following_it_removes_it(case):
    result = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable")
    lacking = lacking_ops(result.model)
    (note,) = ncnn_notes(result)
    assert lacking and set(note.data["ops"]) == lacking, (note.data, lacking)
    assert len(note.data["nodes"]) == 1 and result.report.nodes[0].name in note.data["nodes"][0]
    if "indices" in case["name"]:  # the indices need Gathers and comparisons: nothing to offer
        assert note.data["window_slices"] is False and "would have to apply to every node" in str(note)
        with pytest.raises(UnsupportedNodeError):  # (what the advice would have led to)
            onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", strategy="window_slices")
        return
    assert note.data["window_slices"] is True and "strategy='window_slices'" in str(note)
    followed = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", strategy="window_slices")
    assert not lacking_ops(followed.model) and not ncnn_notes(followed)
    _, feeds, want = next(runs(case))  # torch's saved input and output (a static file takes one size)
    sess = ort.InferenceSession(followed.model.SerializeToString(), providers=["CPUExecutionProvider"])
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
        except PoolFixError:
            continue
        assert not ncnn_notes(result), (case["name"], target)
        if target == "portable" and not case["dynamic"]:
            assert not lacking_ops(result.model), case["name"]


def test_the_cli_names_the_flag(tmp_path):
    out = tmp_path / "out.onnx"
    run = CliRunner().invoke(main, [str(FIXTURES / "max2d.onnx"), str(out), "--target", "portable"])
    assert run.exit_code == 0, run.output
    assert "--strategy window_slices writes them without" in run.output


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


def test_nodes_of_one_name_and_in_if_branches_get_one_note_and_a_remedy_that_works():
    """Two max pools named alike, and two in the branches of a user's If (review92: the note keyed its nodes by
    name, and two of one name made it fail with an internal error)."""
    two = pools_of_one_input([("max", (3, 4)), ("max", (2, 5))], (1, 3, 20, 22))
    branches = leftovers_in_if_branches()
    for graph in (a.g for n in branches.graph.node for a in n.attribute if a.type == a.GRAPH):
        for n in graph.node:
            n.op_type = "adaptive_max_pool2d"
    x = np.random.default_rng(2).standard_normal((1, 3, 20, 22)).astype(np.float32)
    xb = np.random.default_rng(3).standard_normal((1, 2, 8, 9)).astype(np.float32)
    runs = [(two, {"x": x}, [torch_pool("max", x, (3, 4)), torch_pool("max", x, (2, 5))]),
            (branches, {"x": xb, "c": np.array(True)}, [torch_pool("max", xb, (5, 7))])]
    for model, feeds, want in runs:
        (note,) = ncnn_notes(onnxpoolfix.patch(model, target="portable"))
        assert len(note.data["nodes"]) == 2 and note.data["window_slices"] is True
        followed = onnxpoolfix.patch(model, target="portable", strategy="window_slices")
        assert not ncnn_notes(followed)
        sess = ort.InferenceSession(followed.model.SerializeToString(), providers=["CPUExecutionProvider"])
        for got, expected in zip(sess.run(None, feeds), want):
            np.testing.assert_array_equal(got, expected)


def test_no_remedy_where_window_slices_does_not_apply_to_every_node():
    """A strategy names one lowering for every node: beside an average of 70 windows on an axis (more
    than the window Slices cut), forcing them is an error, so the note does not offer them (review92)."""
    model = pools_of_one_input([("max", (3, 4)), ("avg", (70, 7))], (1, 3, 141, 22))
    (note,) = ncnn_notes(onnxpoolfix.patch(model, target="portable"))
    assert note.data["window_slices"] is False and "would have to apply to every node" in str(note)
    with pytest.raises(UnsupportedNodeError):
        onnxpoolfix.patch(model, target="portable", strategy="window_slices")

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
from helpers import NCNN_LACKS

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.errors import PoolFixError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
STATIC = [c for c in CASES if not c["dynamic"]]
STATIC_MAX = [c for c in STATIC if c["kind"] == "max"]


def saved(case):
    data = np.load(FIXTURES / case["data_file"])
    feeds = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("input:") and "@" not in k}
    outputs = [data[k] for k in data.files if k.startswith("output:") and "@" not in k]
    return feeds, outputs


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
        assert note.data["window_slices"] == [] and "no lowering writes it without" in str(note)
        return
    assert note.data["window_slices"] == note.data["nodes"] and "strategy='window_slices'" in str(note)
    followed = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", strategy="window_slices")
    assert not lacking_ops(followed.model) and not ncnn_notes(followed)
    feeds, want = saved(case)
    sess = ort.InferenceSession(followed.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, expected in zip(sess.run(None, feeds), want):
        np.testing.assert_array_equal(got, expected)


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

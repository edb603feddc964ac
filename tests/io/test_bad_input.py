"""Every kind of bad input, through the command line: one ``onnxpoolfix: error:`` line naming the problem,
one ``hint:`` line saying what to do, the documented exit code, no traceback, and no OUT (nor any temporary
file) left behind. ``-v`` adds the traceback. A few cases also run as a real subprocess."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import ATEN, make_leftover
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.io import save_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CONVNET = FIXTURES / "small_convnet.onnx"


# ------------------------------------------------------------------------------------------ helpers


def run_cli(args: list[str]):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)


def assert_clean_failure(result, code: int, out: Path, *needles: str) -> str:
    """Exit ``code``; stderr is exactly the error line and the hint line; nothing was written."""
    err = result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {type(result.exception).__name__}: {result.exception}")
    assert result.exit_code == code, f"exit {result.exit_code}, expected {code}:\n{err}"
    assert "Traceback" not in err + result.stdout, err
    lines = err.rstrip("\n").splitlines()
    assert len(lines) == 2, f"expected an error line and a hint line:\n{err}"
    assert lines[0].startswith("onnxpoolfix: error: "), err
    assert lines[1].startswith("  hint: ") and len(lines[1]) > len("  hint: ") + 10, err
    for needle in needles:
        assert needle.lower() in lines[0].lower() + " " + lines[1].lower(), f"{needle!r} not in:\n{err}"
    assert not out.exists(), f"{out} was written"
    leftovers = [p.name for p in out.parent.iterdir() if "onnxpoolfix" in p.name] if out.parent.is_dir() else []
    assert not leftovers, f"temporary files left behind: {leftovers}"
    assert result.stdout == "", result.stdout
    return err


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _size_from_input(tmp: Path) -> onnx.ModelProto:
    """The output size is a graph input: not a constant."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    g = m.graph
    del g.node[0]  # the Constant
    g.input.append(helper.make_tensor_value_info("size", TensorProto.INT64, [2]))
    return m


def _size_from_runtime_op(tmp: Path) -> onnx.ModelProto:
    """The output size is computed by a Relu of an input: not a constant."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    g = m.graph
    g.node[0].CopyFrom(helper.make_node("Relu", ["s_in"], ["size"], name="relu"))
    g.input.append(helper.make_tensor_value_info("s_in", TensorProto.INT64, [2]))
    return m


def _no_size(tmp: Path) -> onnx.ModelProto:
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    del m.graph.node[0]
    del m.graph.node[0].input[1:]
    return m


def _unknown_shape(tmp: Path) -> onnx.ModelProto:
    """The pooled tensor comes out of an op onnx cannot infer (another custom domain): not even its rank
    is known."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    pool = m.graph.node[1]
    pool.input[0] = "x_custom"
    m.graph.node.insert(1, helper.make_node("Mystery", ["x"], ["x_custom"], name="mystery", domain="com.example"))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def _symbolic_old_opset(tmp: Path) -> onnx.ModelProto:
    """Symbolic H/W at opset 9: only the dynamic lowering handles symbolic sizes, and it needs opset 11."""
    return make_leftover("avg", [1, 3, "H", "W"], [5, 7], opset=9)


def _checker_dangling(tmp: Path) -> onnx.ModelProto:
    """A node reads a tensor nothing produces: the ONNX checker refuses the model."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node.append(helper.make_node("Relu", ["ghost"], ["z"], name="dangling"))
    return m


def _checker_duplicate_output(tmp: Path) -> onnx.ModelProto:
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node.append(helper.make_node("Relu", ["x"], ["y"], name="dup"))
    return m


def _max_indices_opset10(tmp: Path) -> onnx.ModelProto:
    """The indices output is a graph output: only the argmax lowering computes it, and it needs opset 11."""
    return make_leftover("max", [1, 3, 10, 9], [4, 5], opset=10, indices="output")


def _opset6(tmp: Path) -> onnx.ModelProto:
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7], opset=6, size_as="initializer")  # Constant-1 has no int64
    m.graph.input.append(helper.make_tensor_value_info("size", TensorProto.INT64, [2]))  # IR 3: inits are inputs
    m.ir_version = 3
    return m


# name -> (how to build IN, extra args, exit code, words the error or hint must contain)
MODEL_CASES = {
    "size-missing": (_no_size, [], 4, ["no output size"]),
    "size-graph-input": (_size_from_input, [], 4, ["not a constant", "graph input"]),
    "size-runtime-op": (_size_from_runtime_op, [], 4, ["not a constant", "Relu"]),
    "rank-too-low": (lambda t: make_leftover("avg", [8, 9], [5, 7]), [], 4, ["rank 2", "needs rank 3"]),
    "size-zero": (lambda t: make_leftover("avg", [1, 3, 8, 9], [0, 7]), [], 4, ["zero or negative", ">= 1"]),
    "size-negative": (lambda t: make_leftover("avg", [1, 3, 8, 9], [5, -1]), [], 4, ["zero or negative"]),
    "size-rank-mismatch": (lambda t: _rank_mismatch(), [], 4, ["3 entries", "needs 2"]),
    "shape-unknown": (_unknown_shape, [], 4, ["cannot be inferred", "another domain"]),  # (inputs static)
    "symbolic-opset9": (_symbolic_old_opset, [], 4, ["opset 11", "--input-shape"]),
    "dtype-int32": (lambda t: make_leftover("avg", [1, 3, 8, 9], [5, 7], dtype=TensorProto.INT32), [], 4,
                    ["INT32", "float32"]),
    "opset-6": (_opset6, [], 4, ["opset 7", "version_converter"]),
    # newer than onnx knows: the checker let it through and onnxruntime's load error was cut (exit 5; review)
    "opset-unknown": (lambda t: make_leftover("avg", [1, 3, 8, 9], [5, 7], opset=onnx.defs.onnx_opset_version() + 2),
                      [], 3, ["newer than the installed onnx knows"]),
    "max-indices-opset10": (_max_indices_opset10, [], 4, ["opset 11", "version_converter"]),
    "checker-dangling-input": (_checker_dangling, [], 3, ["fails the ONNX checker", "ghost"]),
    "checker-duplicate-output": (_checker_duplicate_output, [], 3, ["fails the ONNX checker"]),
    "input-shape-unknown-name": (lambda t: make_leftover("avg", [1, 3, "H", "W"], [5, 7]),
                                 ["--input-shape", "nope:1,3,8,9"], 2, ["not a graph input", "inputs: x"]),
    "input-shape-wrong-rank": (lambda t: make_leftover("avg", [1, 3, "H", "W"], [5, 7]),
                               ["--input-shape", "x:1,8,9"], 2, ["rank 3", "rank 4"]),
    # --check-shape is validated like --input-shape, before any work
    "check-shape-unknown-name": (lambda t: make_leftover("avg", [1, 3, "H", "W"], [5, 7]),
                                 ["--check-shape", "q:1,3,8,9"], 2, ["--check-shape names 'q'", "inputs: x"]),
    "check-shape-wrong-rank": (lambda t: make_leftover("avg", [1, 3, "H", "W"], [5, 7]),
                               ["--check-shape", "x:1,3,8"], 2, ["--check-shape x:1,3,8 has rank 3", "all 4 dims"]),
    "check-shape-fixed-dim": (lambda t: make_leftover("avg", [1, 3, "H", "W"], [5, 7]),
                              ["--check-shape", "x:2,3,8,9"], 2, ["dim 0 is fixed to 1", "only symbolic dims"]),
    # a check run that leaves a second symbolic input without a size
    "check-shape-misses-an-input": (lambda t: _two_symbolic_inputs(), ["--check-shape", "x:1,3,8,9"], 4,
                                    ["input 'z' has symbolic dims", "--check-shape"]),
}


def _two_symbolic_inputs() -> onnx.ModelProto:
    """The pool's input x plus a second input z (symbolic too) added to the pooled result."""
    m = make_leftover("avg", [1, 3, "H", "W"], [5, 7])
    m.graph.input.append(onnx.helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, "A", "B"]))
    y = m.graph.output[0].name
    m.graph.node[-1].output[0] = "pooled"
    m.graph.node.append(onnx.helper.make_node("Add", ["pooled", "z"], [y]))
    return m


def _rank_mismatch() -> onnx.ModelProto:
    """A 2d pool whose size constant has three entries."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node[0].attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([5, 7, 3], np.int64), "size_value"))
    return m


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_bad_model(tmp_path: Path, case: str) -> None:
    build, extra, code, needles = MODEL_CASES[case]
    src = save(build(tmp_path), tmp_path / "in.onnx")
    out = tmp_path / "out.onnx"
    assert_clean_failure(run_cli([src, out, *extra]), code, out, *needles)


def _file_cases(tmp: Path) -> dict:
    good = CONVNET.read_bytes()
    cases = {
        "missing": (tmp / "nope.onnx", 3, ["no such file", "path"]),
        "directory": (tmp, 3, ["directory"]),
    }
    for name, data, code, needles in [
        ("empty", b"", 3, ["empty"]),
        ("random-bytes", np.random.default_rng(1).bytes(4096), 3, ["not a valid ONNX file"]),
        ("truncated", good[: len(good) * 2 // 3], 3, ["truncated"]),
        ("tensor-proto", numpy_helper.from_array(np.ones((3, 4), np.float32), "t").SerializeToString(), 3,
         ["not an ONNX model"]),
        ("graph-proto", onnx.load(CONVNET).graph.SerializeToString(), 3, ["not an ONNX model"]),
        ("text", b"name: 'not a model'\n", 3, ["not"]),
    ]:
        p = tmp / f"{name}.onnx"
        p.write_bytes(data)
        cases[name] = (p, code, needles)
    return cases


FILE_CASES = ["missing", "directory", "empty", "random-bytes", "truncated", "tensor-proto", "graph-proto", "text"]


@pytest.mark.parametrize("case", FILE_CASES)
def test_bad_file(tmp_path: Path, case: str) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    src, code, needles = _file_cases(tmp_path / "in")[case]
    out = tmp_path / "out" / "out.onnx"
    assert_clean_failure(run_cli([src, out]), code, out, *needles)


def test_unreadable_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "in.onnx"
    src.write_bytes(CONVNET.read_bytes())
    src.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make the OS say what it says to everyone else
        real_open = builtins.open

        def denied(file, *a, **k):
            if Path(file) == src:
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *a, **k)

        monkeypatch.setattr(builtins, "open", denied)
    out = tmp_path / "out.onnx"
    assert_clean_failure(run_cli([src, out]), 3, out, "permission denied", "permissions")


def test_unwritable_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: make the OS say what it says to everyone else
        real = os.mkdir

        def denied(path, *args, **kwargs):  # the tool's temporary folder beside OUT
            if Path(path).parent == folder:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", denied)
    out = folder / "out.onnx"
    try:
        assert_clean_failure(run_cli([CONVNET, out, "--no-check"]), 6, out, "cannot write", "permissions")
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("case", ["same-file", "same-file-other-spelling", "out-is-directory", "no-such-folder",
                                  "report-unwritable"])
def test_bad_output(tmp_path: Path, case: str) -> None:
    src = tmp_path / "in.onnx"
    src.write_bytes(CONVNET.read_bytes())
    before = src.read_bytes()
    args = [src]
    if case == "same-file":
        out, needles = src, ["is the input model", "--in-place"]
    elif case == "same-file-other-spelling":
        (tmp_path / "sub").mkdir()
        out, needles = tmp_path / "sub" / ".." / "in.onnx", ["is the input model", "--in-place"]
    elif case == "out-is-directory":
        (tmp_path / "d.onnx").mkdir()
        out, needles = tmp_path / "d.onnx", ["is a directory"]
    elif case == "no-such-folder":
        out, needles = tmp_path / "nope" / "out.onnx", ["does not exist", "create the folder"]
    else:
        out = tmp_path / "out.onnx"
        args += ["--report", tmp_path / "nope" / "r.json"]
        needles = ["cannot write the report"]
    result = run_cli(args[:1] + [out] + args[1:] + ["--no-check"])
    if case.startswith("same-file") or case == "out-is-directory":
        assert result.exit_code == 6, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("onnxpoolfix: error: ") and "hint:" in lines[1]
        assert all(n.lower() in result.stderr.lower() for n in needles), result.stderr
        assert src.read_bytes() == before
        assert not [p for p in tmp_path.rglob("*onnxpoolfix*")]
    else:
        assert_clean_failure(result, 6, out, *needles)
    assert "Traceback" not in result.stderr


def test_in_place_is_allowed_with_the_flag(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    src.write_bytes(CONVNET.read_bytes())
    result = run_cli([src, src, "--in-place", "-q"])
    assert result.exit_code == 0, result.stderr
    assert not [n for n in onnx.load(src).graph.node if n.domain == ATEN]


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    src = save(make_leftover("avg", [1, 3, 8, 9], [0, 7]), tmp_path / "in.onnx")
    result = run_cli([src, tmp_path / "out.onnx", "-v"])
    assert result.exit_code == 4
    assert "Traceback" in result.stderr and "onnxpoolfix: error:" in result.stderr


def test_exit_codes_are_in_the_help() -> None:
    for args in (["--help"], ["patch", "--help"]):
        text = run_cli(args).output
        for code, words in [(0, "success"), (1, "internal"), (2, "usage"), (3, "invalid"), (4, "cannot"),
                            (5, "check"), (6, "output"), (8, "too large")]:
            line = next((ln for ln in text.splitlines() if ln.strip().startswith(f"{code} ")), "")
            assert words in line.lower(), f"exit code {code} not documented in {' '.join(args)}:\n{text}"


def test_usage_error_is_exit_2(tmp_path: Path) -> None:
    result = run_cli([CONVNET, tmp_path / "o.onnx", "--input-shape", "x:1,3,a,b"])
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o.onnx").exists()


# ------------------------------------------------------------------------------------------ real processes


@pytest.mark.parametrize("case", ["truncated", "missing", pytest.param("size-zero", marks=pytest.mark.slow),
                                  pytest.param("checker-dangling-input", marks=pytest.mark.slow)])
def test_subprocess(tmp_path: Path, case: str) -> None:
    """The installed entry point, as a pipeline runs it: same contract, nothing on stdout."""
    out = tmp_path / "out.onnx"
    if case in MODEL_CASES:
        build, extra, code, needles = MODEL_CASES[case]
        src = save(build(tmp_path), tmp_path / "in.onnx")
    else:
        src, code, needles = _file_cases(tmp_path)[case]
    p = subprocess.run([sys.executable, "-m", "onnxpoolfix", str(src), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == code, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("onnxpoolfix: error: ") and lines[1].startswith("  hint: "), p.stderr
    assert not out.exists()


# --------------------------------------------------------------- found by an adversarial sweep of the CLI


@pytest.mark.parametrize("case", ["report-is-in", "report-is-out", "report-empty", "report-is-a-folder"])
def test_report_must_be_a_file_of_its_own(tmp_path: Path, case: str) -> None:
    """--report IN overwrote the input model with JSON; --report OUT lost the report under the model;
    --report "" failed with an internal error after all the work; --report DIR was click's usage error
    (exit 2) where OUT as a folder is exit 6: both are output errors now."""
    src = tmp_path / "in.onnx"
    src.write_bytes(CONVNET.read_bytes())
    out = tmp_path / "out.onnx"
    (tmp_path / "adir").mkdir()
    report = {"report-is-in": src, "report-is-out": out, "report-empty": "", "report-is-a-folder": tmp_path / "adir"}[case]
    needle = {"report-is-in": "input model", "report-is-out": "is OUT", "report-empty": "not a file name",
              "report-is-a-folder": "not a file name"}[case]
    assert_clean_failure(run_cli([src, out, "--report", report]), 6, out, needle)
    assert src.read_bytes() == CONVNET.read_bytes()


@pytest.mark.parametrize("which", ["OUT", "--report"])
def test_a_name_ending_in_a_separator_is_a_folder(tmp_path: Path, which: str) -> None:
    """``OUT/`` (or ``--report DIR/``) for a folder that does not exist wrote a file named like the folder: the
    separator was dropped when the argument became a path. Both are output errors now, and nothing is written."""
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    named = f"{tmp_path / 'newdir'}{os.sep}"
    args = [CONVNET, named] if which == "OUT" else [CONVNET, out, "--report", named]
    assert_clean_failure(run_cli(args), 6, out, "names a folder")
    assert not (tmp_path / "newdir").exists() and not report.exists()
    with pytest.raises(onnxpoolfix.OutputError, match="names a folder"):  # the API's paths alike
        save_model(onnx.load(CONVNET), named)
    assert not (tmp_path / "newdir").exists()


def test_in_place_never_overwrites_the_inputs_data_file_for_another_out(tmp_path: Path) -> None:
    """With --in-place but OUT 'm' (not IN 'm.onnx'), writing m.data replaced IN's external data file."""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.load(CONVNET), src, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    before = (tmp_path / "m.data").read_bytes()
    out = tmp_path / "m"
    assert_clean_failure(run_cli([src, out, "--save-as-external-data", "--in-place"]), 6, out, "external data")
    assert (tmp_path / "m.data").read_bytes() == before


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--input-shape", "x:1,3,99999999999999999999,27"],
                                  ["--check-shape", "x:1,3,99999999999999999999,27"]])
def test_out_of_range_option_values_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    """These ended as exit 1 'internal error' (ValueError from protobuf/numpy)."""
    out = tmp_path / "o.onnx"
    result = run_cli([CONVNET, out, *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not out.exists()


def test_truncated_weights_are_invalid_input(tmp_path: Path) -> None:
    """An initializer whose raw_data is shorter than its dims: exit 3 (it was exit 5, and with --no-check a
    malformed OUT was written)."""
    m = onnx.load(CONVNET)
    t = next(t for t in m.graph.initializer if t.name == "fc.weight")
    t.raw_data = t.raw_data[:-8]
    src = save(m, tmp_path / "in.onnx")
    for extra in ([], ["--no-check"]):
        out = tmp_path / "out.onnx"
        assert_clean_failure(run_cli([src, out, *extra]), 3, out, "fc.weight", "bytes")


def test_a_symlinked_out_is_written_through(tmp_path: Path) -> None:
    """`IN IN --in-place` on a symbolic link replaced the link with a file and left its target unpatched."""
    real = tmp_path / "real.onnx"
    real.write_bytes((FIXTURES / "avg2d_8x9_to_5x7.onnx").read_bytes())
    link = tmp_path / "link.onnx"
    link.symlink_to(real.name)
    result = run_cli([link, link, "--in-place", "-q"])
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert not any(n.domain == ATEN for n in onnx.load(real).graph.node)


def test_sigterm_leaves_no_temporary_files(tmp_path: Path) -> None:
    """SIGTERM during a run: exit 143, one line + hint, no OUT and nothing temporary beside it (the default
    SIGTERM action skipped every cleanup and left the partial output folder)."""
    import signal
    import time

    src = tmp_path / "big.onnx"
    m = onnx.load(CONVNET)
    m.graph.initializer.append(numpy_helper.from_array(np.ones(60_000_000, np.float32), "unused_big"))
    onnx.save(m, src, save_as_external_data=True, location="big.data")
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "onnxpoolfix", str(src), str(out), "--no-check",
                             "--save-as-external-data"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(out.parent.iterdir()):  # until the temporary output exists
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal landed")
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.startswith("onnxpoolfix: interrupted (SIGTERM)") and "hint:" in err, err
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("which", ["input-data", "out-data"])
def test_report_never_lands_on_external_data(tmp_path: Path, which: str) -> None:
    """--report on IN's external data file overwrote it with JSON; on OUT.data the model's data replaced the
    report."""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.load(CONVNET), src, save_as_external_data=True, location="m.data", size_threshold=0)
    before = (tmp_path / "m.data").read_bytes()
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "p.onnx"
    report = tmp_path / "m.data" if which == "input-data" else tmp_path / "out" / "p.onnx.data"
    extra = ["--save-as-external-data"] if which == "out-data" else []
    assert_clean_failure(run_cli([src, out, "--report", report, *extra]), 6, out, "--report")
    assert (tmp_path / "m.data").read_bytes() == before


def test_a_check_size_that_empties_the_pooled_tensor_is_refused(tmp_path: Path) -> None:
    """At x:1,3,1,1 a MaxPool k3 s2 before the leftover leaves it an empty map: the check compared nothing and
    said 'passed (max error inf)' for averages, or crashed for max. Now a check failure that says why."""
    for kind in ("avg", "max"):
        m = make_leftover(kind, [1, 3, "H", "W"], (4, 4))
        pool = next(n for n in m.graph.node if n.input and n.input[0] == "x")
        pool.input[0] = "shrunk"
        nodes = [helper.make_node("MaxPool", ["x"], ["shrunk"], kernel_shape=[3, 3], strides=[2, 2])] + list(m.graph.node)
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        src = save(m, tmp_path / f"{kind}.onnx")
        out = tmp_path / f"{kind}_out.onnx"
        result = run_cli([src, out, "--check-shape", "x:1,3,1,1"])
        assert result.exit_code == 5 and "its input is empty" in result.stderr, result.stderr
        assert "hint: choose larger sizes" in result.stderr and not out.exists()


def test_too_large_to_check_is_its_own_exit_code(tmp_path: Path) -> None:
    """A pooled tensor over the check's limit (1 << 28 elements) stops before any check ran, with exit 8
    (CheckTooLargeError), not 5 ("the check failed"); --no-check patches the same model."""
    from onnxpoolfix.check import CHECK_MAX_ELEMENTS

    shape = [1, CHECK_MAX_ELEMENTS // (4096 * 1024), 4100, 1024]  # just over the limit; nothing is allocated
    src = tmp_path / "big.onnx"
    onnx.save(make_leftover("avg", shape, (1, 7)), src)
    out = tmp_path / "out.onnx"
    result = run_cli([src, out])
    assert_clean_failure(result, 8, out, "too many to run the onnxruntime check", "--no-check")
    with pytest.raises(onnxpoolfix.CheckTooLargeError):
        onnxpoolfix.patch(onnx.load(src))
    assert run_cli([src, out, "--no-check", "-q"]).exit_code == 0 and out.exists()


@pytest.mark.parametrize("where", ["node name", "body node name"])
def test_invalid_utf8_text_is_refused_naming_the_field(tmp_path, where):
    """A string field with invalid UTF-8 bytes (a corrupt file): one InvalidModelError naming the field, not an
    internal error deep in the patch; also inside an If body (the walk goes into attributes' graphs)."""
    from onnxpoolfix.errors import InvalidModelError
    from onnxpoolfix.io import load_model

    inner = helper.make_graph([helper.make_node("Identity", ["x"], ["t"], name="QQQQ" if where == "body node name"
                                                else "inner")], "b", [], [helper.make_tensor_value_info("t", 1, None)])
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="QQQQ" if where == "node name" else "outer"),
             helper.make_node("If", ["c"], ["z"], then_branch=inner, else_branch=inner)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert data.count(b"QQQQ") == (2 if where == "body node name" else 1)
    path = tmp_path / "bad.onnx"
    path.write_bytes(data.replace(b"QQQQ", b"\xff\xfe\xfd\xfc"))
    with pytest.raises(InvalidModelError, match="name is not valid UTF-8"):
        load_model(path)

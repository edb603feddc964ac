"""The command line: ``onnxpoolfix IN OUT`` (the ``patch`` command) and its options, through click's CliRunner,
and as real subprocesses where the entry points themselves matter."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import make_leftover, ort_run
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.cli import main, parse_shapes
from onnxpoolfix.errors import EXIT_CODES
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.lowering import BY_NAME
from onnxpoolfix.tensorrt import lint_tensorrt

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
AVG = FIXTURES / "avg2d_8x9_to_5x7.onnx"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def expected(name: str) -> tuple[dict, dict]:
    data = np.load(FIXTURES / f"{name}.npz")
    feeds = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("input:") and "@" not in k}
    outs = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith("output:") and "@" not in k}
    return feeds, outs


def assert_runs_like_torch(path: Path, name: str) -> None:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert not find_pool_nodes(model.graph)
    feeds, outs = expected(name)
    got = ort_run(model, feeds, list(outs))
    for (k, want), g in zip(outs.items(), got):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6, err_msg=k)


def assert_one_line_error(result, code: int, out: Path | None = None, needle: str = "") -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.rstrip("\n").splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("onnxpoolfix: error: ") and needle.lower() in lines[0].lower(), result.stderr
    assert lines[1].startswith("  hint: "), result.stderr
    assert "Traceback" not in result.output
    if out is not None:
        assert not out.exists()


# ------------------------------------------------------------------------------------------ patch


@pytest.mark.parametrize("name", ["avg2d_8x9_to_5x7", "max2d_indices_output", "avg1d", "pyramid_pooling"])
def test_patch_a_fixture(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out.onnx"
    r = cli(FIXTURES / f"{name}.onnx", out)
    assert r.exit_code == 0, r.output
    header, rule, *rows = r.stdout.splitlines()
    assert header.split()[:4] == ["node", "op", "in", "->"] and set(rule) <= {"-", " "}
    names = [n.name for n in find_pool_nodes(onnx.load(FIXTURES / f"{name}.onnx").graph)]
    for node_name in names:
        row = next(line for line in rows if line.startswith(node_name + " "))
        assert any(lw in row.split() for lw in [*BY_NAME, "pyramid"]), row
    assert f"wrote {out}" in r.stdout and "check passed" in r.stdout
    assert_runs_like_torch(out, name)


def test_patch_command_name_is_optional(tmp_path: Path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    assert cli("patch", AVG, a).exit_code == 0
    assert cli(AVG, b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_nothing_to_patch(tmp_path: Path) -> None:
    once, twice = tmp_path / "once.onnx", tmp_path / "twice.onnx"
    assert cli(AVG, once).exit_code == 0
    r = cli(once, twice)
    assert r.exit_code == 0, r.output
    assert "nothing to patch" in r.stdout
    assert_runs_like_torch(twice, "avg2d_8x9_to_5x7")


def test_no_check(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    r = cli(AVG, out, "--no-check")
    assert r.exit_code == 0 and "not checked" in r.stdout and out.exists()
    assert_runs_like_torch(out, "avg2d_8x9_to_5x7")


def test_report_json(tmp_path: Path) -> None:
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    r = cli(FIXTURES / "max2d_indices_output.onnx", out, "--report", rep)
    assert r.exit_code == 0, r.output
    data = json.loads(rep.read_text())
    assert data["schema_version"] == 2 and data["tool"] == "onnxpoolfix" and data["status"] == "patched"
    assert data["checked"] is True and data["check_passed"] is True and data["target"] == "onnxruntime"
    (node,) = data["nodes"]
    assert node["name"] == "/adaptive_max_pool2d" and node["kind"] == "max" and node["lowering"] == "argmax"
    assert node["indices"] == "computed" and node["input_shape"] == [1, 2, 8, 9]
    assert node["output_shape"] == [1, 2, 5, 7] and node["ops"] and node["max_error"] == 0
    assert data["totals"] == {"nodes": 1, "max_error": 0.0, "by_lowering": {"argmax": 1}}


def test_quiet(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    r = cli(AVG, out, "-q")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == "" and out.exists()


def test_strategy_forcing(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    r = cli(AVG, out, "--strategy", "kronecker")
    assert r.exit_code == 0, r.output
    assert "kronecker" in r.stdout.splitlines()[2].split() and "forced" in r.stdout
    assert_runs_like_torch(out, "avg2d_8x9_to_5x7")
    out2 = tmp_path / "out2.onnx"
    r = cli(AVG, out2, "--strategy", "pool")
    assert_one_line_error(r, 4, out2, "strategy 'pool' does not apply")
    r = CliRunner().invoke(main, [str(AVG), str(out2), "--strategy", "nope"])
    assert r.exit_code == 2 and not out2.exists()


def test_target_tensorrt(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    r = cli(FIXTURES / "max2d_indices_consumed.onnx", out, "--target", "tensorrt")
    assert r.exit_code == 0, r.output
    assert not [f for f in lint_tensorrt(onnx.load(out)) if f.severity == "error"]
    assert_runs_like_torch(out, "max2d_indices_consumed")


# ------------------------------------------------------------------------------------------ bad inputs


def test_missing_file(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    assert_one_line_error(cli(tmp_path / "nope.onnx", out), 3, out, "no such file")


def test_garbage_bytes(tmp_path: Path) -> None:
    src, out = tmp_path / "garbage.onnx", tmp_path / "out.onnx"
    src.write_bytes(bytes(range(256)) * 4)
    assert_one_line_error(cli(src, out), 3, out, "garbage.onnx")


def test_non_constant_output_size(tmp_path: Path) -> None:
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node[0].CopyFrom(helper.make_node("Identity", ["size_in"], ["size"], name="size_from_input"))
    m.graph.input.append(helper.make_tensor_value_info("size_in", TensorProto.INT64, [2]))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(m.SerializeToString())
    assert_one_line_error(cli(src, out), 4, out, "not a constant")


def test_unsupported_dtype(tmp_path: Path) -> None:
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(make_leftover("avg", [1, 3, 8, 9], [5, 7], dtype=TensorProto.INT32).SerializeToString())
    assert_one_line_error(cli(src, out), 4, out, "INT32")


# ------------------------------------------------------------------------------------------ --input-shape


def test_parse_shapes_forms() -> None:
    assert parse_shapes(("x:1,3,224,224",), "--input-shape") == {"x": [1, 3, 224, 224]}
    assert parse_shapes(("x:1,2", "y:3"), "--input-shape") == {"x": [1, 2], "y": [3]}
    assert parse_shapes(("x:1,2 y:3",), "--input-shape") == {"x": [1, 2], "y": [3]}
    assert parse_shapes(("a:b:1,2",), "--input-shape") == {"a:b": [1, 2]}  # names may hold ':'
    assert parse_shapes(("my input:1,2 b:3",), "--input-shape") == {"my input": [1, 2], "b": [3]}  # and spaces
    for bad in ("x", "x:", ":1,2", "x:1,a", "x:1,,2", "x:0,3", "x:-1,3", "x:1,2 junk", "x:1, 2"):
        with pytest.raises(click.BadParameter):
            parse_shapes((bad,), "--input-shape")


@pytest.mark.parametrize("value", ["x", "x:", "x:1,a,8,9", "x:1,2,0,9", "1,2,8,9"])
def test_malformed_input_shape_is_a_usage_error(tmp_path: Path, value: str) -> None:
    out = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [str(AVG), str(out), "--input-shape", value])
    assert r.exit_code == 2, r.output
    assert "--input-shape" in r.stderr and not out.exists()


def test_an_input_named_with_a_space_takes_its_shape(tmp_path: Path) -> None:
    """ONNX names are any string; 'my input:1,2,8,9' was split at the space and refused ('my' is not
    NAME:D0,...), so such a model could not be bound or checked at all."""
    model = onnx.load(FIXTURES / "dynamic_avg2d.onnx")
    old = model.graph.input[0].name
    for node in model.graph.node:
        node.input[:] = ["my input" if i == old else i for i in node.input]
    model.graph.input[0].name = "my input"
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = cli(src, out, "--input-shape", "my input:1,2,8,9")
    assert r.exit_code == 0, r.output
    assert [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim] == [1, 2, 8, 9]
    torch = pytest.importorskip("torch")  # the one size OUT accepts, against torch (its pool is (5, 7))
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 9)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"my input": x})[0]
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), (5, 7)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", [["--input-shape", "x:1,2,8,9"], ["--input-shape=x:1,2,8,9"]])
def test_input_shape_binds_a_dynamic_model(tmp_path: Path, form: list[str]) -> None:
    out = tmp_path / "out.onnx"
    r = cli(FIXTURES / "dynamic_avg2d.onnx", out, *form, "--strategy", "matmul")
    assert r.exit_code == 0, r.output
    dims = [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 2, 8, 9]  # a static lowering holds at the bound size only, so the shape is kept
    assert_runs_like_torch(out, "dynamic_avg2d")


@pytest.mark.parametrize("flag, value, needle", [
    ("--input-shape", "nope:1,2,8,9", "not a graph input"),
    ("--input-shape", "x:1,2,8", "has rank 3"),
    ("--check-shape", "nope:1,2,8,9", "not a graph input"),
    ("--check-shape", "x:1,2,8,9,1", "has rank 5"),
])
def test_shape_options_that_do_not_fit_the_model_are_usage_errors(tmp_path: Path, flag, value, needle) -> None:
    out = tmp_path / "out.onnx"
    assert_one_line_error(cli(FIXTURES / "dynamic_avg2d.onnx", out, flag, value), 2, out, needle)


# ------------------------------------------------------------------------------------------ entry points


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, timeout=300)


def test_python_dash_m(tmp_path: Path) -> None:
    r = _run("-m", "onnxpoolfix", "--version")
    assert r.returncode == 0 and "onnxpoolfix" in r.stdout and "0." in r.stdout, r.stderr
    out = tmp_path / "out.onnx"
    r = _run("-m", "onnxpoolfix", str(AVG), str(out))
    assert r.returncode == 0, r.stderr
    assert_runs_like_torch(out, "avg2d_8x9_to_5x7")
    r = _run("-m", "onnxpoolfix", "inspect", str(AVG), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["would_patch"], r.stderr


def test_subprocess_error_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    r = _run("-m", "onnxpoolfix", str(tmp_path / "missing.onnx"), str(out))
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr.startswith("onnxpoolfix: error: ") and "\n  hint: " in r.stderr and not out.exists()


def test_help_lists_commands_and_exit_codes() -> None:
    r = cli("--help")
    assert r.exit_code == 0 and "patch" in r.stdout and "inspect" in r.stdout
    r = cli("patch", "--help")
    for opt in ("--target", "--strategy", "--input-shape", "--no-check", "--report", "-q"):
        assert opt in r.stdout
    r = cli("inspect", "--help")
    for opt in ("--target", "--input-shape", "--json", "Exit codes"):
        assert opt in r.stdout
    for command in ("patch", "inspect"):  # the table of onnxpoolfix.errors, as it is
        r = cli(command, "--help")
        shown = [" ".join(line.split()) for line in r.stdout.splitlines()]
        for row in EXIT_CODES:
            meaning = getattr(row, command)
            assert (f"{row.label} {meaning}" in shown) == (meaning is not None), (command, row)


def test_a_run_prints_a_result_line_then_one_line_per_note(tmp_path: Path) -> None:
    """The dynamo pyramid as a partial fix (--allow-partial; refused without): a short result line, the
    warnings first (marked, on stderr), then a note a line; the report's check_note is the same notes, joined."""
    out, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    r = cli(FIXTURES / "dynamo" / "psp_area_symbolic.onnx", out, "--report", rep, "--allow-partial")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("PARTIAL fix"))
    assert re.fullmatch(r"PARTIAL fix, OUT is not right at every size: replaced 2 nodes; onnxruntime check passed "
                        rf"\(max error [0-9.e+-]+\); wrote {re.escape(str(out))}", lines[at]), lines[at]
    notes = lines[at + 1:]
    assert len(notes) == 8 and all(n.startswith("note: ") for n in notes), notes
    assert "dynamo region 'mean_1'" in notes[0] and "also run alone" in notes[-2]
    assert any("If node(s) onnxpoolfix wrote" in n and "--target portable writes none" in n for n in notes)
    assert "every window of the dynamic lowering proven up to n = 512" in notes[-1]
    warnings = r.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") for w in warnings)
    assert any(w.startswith("warning: 1 adaptive pooling region under symbolic sizes stays frozen") for w in warnings)
    assert any("'avg_pool2d' left frozen: OUT is right only" in w for w in warnings)
    check_note = json.loads(rep.read_text())["check_note"]
    assert all(line.split(": ", 1)[1] in check_note for line in notes + warnings)


def test_quiet_still_prints_the_warnings_on_stderr(tmp_path: Path) -> None:
    """-q silences the table, the result line and the notes, not a warning: a partial fix says on stderr
    that OUT is right only at some sizes, even for a script that asked for quiet."""
    out = tmp_path / "out.onnx"
    r = cli(FIXTURES / "dynamo" / "psp_area_symbolic.onnx", out, "--allow-partial", "-q")
    assert r.exit_code == 0 and out.exists() and r.stdout == ""
    warnings = r.stderr.splitlines()
    assert warnings and all(w.startswith("warning: ") for w in warnings)
    assert any("stays frozen" in w for w in warnings)


def test_options_before_the_command_go_to_the_command(tmp_path: Path, monkeypatch) -> None:
    """`onnxpoolfix -q patch IN OUT` patches; `onnxpoolfix -v inspect IN` inspects, and `-q inspect IN` is
    inspect refusing -q (exit 2), not a patch of a file named 'inspect' into IN (it said 'inspect: no such
    file'); a file named like a command is still a path."""
    out = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, ["-q", "patch", str(AVG), str(out)])
    assert r.exit_code == 0, r.output
    assert r.output == "" and out.exists()
    r = CliRunner().invoke(main, ["-v", "inspect", str(AVG)])
    assert r.exit_code == 0 and "a patch would succeed" in r.output, r.output
    r = CliRunner().invoke(main, ["-q", "inspect", str(AVG)])
    assert r.exit_code == 2 and "No such option" in r.output, r.output
    before = AVG.read_bytes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inspect").write_bytes(before)
    r = CliRunner().invoke(main, ["-q", "inspect", "patched.onnx"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "patched.onnx").exists() and AVG.read_bytes() == before


def test_version_loads_no_command():
    """``onnxpoolfix --version`` answers without loading the commands (onnx, numpy, the lowerings: about a
    second): each command's module loads when the command is looked up."""
    code = ("import sys\nsys.argv = ['onnxpoolfix', '--version']\nfrom onnxpoolfix.entry import main\ntry:\n"
            "    main()\nexcept SystemExit:\n    pass\nprint(sorted(m for m in ('onnx', 'numpy', 'onnxruntime', "
            "'onnxpoolfix.cli.patch_cmd') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"onnxpoolfix, version {onnxpoolfix.__version__}", "[]"]


@pytest.mark.parametrize("command", [[], ["inspect"]])
def test_the_onnx_checker_runs_once_per_run(monkeypatch, tmp_path, command):
    """The CLI checks IN itself (naming the file) and tells patch / inspect so: one checker run, not two."""
    import onnx.checker

    calls = []
    real = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = [str(FIXTURES / "small_convnet.onnx")] + ([str(tmp_path / "o.onnx")] if not command else [])
    r = CliRunner().invoke(main, command + args)
    assert r.exit_code == 0, r.output
    assert len(calls) == 1

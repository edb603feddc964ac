"""Ctrl-C is exit 130 with nothing written, wherever it lands: a real SIGINT sent by the process to itself at
a chosen point of a real run of the console script's entry (while click parses the flags, inside the dynamo
proof search, inside an onnxruntime run of the check), never click's "Aborted!" (exit 1), a traceback, or a
refusal of a file the tool fixes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DYNAMO = ROOT / "fixtures" / "dynamo" / "psp_area_symbolic.onnx"

SCRIPT = """
import os, signal, sys, importlib
module, name = sys.argv[1].rsplit(":", 1)
target = importlib.import_module(module)
original = getattr(target, name)
def interrupted_here(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered at the next instruction
    return original(*args, **kwargs)
setattr(target, name, interrupted_here)
sys.argv = ["onnxpoolfix", *sys.argv[2:]]
from onnxpoolfix.entry import main
main()
"""


@pytest.mark.parametrize("where", [
    "onnxpoolfix.cli.args:parse_shapes",  # click's flag parsing: outside the command's own handler
    "onnxpoolfix.frontends.dynamo.front_end:prove_all",  # the dynamo proof search
    "onnxruntime:InferenceSession",  # an onnxruntime session of the search or the check
])
def test_sigint_is_exit_130_with_nothing_written(where, tmp_path):
    out = tmp_path / "out.onnx"
    r = subprocess.run([sys.executable, "-c", SCRIPT, where, str(DYNAMO), str(out), "--traced-shape",
                        "x:1,3,16,16"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 130, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "onnxpoolfix: interrupted (SIGINT)" and lines[1].startswith("  hint:"), r.stderr
    assert len(lines) == 2 and "Aborted" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == "" and not out.exists() and list(tmp_path.iterdir()) == []


def test_an_interrupt_after_the_run_has_ended_does_not_kill_it(tmp_path):
    """Once the run has said how it ended, SIGINT is ignored: Python restores the default handler while it
    shuts down, and a Ctrl-C there killed a complete run by signal (status -2, OUT written, nothing said)."""
    script = ("import signal, sys\nsys.argv = ['onnxpoolfix', sys.argv[1], sys.argv[2], '-q']\n"
              "from onnxpoolfix.entry import main\ntry:\n    main()\nexcept SystemExit as e:\n"
              "    print(e.code, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n")
    r = subprocess.run([sys.executable, "-c", script, str(ROOT / "fixtures" / "avg1d.onnx"), str(tmp_path / "o.onnx")],
                       capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["0", "True"], r.stdout + r.stderr


def _with_stdout_closed(argv: list[str], cwd) -> subprocess.CompletedProcess:
    """``onnxpoolfix ARGV`` with standard output a pipe nobody reads: its first write is EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "onnxpoolfix", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [["{src}", "{out}"], ["inspect", "{src}"], ["--help"], ["windows", "97", "5"]])
def test_a_closed_stdout_is_exit_141_and_out_stays_complete(args, tmp_path):
    """``onnxpoolfix IN OUT | head -c 0``: the reader has gone before the summary is printed. A Unix tool dies
    of SIGPIPE (141) there; click's own handling said 1, which our table calls a bug, silently."""
    import onnx

    out = tmp_path / "out.onnx"
    r = _with_stdout_closed([a.format(src=ROOT / "fixtures" / "small_convnet.onnx", out=out) for a in args], tmp_path)
    assert r.returncode == 141 and r.stderr == "", r.stderr
    if "{out}" in args:
        onnx.checker.check_model(onnx.load(out), full_check=True)  # written in full before the summary
        assert list(tmp_path.iterdir()) == [out]


def test_a_report_into_a_closed_stdout_is_an_output_error_with_nothing_written(tmp_path):
    """--report /dev/stdout whose reader has gone: the report is written before OUT is put in place, so nothing
    is (exit 6), and the hint speaks of the reader, not of a missing folder."""
    out = tmp_path / "out.onnx"
    r = _with_stdout_closed([str(ROOT / "fixtures" / "small_convnet.onnx"), str(out), "-q", "--report", "/dev/stdout"],
                            tmp_path)
    assert r.returncode == 6 and "reader closed it" in r.stderr and "folder" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []

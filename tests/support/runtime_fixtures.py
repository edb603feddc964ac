"""The shipped float32 fixtures the runtime tests run (tests/test_runtimes.py, tests/test_runtime_*.py), with
torch's saved outputs at the traced size and every extra saved size; and how a runtime's converter or
interpreter is run apart (:func:`run_apart`)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = [c for c in json.loads((FIXTURES / "manifest.json").read_text())["cases"] if c["dtype"] == "float32"]
TARGETS = ("onnxruntime", "tensorrt", "portable")


def runs(case):
    """(input shape suffix, feed, expected) at the traced size and every extra saved size."""
    data = np.load(FIXTURES / case["data_file"])
    for sfx in [""] + [e["suffix"] for e in case.get("extra_sizes") or []]:
        pick = [k for k in data.files if ("@" in k) == bool(sfx) and k.endswith(sfx)]
        feed = {k.split(":", 1)[1][: len(k.split(":", 1)[1]) - len(sfx)]: data[k] for k in pick
                if k.startswith("input:")}
        want = {k.split(":", 1)[1][: len(k.split(":", 1)[1]) - len(sfx)]: data[k] for k in pick
                if k.startswith("output:")}
        yield sfx, feed, want


def run_apart(cmd: list[str], *, cwd=None, timeout: int = 300) -> tuple[int, str]:
    """``cmd`` in a subprocess (a runtime that crashes, as pnnx, ncnn and MNN do on some graphs, fails one case,
    not the session): its exit status and its output's last three lines, TensorFlow's C++ log lines left out."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines()
             if line.strip() and not line.startswith(("I0000", "W0000"))]
    return proc.returncode, " | ".join(lines[-3:])

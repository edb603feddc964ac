"""The shipped float32 fixtures the runtime tests run (tests/test_runtimes.py, tests/test_runtime_ncnn.py), with
torch's saved outputs at the traced size and every extra saved size."""
from __future__ import annotations

import json
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

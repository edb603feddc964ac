"""Patched fixtures in runtimes beyond onnxruntime (issue 33, item 3, the light part): OpenVINO, which
installs from PyPI in seconds. Every static fixture with every target, and the dynamic fixtures with the
targets that take symbolic sizes (portable: bound with input_shapes, its documented remedy), compared with
torch's saved outputs at every saved size. The heavy runtimes (TensorFlow through onnx2tf, TVM, MNN, ncnn,
tract) are not run by the project yet."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxpoolfix

ov = pytest.importorskip("openvino")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
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


def openvino_run(model: onnx.ModelProto, feed: dict) -> dict:
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})  # no bf16 on CPUs that have it
    result = compiled(feed)
    return {o.get_any_name(): result[o] for o in compiled.outputs}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_openvino_matches_torch(case, target):
    model = onnx.load(FIXTURES / case["file"])
    rtol, atol = case["suggested_tolerance"]
    for sfx, feed, want in runs(case):
        if case["dynamic"] and target != "onnxruntime":
            # tensorrt takes the dynamic lowering too; portable refuses symbolic sizes: bind them
            shapes = {k: list(v.shape) for k, v in feed.items()} if target == "portable" else None
            try:
                patched = onnxpoolfix.patch(model, target=target, input_shapes=shapes, check=False).model
            except onnxpoolfix.PoolFixError as e:
                pytest.skip(f"{target} refuses {case['name']}: {e}")
        else:
            if sfx and not case["dynamic"]:
                continue
            patched = onnxpoolfix.patch(model, target=target, check=False).model
        got = openvino_run(patched, feed)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=f"{name} at {sfx or 'traced'}")

"""TFLite through onnx2tf (issue 33, item 3): every float32 fixture with every target, converted by onnx2tf at
each saved size (it fixes the input shape at conversion: symbolic files are converted once per size) and run
by the TFLite interpreter, against torch's saved outputs. What onnx2tf cannot convert is asserted as a
failure, so the test fails the day it converts.

PyPI's `onnx2tf`, `tensorflow`, `tf_keras` and `ai-edge-litert` (the `runtimes` extra; `make test-runtimes`):
about 4 s of TensorFlow per conversion, so only in the slow set."""
from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from helpers import (
    NON_FINITE_MAX_CASES,
    NON_FINITE_MAX_IDS,
    OLD_OPSET_AVG,
    POOLED_AVG_FEW,
    POOLED_AVG_FEW_IDS,
    assert_bits_equal,
    assert_same_non_finite,
    non_finite_avg_input,
    non_finite_max_input,
    non_finite_pool_input,
    portable_max,
    portable_pooled_avg,
)
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs
from runtime_matrix import record
from tflite_runner import TfliteFailed, tflite_run

import onnxpoolfix

# looked up, not imported (TensorFlow's import would cost every test run's collection)
if importlib.util.find_spec("onnx2tf") is None or importlib.util.find_spec("ai_edge_litert") is None:
    pytest.skip("the runtimes extra is not installed (make test-runtimes)", allow_module_level=True)

pytestmark = pytest.mark.slow

#: (fixture, target) onnx2tf 1.28.8 fails to convert, measured (besides the If files of onnx2tf_refuses)
#: none since OUT of an IR 3 file below opset 9 is IR 4 with its new constants as initializers (the tensorrt
#: target's opset-7 MatMul, whose matrix was a Constant node, failed to convert before)
KNOWN_FAILURES: set[tuple[str, str]] = set()


def onnx2tf_refuses(model: onnx.ModelProto) -> str | None:
    """Why onnx2tf 1.28.8 fails on a file with an If, measured, or None (its other If files convert):

    - a MatMul average's NaN guard: onnx2tf hands its else-branch the outer input in its channels-last
      layout ("Dimensions must be equal, but are 8 and 9 ... [5,8], [1,8,9,2]");
    - an If branch reading the outer graph's initializers, which onnx2tf drops (KeyError: '.../window_table_0',
      measured when max pooling's branches read their window tables so); every branch we write now holds its
      constants as its own Constant nodes, which onnx2tf keeps: the max pooling guards convert."""
    from onnxpoolfix.graph import nodes_deep

    ifs = [n for n in model.graph.node if n.op_type == "If"]
    inits = {t.name for t in model.graph.initializer}
    inner = [m for n in ifs for m in nodes_deep([n]) if m is not n]
    if any(m.op_type == "MatMul" for m in inner):
        return "a guarded MatMul reads an outer tensor in onnx2tf's channels-last layout"
    if any(i in inits for m in inner for i in m.input):
        return "an If branch reads an outer initializer"
    return None


#: (fixture, target, size) onnx2tf converts wrongly, measured: the mixed lowering (an AveragePool along H, a MatMul
#: along W) of 33x31 -> 6x6 comes out 0.05 off on a 0.28 scale (channel layout); the portable and tensorrt targets
#: (no MatMul) are exact
KNOWN_WRONG = {("dynamic_classifier", "onnxruntime", "@1x3x33x31"),
               # the guarded MatMul of 4x4 -> 6x6 converts (below) and comes out wrong
               ("dynamic_classifier", "onnxruntime", "@1x3x4x4"), ("dynamic_classifier_out_axes", "onnxruntime",
                                                                   "@1x3x4x4")}
#: (fixture, target, size) whose guarded MatMul onnx2tf converts all the same, measured (a 3-D input; 4x4 -> 6x6;
#: the one Kronecker MatMul of avg3d, over its flattened D, H, W, and of avg2d_batch4)
GUARD_CONVERTS = {("avg1d", "onnxruntime", ""), ("avg3d", "onnxruntime", ""), ("avg2d_batch4", "onnxruntime", ""),
                  ("dynamic_classifier", "onnxruntime", "@1x3x4x4"), ("dynamic_classifier_out_axes", "onnxruntime",
                                                                      "@1x3x4x4")}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_tflite_matches_torch(case, target):
    """Symbolic files through the documented remedy (onnx2tf fails on them as written: a `Shape` with `end` =
    rank, then `Mul`): bound with input_shapes at each saved size."""
    rtol, atol = case["suggested_tolerance"]
    model = onnx.load(FIXTURES / case["file"])
    seen = set()
    for sfx, feed, want in runs(case):
        if sfx and not case["dynamic"]:
            continue
        shapes = {k: list(v.shape) for k, v in feed.items()} if case["dynamic"] else None
        patched = onnxpoolfix.patch(model, target=target, input_shapes=shapes, check=False).model
        refuses = onnx2tf_refuses(patched) and (case["name"], target, sfx) not in GUARD_CONVERTS
        if (case["name"], target) in KNOWN_FAILURES or refuses:
            with pytest.raises(TfliteFailed):
                tflite_run(patched, feed)
            seen.add("refused")
            continue
        got = tflite_run(patched, feed)
        for name, w in want.items():
            close = np.allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol)
            assert close != ((case["name"], target, sfx) in KNOWN_WRONG), f"{name} at {sfx or 'traced'}"
        seen.add("wrong at a size" if (case["name"], target, sfx) in KNOWN_WRONG else "exact")
    verdict = next(v for v in ("refused", "wrong at a size", "exact") if v in seen)
    record("TFLite", case, target, "exact, bound" if verdict == "exact" and case["dynamic"] else verdict)


@pytest.mark.parametrize("shape,size,opset", NON_FINITE_MAX_CASES, ids=NON_FINITE_MAX_IDS)
def test_portable_max_keeps_torchs_non_finite_values(shape, size, opset):
    """The portable target's static max pooling (lowering/max_steps.py) in TFLite: torch's NaN, +-inf, windows
    of only -inf, -FLT_MAX and -0.0 bit for bit (no denormals in the input: TFLite flushes them to zero)."""
    torch = pytest.importorskip("torch")
    model = portable_max(shape, size, opset)
    x = non_finite_max_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    assert_bits_equal(tflite_run(model, {"x": x})["y"].reshape(want.shape), want)


@pytest.mark.parametrize("name", OLD_OPSET_AVG)
def test_portable_averages_below_opset_10_keep_torchs_non_finite_values(name):
    """The portable target's Split-cut windows below opset 10 (tests/test_runtimes.py): NaN (either sign), +inf,
    -inf and both infinities in one window reach the outputs torch's do; TFLite's AVERAGE_POOL_2D alone makes -inf
    of a NaN mean (review76), which the portable target's form takes back to NaN (PooledNanStep, review87)."""
    torch = pytest.importorskip("torch")
    (case,) = [c for c in CASES if c["name"] == name]
    _, feed, want = next(runs(case))
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", check=False).model
    x = non_finite_avg_input(feed["x"])
    expected = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), want["y"].shape[2:]).numpy()
    assert_same_non_finite(tflite_run(model, {"x": x})["y"], expected)


@pytest.mark.parametrize("shape,size,opset", POOLED_AVG_FEW, ids=POOLED_AVG_FEW_IDS)
def test_portable_pooled_averages_keep_torchs_non_finite_values(shape, size, opset):
    """The portable target's averages through AveragePool (1-D, 2-D, 3-D as two 2-D pools, pools to 1 from
    opset 18): TFLite's AVERAGE_POOL_2D makes -inf of a window torch makes NaN (a NaN in it, or both
    infinities; review76, review77), and the form around it (lowering/avg_non_finite.py) makes it NaN again;
    +inf and -inf alone stay (tests/lowering/test_portable_lost_nan.py: the same against a reference)."""
    torch = pytest.importorskip("torch")
    x = non_finite_pool_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    assert_same_non_finite(tflite_run(portable_pooled_avg(shape, size, opset), {"x": x})["y"], want)


def test_tflite_average_pool_makes_nan_means_minus_inf():
    """Why: the exporter's own AveragePool (a plain ``avg_pool2d``) in TFLite gives -inf where torch gives NaN;
    asserted, so the test fails the day TFLite keeps the NaN (then PooledNanStep can go)."""
    torch = pytest.importorskip("torch")
    node = onnx.helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [node], "pool", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 6, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]),
        opset_imports=[onnx.helper.make_opsetid("", 17)])
    x = non_finite_pool_input((1, 6, 8, 8))
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x), 2).numpy()
    got = tflite_run(model, {"x": x})["y"].reshape(want.shape)
    assert np.isnan(want).any() and np.isneginf(got[np.isnan(want)]).all()

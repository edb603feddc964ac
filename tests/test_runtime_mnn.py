"""MNN (issue 33, item 3): every float32 fixture with every target, converted by MNN's converter and run in
MNN against torch's saved outputs; symbolic files as written, one conversion run at every saved size. What
MNN cannot take is asserted as a failure, so the test fails the day it converts. NaN, inf and -inf in the
portable target's files reach the outputs torch's do.

PyPI's `MNN` (the `runtimes` extra; `make test-runtimes`)."""
from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from helpers import (
    BELOW_MNN_MAXPOOL,
    NON_FINITE_MAX_CASES,
    NON_FINITE_MAX_IDS,
    OLD_OPSET_AVG,
    POOLED_AVG_FEW,
    POOLED_AVG_FEW_IDS,
    assert_bits_equal,
    assert_same_non_finite,
    make_leftover,
    non_finite_avg_input,
    non_finite_max_input,
    non_finite_pool_input,
    portable_max,
    portable_pooled_avg,
    scattered_non_finite_input,
    torch_adaptive_pool,
)
from mnn_runner import MnnFailed, mnn_run
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs
from runtime_matrix import record

import onnxpoolfix

# looked up, not imported: collecting the fast suite imports no runtime it does not run
if importlib.util.find_spec("MNN") is None:
    pytest.skip("the runtimes extra is not installed (make test-runtimes)", allow_module_level=True)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def known_failure(case: dict, target: str) -> str | None:
    """What MNN 3.6 cannot convert, measured: the test asserts it fails."""
    if case["kind"] == "max" and (target == "tensorrt" or case["opset"] < 11):
        return "IsNaN"  # the NaN guard; from opset 11 the other targets write it from Sub/Equal/Abs/Or/Not
    return None


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_mnn_matches_torch(case, target):
    rtol, atol = case["suggested_tolerance"]
    patched = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, check=False).model
    failure = known_failure(case, target)
    for sfx, feed, want in runs(case):
        if sfx and not case["dynamic"]:
            continue
        if failure:
            with pytest.raises(MnnFailed, match=failure):
                mnn_run(patched, feed)
            record("MNN", case, target, "refused")
            return
        got = mnn_run(patched, feed)
        for name, w in want.items():
            np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} at {sfx or 'traced'}")
    record("MNN", case, target, "exact")


@pytest.mark.parametrize("target", ["onnxruntime", "portable"])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,size", [((1, 2, 8, 9), (5, 7)), (("N", 2, "H", "W"), (5, 7)), ((2, 3, 11), (4,))],
                         ids=["static", "symbolic", "1d"])
def test_non_finite_values_reach_torchs_outputs(kind, shape, size, target):
    """The NaN / inf / -inf handling of the portable and default targets is written with Equal masks only
    (opset 17 here): MNN's Less and Greater against a constant were wrong (every negative value taken for -inf,
    measured), and it has no IsNaN. The default target's handling sits in the else-branch of an If."""
    patched = onnxpoolfix.patch(make_leftover(kind, shape, size), target=target, check=False).model
    x = scattered_non_finite_input(shape)
    assert_same_non_finite(mnn_run(patched, {"x": x})["y"], torch_adaptive_pool(kind, x, size))


@pytest.mark.parametrize("shape,size,opset", NON_FINITE_MAX_CASES, ids=NON_FINITE_MAX_IDS)
def test_portable_max_keeps_torchs_non_finite_values(shape, size, opset):
    """The portable target's static max pooling (lowering/max_steps.py): torch's NaN, +-inf, windows of only
    -inf, -FLT_MAX and -0.0 bit for bit in MNN too."""
    model = portable_max(shape, size, opset)
    x = non_finite_max_input(shape)
    got, want = mnn_run(model, {"x": x})["y"], torch_adaptive_pool("max", x, size)
    if "MaxPool" in {n.op_type for n in model.graph.node}:
        # MNN's MaxPool starts its max at -2^24 (review32, review36): windows whose max is below come out -2^24,
        # in any file with a MaxPool (the exporter's own too); asserted, so the test fails the day MNN fixes it
        assert (got[0, BELOW_MNN_MAXPOOL] == -2.0 ** 24).all()
        got[0, BELOW_MNN_MAXPOOL] = want[0, BELOW_MNN_MAXPOOL]
    assert_bits_equal(got, want)


@pytest.mark.parametrize("target", ["onnxruntime", "portable"])
@pytest.mark.parametrize("name", OLD_OPSET_AVG)
def test_old_opset_averages_keep_torchs_non_finite_values(name, target):
    """The average fixtures below opset 11 with NaN (either sign), +inf, -inf and both infinities in one window
    (tests/test_runtimes.py): the default target's MatMul guard at opset 9 tests NaN with Less against 0 and 1,
    which MNN runs (it has no IsNaN, and its Less takes a NaN with the sign bit as below 0 and 1: review76)."""
    (case,) = [c for c in CASES if c["name"] == name]
    _, feed, want = next(runs(case))
    x = non_finite_avg_input(feed["x"])
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, check=False).model
    expected = torch_adaptive_pool("avg", x, want["y"].shape[2:])
    assert_same_non_finite(mnn_run(model, {"x": x})["y"], expected)


@pytest.mark.parametrize("shape,size,opset", POOLED_AVG_FEW, ids=POOLED_AVG_FEW_IDS)
def test_portable_pooled_averages_keep_torchs_non_finite_values(shape, size, opset):
    """The portable target's averages through AveragePool with the form that keeps TFLite's NaN (Neg, Max, Min,
    Sub: lowering/avg_non_finite.py): NaN (either sign), +inf, -inf and both infinities in one window reach the
    outputs torch's do in MNN too."""
    x = non_finite_pool_input(shape)
    assert_same_non_finite(mnn_run(portable_pooled_avg(shape, size, opset), {"x": x})["y"], torch_adaptive_pool("avg", x, size))

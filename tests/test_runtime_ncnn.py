"""ncnn, through pnnx (issue 33, item 3): every float32 fixture with every target, converted by pnnx at each
saved size (ncnn takes one shape per conversion: bound sizes are the documented remedy for symbolic files)
and run in ncnn, against torch's saved outputs. What ncnn cannot take is asserted as a failure, so the test
fails the day it converts; pnnx's default fp16 weight storage is run on the portable target's averages.

PyPI's `ncnn` and `pnnx` (the `runtimes` extra; `make test-runtimes`). pnnx imports torch, so it is not in
the fast suite's environment."""
from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from helpers import (
    NCNN_LACKS,
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
)
from ncnn_runner import NcnnFailed, ncnn_run, pnnx_binary
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs
from runtime_matrix import record

import onnxpoolfix

# looked up, not imported: collecting the fast suite imports no runtime it does not run
if importlib.util.find_spec("ncnn") is None:
    pytest.skip("the runtimes extra is not installed (make test-runtimes)", allow_module_level=True)

if pnnx_binary() is None:
    pytest.skip("pnnx is not installed (the runtimes extra: make test-runtimes)", allow_module_level=True)
pytestmark = pytest.mark.slow


def known_failure(case: dict, target: str) -> str | None:
    """What ncnn (1.0.20261020, through pnnx 20261020) cannot run, measured: the test asserts it fails."""
    if case["kind"] == "max" and (target != "portable" or "indices" in case["name"]):
        # the default and tensorrt targets test NaN with comparisons (Equal/Less/Greater, IsNaN: no ncnn layer) and
        # the indices need them; the default target's If crashes pnnx. The portable target's max without indices
        # is judged by its file below
        return "max pooling with comparisons"
    if case["rank"] == 3 and target == "onnxruntime":
        # the portable target's static 3-D pools are two 2-D ones on 4-D tensors (lowering/separable.py), as are
        # the tensorrt target's averages
        return "3-D pooling (a 4-D Crop, a Reshape)"
    if target == "onnxruntime" and case["opset"] < 9:
        # the default target's below opset 9 (a MatMul's NaN guard needs Where; the window sums: a Gather); the
        # portable target cuts its windows with Split there
        return "window sums: a Gather"
    return None


#: the portable target's max fixtures whose window Slices apply (no indices read; 3-D as two 2-D pools)
WINDOW_SLICES_MAX = [c for c in CASES if c["kind"] == "max" and "indices" not in c["name"]]


@pytest.mark.parametrize("case", WINDOW_SLICES_MAX, ids=[c["name"] for c in WINDOW_SLICES_MAX])
def test_ncnn_takes_the_portable_max_with_window_slices(case):
    """The portable target's max pooling as window Slices and the NaN test without comparisons (what it writes by
    default but where the windows are uniform: one MaxPool, test_ncnn_matches_torch), exact at every saved batch-1
    size."""
    rtol, atol = case["suggested_tolerance"]
    model = onnx.load(FIXTURES / case["file"])
    sizes = list(_runnable(case))
    if not sizes:
        pytest.skip("every saved size has a batch above 1, which ncnn's Mat cannot hold")
    for sfx, feed, want in sizes:
        shapes = {k: list(v.shape) for k, v in feed.items()} if case["dynamic"] else None
        patched = onnxpoolfix.patch(model, target="portable", input_shapes=shapes, strategy="window_slices",
                                    check=False).model
        ops = {n.op_type for n in patched.graph.node}
        assert not ops & NCNN_LACKS
        if ops == {"Identity"}:
            continue  # pooling n -> n bound: one Identity, which pnnx cannot convert (nothing to run)
        got = ncnn_run(patched, feed)
        for name, w in want.items():
            np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} at {sfx or 'traced'}")


def _runnable(case):
    """The saved sizes ncnn can be fed: batch 1 (ncnn's Mat has no batch axis)."""
    for sfx, feed, want in runs(case):
        if sfx and not case["dynamic"]:
            continue
        if all(v.shape[:1] == (1,) for v in feed.values()):
            yield sfx, feed, want


def _patch(case, target, feed):
    shapes = {k: list(v.shape) for k, v in feed.items()} if case["dynamic"] else None
    model = onnx.load(FIXTURES / case["file"])
    return onnxpoolfix.patch(model, target=target, input_shapes=shapes, check=False).model


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ncnn_matches_torch(case, target):
    rtol, atol = case["suggested_tolerance"]
    sizes = list(_runnable(case))
    if not sizes:
        record("ncnn", case, target, "batch > 1")
        pytest.skip("every saved size has a batch above 1, which ncnn's Mat cannot hold")
    failure = known_failure(case, target)
    ops = {n.op_type for n in _patch(case, target, sizes[0][1]).graph.node}
    if failure is None and target == "onnxruntime" and "If" in ops:
        failure = "the default target's If (its MatMul averages' NaN guard): comparisons ncnn has no layer for"
    if failure is None and case["kind"] == "max" and ops & NCNN_LACKS:
        # the default and tensorrt targets' static max, and any target's with its indices read: Gathers
        failure = "max pooling with Gathers or comparisons"
    if failure:
        sfx, feed, _ = sizes[0]
        with pytest.raises(NcnnFailed):
            ncnn_run(_patch(case, target, feed), feed)
        record("ncnn", case, target, "refused")
        return
    compared = 0
    for sfx, feed, want in sizes:
        patched = _patch(case, target, feed)
        if {n.op_type for n in patched.graph.node} == {"Identity"}:
            continue  # pooling n -> n bound: the graph is one Identity, which pnnx cannot convert (nothing to run)
        got = ncnn_run(patched, feed)
        for name, w in want.items():
            np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} at {sfx or 'traced'}")
        compared += 1
    assert compared
    record("ncnn", case, target, "exact, bound" if case["dynamic"] else "exact")


def _pool_only(case) -> bool:
    """A fixture whose only float weights would be the lowering's (no Conv/Gemm weights of its own)."""
    model = onnx.load(FIXTURES / case["file"])
    return not any(t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) for t in model.graph.initializer)


FP16_CASES = [c for c in CASES if c["kind"] == "avg" and not c["dynamic"] and known_failure(c, "portable") is None
              and _pool_only(c)
              and all(v.shape[:1] == (1,) for v in next(runs(c))[1].values())]


FP16_RUNS = [(c, t) for c in FP16_CASES for t in ("portable", "tensorrt") if known_failure(c, t) is None]


@pytest.mark.parametrize("case,target", FP16_RUNS, ids=[f"{c['name']}-{t}" for c, t in FP16_RUNS])
def test_pnnx_fp16_storage_keeps_the_averages_exact(case, target):
    """pnnx's default conversion stores weights as fp16: the portable and tensorrt targets' averages have none to
    round (float32-exact against torch, with ncnn's default options). A MatMul lowering's 1/len pooling matrices
    (what the tensorrt target wrote before) stored so were off by their rounding, about 1e-4 relative."""
    rtol, atol = case["suggested_tolerance"]
    sfx, feed, want = next(runs(case))
    got = ncnn_run(_patch(case, target, feed), feed, fp16=True, ncnn_defaults=True)
    for name, w in want.items():
        np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("defaults", [False, True], ids=["fp32", "ncnn_defaults"])
@pytest.mark.parametrize("shape,size,opset", NON_FINITE_MAX_CASES, ids=NON_FINITE_MAX_IDS)
def test_portable_max_keeps_torchs_non_finite_values(shape, size, opset, defaults):
    """The portable target's static max pooling has no comparison or Gather (lowering/max_steps.py): pnnx
    converts it, and ncnn keeps torch's NaN, +-inf, windows of only -inf, -FLT_MAX and -0.0 bit for bit, in
    float32 and with pnnx's and ncnn's defaults (fp16 weight storage; fp16 arithmetic where the CPU has it)."""
    torch = pytest.importorskip("torch")
    model = portable_max(shape, size, opset)
    x = non_finite_max_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    got = ncnn_run(model, {"x": x}, fp16=defaults, ncnn_defaults=defaults)["y"]
    assert_bits_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("size", [(1, 1), (5, 1), (1, 7)])
def test_portable_averages_to_one_from_opset_18(size):
    """An axis averaged to 1 from opset 18: the portable target writes a pooling op spanning it, not a ReduceMean
    (opset 18's takes its axes as an input, which pnnx dropped: ncnn averaged the wrong dims, measured)."""
    torch = pytest.importorskip("torch")
    shape = (1, 4, 8, 9)
    model = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=18), target="portable").model
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), size).numpy()
    got = ncnn_run(model, {"x": x})["y"]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 18])
def test_pnnx_keeps_one_axis_window_means_below_opset_18_only(opset):
    """The portable target's windows of symbolic length, each a one-axis ReduceMean: from opset 18 its axes are
    an input, which pnnx drops (its Reduction lists no axes: ncnn returns the windows un-averaged, review58);
    below, an attribute it keeps. Asserted both ways (this fails the day pnnx keeps the input: then the
    report's ``pnnx-reduce-axes`` note goes), and the note is written exactly where it fails."""
    torch = pytest.importorskip("torch")
    patched = onnxpoolfix.patch(make_leftover("avg", (1, 4, "h", "w"), (3, 3), opset=opset), target="portable")
    assert ("pnnx-reduce-axes" in [n.code for n in patched.report.notes]) == (opset >= 18)
    x = np.random.default_rng(0).standard_normal((1, 4, 13, 11)).astype(np.float32)
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), (3, 3)).numpy()
    got = ncnn_run(patched.model, {"x": x})["y"]
    exact = got.size == want.size and np.allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    assert exact == (opset < 18), got.shape


@pytest.mark.parametrize("name", OLD_OPSET_AVG)
def test_portable_averages_below_opset_10_cut_windows_with_split(name):
    """Below opset 10 the portable target cuts its windows with Split (Slice-1's attribute bounds fail TVM 0.27's
    converter; window sums need a Gather, which ncnn has no layer for): no Gather or Slice, and NaN (either sign),
    +inf, -inf and both infinities in one window reach the outputs torch's do (tests/test_runtimes.py)."""
    torch = pytest.importorskip("torch")
    (case,) = [c for c in CASES if c["name"] == name]
    _, feed, want = next(runs(case))
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable").model
    assert "Split" in {n.op_type for n in model.graph.node} and not {"Gather", "Slice"} & {
        n.op_type for n in model.graph.node}
    x = non_finite_avg_input(feed["x"])
    expected = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), want["y"].shape[2:]).numpy()
    assert_same_non_finite(ncnn_run(model, {"x": x})["y"], expected)


#: static 3-D pools that upsample (input shape, output size): every axis by an integer, D alone, W alone, integer up
#: and down, non-integer up, one axis up and another down
UPSAMPLE_3D = [((1, 6, 2, 3, 4), (4, 6, 8)), ((1, 6, 2, 3, 4), (4, 3, 4)), ((1, 6, 2, 3, 4), (2, 3, 8)),
               ((1, 6, 4, 3, 4), (2, 6, 8)), ((1, 6, 2, 3, 4), (3, 5, 7)), ((1, 6, 3, 4, 5), (6, 3, 2))]


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,size", UPSAMPLE_3D, ids=["x".join(map(str, s)) for _, s in UPSAMPLE_3D])
def test_ncnn_runs_the_portable_3d_upsampling(shape, size, kind):
    """The portable target's static 3-D pools that upsample, against torch in ncnn: an integer upsample's copy as
    two 4-D Resizes (a 5-D Resize pnnx converted without its scales, and ncnn returned the input's size with no
    error, review81), the rest as two 2-D pools; the max as :func:`portable_max` writes it, NaN, +-inf, windows of
    -inf alone, -FLT_MAX and -0.0 bit for bit."""
    torch = pytest.importorskip("torch")
    x = non_finite_max_input(shape)
    if kind == "avg":
        x[0, 2:] = np.random.default_rng(1).standard_normal(x[0, 2:].shape)  # (3e38s would overflow the sums)
        model = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=17), target="portable").model
    else:
        model = portable_max(shape, size, 17)
    want = getattr(torch.nn.functional, f"adaptive_{kind}_pool3d")(torch.from_numpy(x), size).numpy()
    got = ncnn_run(model, {"x": x})["y"]
    assert got.size == want.size, got.shape
    if kind == "max":
        assert_bits_equal(got.reshape(want.shape), want)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("defaults", [False, True], ids=["fp32", "ncnn_defaults"])
@pytest.mark.parametrize("shape,size,opset", POOLED_AVG_FEW, ids=POOLED_AVG_FEW_IDS)
def test_portable_pooled_averages_keep_torchs_non_finite_values(shape, size, opset, defaults):
    """The portable target's averages through AveragePool with the form that keeps TFLite's NaN (Neg, Max, Min,
    Sub: lowering/avg_non_finite.py): NaN (either sign), +inf, -inf and both infinities in one window reach the
    outputs torch's do, in float32 and with pnnx's and ncnn's fp16 defaults; 3-D pools to 1 as two 2-D pools (a 5-D
    ReduceMean failed to load: review87)."""
    torch = pytest.importorskip("torch")
    x = non_finite_pool_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    got = ncnn_run(portable_pooled_avg(shape, size, opset), {"x": x}, fp16=defaults, ncnn_defaults=defaults)["y"]
    assert_same_non_finite(got, want)

"""What users do next with OUT (issue 33), against torch and a numpy loop reference, for the portable target
and, for the averages, the default (onnxruntime) target too:

- a NaN and an inf in one window of each average fixture reach exactly the outputs torch's do;
- onnxruntime's quantize_dynamic / quantize_static leave the pooling as exact as the dynamo export's is;
- weights stored as fp16 (pnnx's default) change nothing beyond the fp16 rounding of the input;
- portable: only ops every runtime of docs/targets.md takes; symbolic pooled sizes stay symbolic (one file,
  every size).

The default target below opset 9 (no IsNaN or Where for a MatMul's guard) writes window sums, as the portable
target does: those cases are held to the same expectations.

Every expectation comes from torch (``F.adaptive_avg_pool*``, the fixtures' saved outputs) or from
:func:`loop_reference` below, never from the patched graph.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from export_cache import dynamo_export
from helpers import (
    NCNN_LACKS,
    NON_FINITE_MAX_CASES,
    NON_FINITE_MAX_IDS,
    assert_bits_equal,
    make_leftover,
    non_finite_max_input,
    portable_max,
)
from quantize import calibration_batches, quantized, relative_error
from runtime_matrix import record

import onnxpoolfix
from onnxpoolfix.cli import main

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
# average fixtures whose graph input is the pool's input, so torch's functional pool is the whole module
DIRECT_AVG = [c for c in CASES if c["kind"] == "avg" and c["module"].startswith(("nn.Adaptive", "Lambda"))]
STATIC_AVG = [c for c in DIRECT_AVG if not c["dynamic"]]
STATIC_AVG_F32 = [c for c in STATIC_AVG if c["dtype"] == "float32"]
DYNAMIC_AVG = [c for c in DIRECT_AVG if c["dynamic"]]
STATIC = [c for c in CASES if not c["dynamic"]]

# what the portable target never emits (docs/targets.md says which runtime lacks each)
NOT_PORTABLE = {"If", "IsNaN", "MatMul", "Range", "Loop", "Scan"}  # Range: the runtime windows tract & co refuse


def ids(cases):
    return [c["name"] for c in cases]


def saved(case, suffix=""):
    """torch's input and output at the traced size (or at ``suffix``, an extra saved size)."""
    data = np.load(FIXTURES / case["data_file"])
    pick = [k for k in data.files if ("@" in k) == bool(suffix) and k.endswith(suffix)]
    x = next(data[k] for k in pick if k.startswith("input:"))
    y = next(data[k] for k in pick if k.startswith("output:"))
    return x, y


def output_size(case):
    size = case["output_size"]
    return size if isinstance(size, list) else [size] * case["rank"]


def torch_pool(case, x: np.ndarray) -> np.ndarray:
    fn = getattr(torch.nn.functional, f"adaptive_avg_pool{case['rank']}d")
    return fn(torch.from_numpy(x), output_size(case)).numpy()


def loop_reference(x: np.ndarray, out_sizes) -> np.ndarray:
    """Adaptive average pooling of x's last axes by the window formula, one window at a time (float64 sums)."""
    k = len(out_sizes)
    ins = x.shape[-k:]
    outs = [n if m is None else m for n, m in zip(ins, out_sizes)]
    y = np.empty(x.shape[:-k] + tuple(outs), dtype=np.float64)
    for idx in np.ndindex(*outs):
        sl = tuple(slice((i * n) // m, -(-((i + 1) * n) // m)) for i, n, m in zip(idx, ins, outs))
        y[(...,) + idx] = x[(...,) + sl].astype(np.float64).sum(axis=tuple(range(-k, 0))) / math.prod(
            s.stop - s.start for s in sl)
    return y


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def portable(case, **kw) -> onnx.ModelProto:
    return patched(case, "portable", **kw)


def patched(case, target: str, **kw) -> onnx.ModelProto:
    return onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, **kw).model


TARGETS = ["portable", "onnxruntime", "tensorrt"]


def assert_same_non_finite_and_close(got, want, rtol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg="+inf positions differ")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg="-inf positions differ")
    finite = np.isfinite(want)
    if finite.any():
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * np.abs(want[finite]).max())


def with_non_finite(case, x: np.ndarray, which: str) -> np.ndarray:
    """x with a NaN and/or +inf in output window 0 of every pooled axis (channel 0 of batch 0): the NaN at
    the window's first element, the inf at its last (another channel where the window is one element)."""
    x = x.copy()
    k = case["rank"]
    ins = x.shape[-k:]
    outs = [n if m is None else m for n, m in zip(ins, output_size(case))]
    first = (0,) * (x.ndim - k) + (0,) * k
    last = (0,) * (x.ndim - k) + tuple(-(-n // m) - 1 for n, m in zip(ins, outs))
    if which in ("nan", "both"):
        x[first] = np.nan
    if which in ("inf", "both"):
        if last == first and which == "both":
            last = (0,) * (x.ndim - k - 1) + (x.shape[-k - 1] - 1,) + (0,) * k
        x[last] = np.inf
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("which", ["nan", "inf", "both"])
@pytest.mark.parametrize("case", STATIC_AVG, ids=ids(STATIC_AVG))
def test_non_finite_reaches_torchs_outputs_only(case, which, target):
    if case["dtype"] == "bfloat16":
        pytest.skip("numpy has no bfloat16 to feed; the float32, float16 and float64 cases cover the lowering")
    x, _ = saved(case)
    rtol = 1e-3 if case["dtype"] == "float16" else 1e-5
    model = patched(case, target)
    xn = with_non_finite(case, x, which)
    got = run(model, xn)
    assert_same_non_finite_and_close(got, torch_pool(case, xn), rtol)
    assert_same_non_finite_and_close(got, loop_reference(xn, output_size(case)), rtol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("which", ["nan", "inf", "both"])
@pytest.mark.parametrize("case", DYNAMIC_AVG, ids=ids(DYNAMIC_AVG))
def test_non_finite_dynamic_fixture_one_file_every_size(case, which, target):
    """Symbolic sizes stay symbolic (window_slices; the default target's runtime matrices): one patched file,
    at every saved size."""
    model = patched(case, target, check=False)  # torch and the loop judge
    for extra in case["extra_sizes"]:
        x, _ = saved(case, extra["suffix"])
        xn = with_non_finite(case, x, which)
        got = run(model, xn)
        assert_same_non_finite_and_close(got, torch_pool(case, xn), 1e-5)
        assert_same_non_finite_and_close(got, loop_reference(xn, output_size(case)), 1e-5)


def test_symbolic_sizes_stay_symbolic(tmp_path):
    out = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [str(FIXTURES / "dynamic_avg2d.onnx"), str(out), "--target", "portable"])
    assert r.exit_code == 0, r.output
    assert "window_slices" in r.output
    dims = [d.dim_param or d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert all(isinstance(d, str) for d in dims[2:]), dims  # H and W still symbolic in OUT


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_the_default_target_tests_nan_with_equal_from_opset_11(case):
    """MNN has no IsNaN and compares floats by their bits in Less/Greater (docs/targets.md): from opset 11 the
    default target's guards (conditions and branches, at any depth) test NaN/inf with Equal alone. The MNN runs
    themselves are in make test-runtimes; this holds the property in the fast suite."""
    from onnxpoolfix.graph import nodes_deep

    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), check=False).model
    before = {n.name for n in onnx.load(FIXTURES / case["file"]).graph.node}
    written = [n for n in nodes_deep(model.graph.node) if n.name not in before]
    ops = {n.op_type for n in written}
    if case["opset"] >= 11:
        assert "IsNaN" not in ops, case["name"]
        assert not [n.name for n in written if n.op_type in ("Less", "Greater") and "int" not in n.name
                    and any(x.endswith(("lowest", "highest", "half", "one_half")) for x in n.input)], case["name"]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_portable_emits_no_op_a_runtime_lacks(case):
    try:
        model = portable(case, check=False)
    except onnxpoolfix.PoolFixError as e:  # pragma: no cover - every fixture is expected to patch
        pytest.fail(f"portable refused {case['name']}: {e}")
    ops = {n.op_type for n in model.graph.node}
    assert not ops & NOT_PORTABLE, ops & NOT_PORTABLE
    if case["rank"] == 3:  # no 3-D pooling op (MNN, TFLite): a static 3-D pool's pools run on 4-D planes
        assert all(len(onnx.helper.get_node_attr_value(n, "kernel_shape")) == 2 for n in model.graph.node
                   if n.op_type in ("AveragePool", "MaxPool"))
    if case["dtype"] == "bfloat16":  # (numpy has no bfloat16 to feed; tests/test_fixtures.py runs it)
        return
    data = np.load(FIXTURES / case["data_file"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rtol, atol = case["suggested_tolerance"]
    for sfx in [""] + [e["suffix"] for e in case.get("extra_sizes") or []]:
        feed = {i.name: data[f"input:{i.name}{sfx}"] for i in sess.get_inputs()}
        for o, got in zip(sess.get_outputs(), sess.run(None, feed)):
            np.testing.assert_allclose(got, data[f"output:{o.name}{sfx}"], rtol=rtol, atol=atol,
                                       err_msg=f"{o.name} at {sfx or 'traced'}")


# ---- int8 quantization (onnxruntime.quantization), against the fixtures' saved torch outputs -----------

# quantize_static of the plain dynamo exports of these modules (float32 fixtures): 5.6e-3 to 2.8e-2 relative,
# depending on the calibration data (test_quantized_no_worse_than_dynamo holds each fixture to 1.5x its own);
# quantize_dynamic leaves their pools unquantized (0). A MatMul lowering's quantized matrix: 0.4 to 1.0.
STATIC_BOUND = 2.8e-2


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("case", STATIC_AVG_F32, ids=ids(STATIC_AVG_F32))
def test_quantized_stays_exact(case, mode, target, tmp_path):
    x, want = saved(case)
    err = relative_error(run(quantized(patched(case, target), x, mode, tmp_path), x), want)
    # dynamic: nothing of the pooling is quantized (no weights; the default target's MatMul reads its weights
    # from a Div, not an initializer): float32 exact; static: the input's own quantization step, as for the
    # dynamo export's AveragePool/Gather
    assert err <= (1e-6 if mode == "dynamic" else STATIC_BOUND), err


def dynamo_file(case, x: np.ndarray) -> onnx.ModelProto | None:
    from pool_modules import AdaptiveAvgOrArea

    module = AdaptiveAvgOrArea(case["rank"], output_size(case), case["module"].startswith("Lambda"))
    try:
        return dynamo_export(module, (torch.from_numpy(x),))
    except Exception:  # noqa: BLE001 - dynamo cannot export 3D average pooling nor area interpolation
        return None


QUICK = {"avg2d_8x9_to_5x7", "avg1d"}
# measured over the bar, asserted so a change either way is seen (empty since the planner takes avg3d's one
# Kronecker MatMul, measured faster than its two separable ones: quantize_static then has no activation to
# quantize between two passes; 7.5e-3 against a bar of 1.13e-2, 1.18e-2 before)
OVER_THE_BAR: set[tuple[str, str, str]] = set()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c["name"] in QUICK else pytest.mark.slow)
                                  for c in STATIC_AVG_F32], ids=ids(STATIC_AVG_F32))
def test_quantized_no_worse_than_dynamo(case, mode, target, tmp_path):
    """Issue 33's bar: error no worse than 1.5x the plain dynamo export's; where torch cannot export it (3D),
    1.5x what quantizing the input and the output alone costs (:func:`quantization_floor`: 7.5e-3 for avg3d,
    whose window sums measure 1.02e-2)."""
    x, want = saved(case)
    ours = relative_error(run(quantized(patched(case, target), x, mode, tmp_path), x), want)
    dyn = dynamo_file(case, x)
    if dyn is not None:
        bar = 1.5 * relative_error(run(quantized(dyn, x, mode, tmp_path), x), want)
    else:
        bar = 1.5 * quantization_floor(case, x, want) if mode == "static" else 0.0
    if (case["name"], mode, target) in OVER_THE_BAR:
        assert bar < ours <= 1.1 * bar, (ours, bar)
        return
    assert ours <= max(bar, 1e-6), (ours, bar)
    record(f"ORT int8 {mode}", case, target, "quantized within the bar")


def quantization_floor(case, x: np.ndarray, want: np.ndarray) -> float:
    """The relative error of any pooling whose input and output are quantized as quantize_static does it
    (int8, asymmetric, min/max over the calibration batches :func:`quantized` feeds): the numpy pool of the
    fake-quantized input, fake-quantized again, against torch's output."""
    def fake(a, lo, hi):
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = (hi - lo) / 255
        zero = np.round(-128 - lo / scale)
        return (np.clip(np.round(a / scale) + zero, -128, 127) - zero) * scale

    batches = calibration_batches(x)  # quantized()'s calibration
    outs = [loop_reference(b, output_size(case)) for b in batches]
    lo, hi = min(b.min() for b in batches), max(b.max() for b in batches)
    pooled = loop_reference(fake(x, lo, hi), output_size(case))
    return relative_error(fake(pooled, min(o.min() for o in outs), max(o.max() for o in outs)), want)


# ---- fp16 weight storage (pnnx's default conversion for ncnn) -----------------------------------------

def weights_as_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every float32 initializer and Constant rounded through float16, as a converter storing fp16 weights."""
    model = onnx.ModelProto.FromString(model.SerializeToString())

    def rounded(t):
        if t.data_type != onnx.TensorProto.FLOAT:
            return t
        a = onnx.numpy_helper.to_array(t).astype(np.float16).astype(np.float32)
        return onnx.numpy_helper.from_array(a, t.name)

    for t in model.graph.initializer:
        t.CopyFrom(rounded(t))
    for n in model.graph.node:
        for a in n.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(rounded(a.t))
    return model


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", STATIC_AVG_F32, ids=ids(STATIC_AVG_F32))
def test_fp16_weights_exact_to_the_inputs_rounding(case, target):
    x, _ = saved(case)
    x16 = x.astype(np.float16).astype(np.float32)  # the input's fp16 rounding: the only error allowed
    got = run(weights_as_fp16(patched(case, target)), x16)
    np.testing.assert_allclose(got, torch_pool(case, x16), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, loop_reference(x16, output_size(case)), rtol=1e-5, atol=1e-6)


# ---- max pooling: torch's NaN / -inf without IsNaN or If -----------------------------------------------

DIRECT_MAX = [c for c in CASES if c["kind"] == "max" and not c["dynamic"] and c["dtype"] == "float32"
              and c["module"].startswith("nn.Adaptive")]


@pytest.mark.parametrize("shape,size,opset", NON_FINITE_MAX_CASES, ids=NON_FINITE_MAX_IDS)
def test_static_max_without_comparisons_or_gathers_as_torch(shape, size, opset):
    """The portable target's static max pooling (no indices read) has no comparison, Where or Gather, which
    ncnn lacks (review32, review89: Y = ((M - S) - G) - G, lowering/max_steps.py), and keeps torch's NaN, -inf,
    -FLT_MAX and -0.0 bit for bit; tests/test_runtime*.py run the same files in the other runtimes."""
    model = portable_max(shape, size, opset)
    ops = {n.op_type for n in model.graph.node}
    assert not ops & NCNN_LACKS, sorted(ops & NCNN_LACKS)
    if len(size) <= 2:  # pnnx converts no ReduceMax over two axes, nor opset 18's (its axes an input)
        reduces = [n for n in model.graph.node if n.op_type in ("ReduceMax", "ReduceMean")]
        assert opset < 18 or not reduces, opset
        assert all(len(a.ints) == 1 for n in reduces for a in n.attribute if a.name == "axes")
    if opset < 18 and all(m == 1 for m in size):  # a ReduceMax per axis: MNN's MaxPool starts its max at -2^24
        assert "MaxPool" not in ops
    x = non_finite_max_input(shape)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")
    assert_bits_equal(sess.run(None, {"x": x})[0], fn(torch.from_numpy(x), size).numpy())


@pytest.mark.parametrize("size", [(1, 1), (5, 1), (1, 7)])
def test_averages_to_one_from_opset_18_take_no_reduce(size):
    """An axis averaged to 1 from opset 18 is one AveragePool spanning it: opset 18's ReduceMean takes its axes as
    an input, which pnnx drops (ncnn averaged the wrong dims: tests/test_runtime_ncnn.py runs these files)."""
    shape = (2, 4, 8, 9)
    model = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=18), target="portable").model
    assert not {n.op_type for n in model.graph.node} & {"ReduceMean", "ReduceSum"}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = run(model, x)
    np.testing.assert_allclose(got, torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), size).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 18])
def test_symbolic_max_without_comparisons_one_file_every_size(opset):
    """The portable target's symbolic max pooling (window_slices, the form without comparisons): one file run at
    non-square, odd, upsampling and size-1 planes, on NaN, +-inf, windows of -inf alone, -FLT_MAX, -0.0, +inf and
    huge numbers, bit for bit torch's."""
    model = onnxpoolfix.patch(make_leftover("max", (1, 6, "H", "W"), (5, 7), opset=opset), target="portable").model
    # (its bounds Gather the input's Shape; ncnn takes the file bound to one size)
    assert not {n.op_type for n in model.graph.node} & {"Equal", "Less", "Greater", "Where", "IsNaN", "Not", "If"}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for hw in [(8, 9), (17, 13), (23, 9), (5, 7), (3, 4), (1, 11)]:
        x = non_finite_max_input((1, 6) + hw)
        want = torch.nn.functional.adaptive_max_pool2d(torch.from_numpy(x), (5, 7)).numpy()
        assert_bits_equal(sess.run(None, {"x": x})[0], want, f"at {hw}")


@pytest.mark.parametrize("case", DIRECT_MAX, ids=ids(DIRECT_MAX))
def test_max_non_finite_as_torch(case):
    x, _ = saved(case)
    g = np.random.default_rng(3)
    x = x.copy()
    r = g.random(x.shape)
    x[r < 0.05] = np.nan
    x[(r >= 0.05) & (r < 0.15)] = -np.inf
    x[..., :2, :1] = -np.inf  # an all -inf corner window where the rank allows it
    model = portable(case)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})
    fn = getattr(torch.nn.functional, f"adaptive_max_pool{case['rank']}d")
    v, i = fn(torch.from_numpy(x), output_size(case), return_indices=True)
    np.testing.assert_array_equal(got[0], v.numpy())  # NaN positions, -inf, values: bit for bit
    if len(got) > 1 and got[1].dtype == np.int64:
        np.testing.assert_array_equal(got[1], i.numpy())


@pytest.mark.parametrize("opset, shape, target, noted", [
    (18, (1, 4, "h", "w"), "portable", True),  # one-axis ReduceMeans with an axes input: pnnx drops it
    (17, (1, 4, "h", "w"), "portable", False),  # the axes an attribute
    (18, (1, 4, 13, 11), "portable", False),  # static windows: AveragePools
    (18, (1, 4, "h", "w"), "onnxruntime", False),  # the dynamic lowering: no window Reduces
])
def test_the_report_names_pnnxs_dropped_reduce_axes(opset, shape, target, noted):
    report = onnxpoolfix.patch(make_leftover("avg", shape, (3, 3), opset=opset), target=target).report
    assert ("pnnx-reduce-axes" in [n.code for n in report.notes]) == noted

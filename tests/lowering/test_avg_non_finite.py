"""The default target's MatMul averages (issue 33): NaN and inf stay in their windows as in torch, and the
pooling weights survive int8 quantization and fp16 storage.

A MatMul against a pooling matrix multiplies every input by every output's weight, zeros included, and
``0 * NaN = 0 * inf = NaN``; the default target guards it with an If whose else-branch keeps non-finite values
in their windows (lowering/avg_non_finite.py), and writes each matrix as ``Div(Cast(indicator), lengths)``
(graph/emit.py ``Emitter.weights``). Expectations come from torch's functional pools and from numpy, never
from the patched graph; the fixtures' quantization and fp16 bars are in tests/lowering/test_portable.py.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_leftover, ort_run, pyramid_leftovers
from onnx import TensorProto, numpy_helper

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.tensorrt import lint_tensorrt

torch = pytest.importorskip("torch")
F = torch.nn.functional

F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
NP = {F32: np.float32, F16: np.float16, F64: np.float64}

# (strategy, input shape, output size): every lowering the default target writes a MatMul in
CASES = [
    ("matmul", (2, 3, 8, 9), (5, 7)),
    ("matmul", (3, 10, 11), (4, 4)),  # unbatched
    ("matmul", (2, 3, 40), (16,)),  # 1-D, block form (gcd 8)
    ("kronecker", (1, 2, 9, 9), (7, 7)),
    ("kronecker", (2, 2, 5, 6, 7), (3, 4, 5)),  # 3-D
    ("mixed", (2, 3, 8, 9), (4, 7)),  # AveragePool on H, MatMul on W
    ("matmul", (2, 2, 4, 5), (6, 6)),  # non-integer upsampling: overlapping windows
]


def torch_pool(x: np.ndarray, size) -> np.ndarray:
    fn = getattr(F, f"adaptive_avg_pool{len(size)}d")
    return fn(torch.from_numpy(x.astype(np.float32)), size).numpy()


def same_non_finite(got, want) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    for what, f in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        np.testing.assert_array_equal(f(got), f(want), err_msg=f"{what} positions differ")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)


def sprinkled(shape, seed: int, dtype=np.float32) -> np.ndarray:
    """Random values with about 3% NaN, 3% +inf and 3% -inf scattered (windows with both infinities too)."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(shape).astype(dtype)
    r = g.random(shape)
    x[r < 0.03] = np.nan
    x[(r >= 0.03) & (r < 0.06)] = np.inf
    x[(r >= 0.06) & (r < 0.09)] = -np.inf
    return x


@pytest.mark.parametrize("strategy,shape,size", CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_non_finite_stays_in_its_windows(strategy, shape, size):
    res = onnxpoolfix.patch(make_leftover("avg", shape, size), strategy=strategy)
    assert res.report.nodes[0].lowering == strategy
    assert "If" in {n.op_type for n in res.model.graph.node}
    for seed in range(4):
        x = sprinkled(shape, seed)
        (got,) = ort_run(res.model, {"x": x})
        same_non_finite(got, torch_pool(x, size))
        same_non_finite(got, reference.adaptive_avg_pool(x.astype(np.float64), size))
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)  # finite: the MatMul's own result
    (got,) = ort_run(res.model, {"x": x})
    np.testing.assert_allclose(got, torch_pool(x, size), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F16, F64], ids=["f16", "f64"])
def test_non_finite_other_dtypes(dtype):
    shape, size = (2, 3, 8, 9), (5, 7)
    res = onnxpoolfix.patch(make_leftover("avg", shape, size, dtype=dtype), strategy="matmul")
    x = sprinkled(shape, 1, NP[dtype])
    (got,) = ort_run(res.model, {"x": x})
    want = reference.adaptive_avg_pool(x.astype(np.float64), size)
    for f in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(f(got.astype(np.float64)), f(want))


def test_symbolic_sizes_one_file_every_size(torch_mod):
    """The dynamic lowering's runtime matrices, guarded the same way: one file, several sizes."""
    import io
    import warnings

    module = torch.nn.AdaptiveAvgPool2d((5, 7)).eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, 2, 9, 9),), f, dynamo=False, input_names=["x"],
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, opset_version=17,
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    res = onnxpoolfix.patch(onnx.load_from_string(f.getvalue()))
    assert res.report.nodes[0].lowering == "dynamic"
    for i, hw in enumerate([(9, 9), (13, 11), (3, 4), (40, 6)]):
        x = sprinkled((2, 2) + hw, i)
        (got,) = ort_run(res.model, {"x": x})
        same_non_finite(got, torch_pool(x, (5, 7)))


def test_pyramid_stacked_matmuls_are_guarded():
    shape, sizes = (1, 4, 20, 20), [(2, 2), (3, 3), (6, 6)]
    res = onnxpoolfix.patch(pyramid_leftovers(F32, shape, sizes))
    assert {n.lowering for n in res.report.nodes} == {"pyramid"}
    x = sprinkled(shape, 5)
    for got, size in zip(ort_run(res.model, {"x": x}), sizes):
        same_non_finite(got, torch_pool(x, size))


def _deep_ops(graph: onnx.GraphProto) -> set[str]:
    ops = set()
    for n in graph.node:
        ops.add(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= _deep_ops(a.g)
    return ops


def _signed_nans(x: np.ndarray) -> np.ndarray:
    """``x`` with its NaNs alternately of either sign (x86 makes ``inf - inf`` a NaN with the sign bit)."""
    bits = x.view(np.uint32).copy()
    nans = np.flatnonzero(np.isnan(x))
    bits.reshape(-1)[nans[::2]] |= np.uint32(0x80000000)
    return bits.view(np.float32)


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("strategy,shape,size", [c for c in CASES if c[0] != "mixed"] + [("pyramid", (1, 4, 20, 20),
                         [(2, 2), (3, 3), (6, 6)])], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_below_opset_11_the_guard_tests_without_isnan(opset, strategy, shape, size):
    """At opset 9 and 10 (Equal takes no floats) the guard tests with Less against 0 and 1 and a Div, no IsNaN
    (MNN has none: tests/test_runtime_mnn.py runs the fixture there); NaN of either sign, +inf, -inf and windows
    holding both infinities reach torch's outputs."""
    if strategy == "pyramid":
        model, sizes = pyramid_leftovers(F32, shape, size), size
        model.opset_import[0].version = opset
        res = onnxpoolfix.patch(model)
        assert {n.lowering for n in res.report.nodes} == {"pyramid"}
    else:
        sizes = [size]
        res = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), strategy=strategy)
    ops = _deep_ops(res.model.graph)
    assert "If" in ops and "IsNaN" not in ops and "Equal" not in ops
    for seed in range(4):
        x = _signed_nans(sprinkled(shape, seed))
        for got, s in zip(ort_run(res.model, {"x": x}), sizes):
            same_non_finite(got, torch_pool(x, s))
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    for got, s in zip(ort_run(res.model, {"x": x}), sizes):
        np.testing.assert_allclose(got, torch_pool(x, s), rtol=1e-5, atol=1e-6)


TENSORRT_CASES = [(shape, size, opset) for _, shape, size in CASES for opset in (9, 17)] + [
    ((1, 3, 1000), (30,), 13),  # long 1-D windows
    ((2, 3, 130, 7), (65, 3), 17),  # more than 64 windows on H: window sums
    ((1, "C", "H", "W"), (5, 7), 17),  # symbolic: windows from the input's shape
    ((1, 2, "H", 9), (4, 7), 18),  # one symbolic axis, opset 18 (Reduce axes as inputs)
]


@pytest.mark.parametrize("shape,size,opset", TENSORRT_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(
    v, tuple) else str(v))
def test_the_tensorrt_target_keeps_nan_and_inf_in_their_windows_without_a_matmul(shape, size, opset):
    """The tensorrt target has no guard (TensorRT's If is a conditional layer that runs both branches), and a
    TensorRT build computes a float32 MatMul in TF32 by default: its averages are pooling and reductions, no
    MatMul, and NaN of either sign, +inf, -inf and windows holding both reach torch's outputs."""
    res = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), target="tensorrt")
    assert "MatMul" not in _deep_ops(res.model.graph) and "If" not in _deep_ops(res.model.graph)
    assert [f for f in lint_tensorrt(res.model) if f.severity == "error"] == []
    for seed, at in enumerate(((1, 3, 8, 9), (2, 5, 13, 9), (1, 3, 6, 9)) if isinstance(shape[-1], str) or
                              isinstance(shape[-2], str) else (shape,)):
        at = tuple(a if isinstance(d, str) else d for a, d in zip(at[-len(shape):], shape))
        x = _signed_nans(sprinkled(at, seed))
        (got,) = ort_run(res.model, {"x": x})
        same_non_finite(got, torch_pool(x, size))
    with pytest.raises(onnxpoolfix.UnsupportedNodeError):  # a MatMul is refused there, asked for or not
        onnxpoolfix.patch(make_leftover("avg", (1, 2, 8, 9), (5, 7), opset=opset), target="tensorrt",
                          strategy="matmul")


# ---- the weights -----------------------------------------------------------------------------------------

def _matmul_weight_sources(model: onnx.ModelProto) -> list[str]:
    made = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name for t in model.graph.initializer}
    out = []
    for n in model.graph.node:
        if n.op_type == "MatMul":
            out += [made[i].op_type if i in made else ("initializer" if i in inits else "input") for i in n.input]
    return out


@pytest.mark.parametrize("strategy,shape,size", CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_no_float_initializer_feeds_a_matmul_and_every_weight_is_fp16_exact(strategy, shape, size):
    """What quantize_dynamic quantizes is a MatMul's initializer input; what fp16 storage rounds is a float
    constant. Every MatMul here reads the data and a Div, and every float constant is an integer (a window
    length, or 0 / +-inf / the float limits of the guard), which float16 holds exactly."""
    model = onnxpoolfix.patch(make_leftover("avg", shape, size), strategy=strategy, check=False).model
    sources = _matmul_weight_sources(model)
    assert sources and "initializer" not in sources and "Div" in sources, sources
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if t.data_type == F32 and a.size and np.isfinite(a).all() and np.abs(a).max() < 65504:
            np.testing.assert_array_equal(a.astype(np.float16).astype(np.float32), a, err_msg=t.name)


def test_quantize_dynamic_leaves_the_pooling_in_float(tmp_path):
    from onnxruntime.quantization import quantize_dynamic

    shape, size = (1, 8, 17, 13), (5, 7)
    model = onnxpoolfix.patch(make_leftover("avg", shape, size), strategy="matmul").model
    onnx.save(model, tmp_path / "in.onnx")
    quantize_dynamic(tmp_path / "in.onnx", tmp_path / "q.onnx")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = ort_run(onnx.load(tmp_path / "q.onnx"), {"x": x})
    np.testing.assert_allclose(got, torch_pool(x, size), rtol=1e-5, atol=1e-6)

"""The tensorrt target's symbolic averages beside a static axis of more than 64 windows (review90): the static
axis as window sums, the symbolic ones as window Slices, in one file exact at every size against torch and a
numpy loop over the window formula, NaN and both infinities kept in their windows; no MatMul or If; the
TensorRT lint clean. Before, no lowering applied (window_slices cut at most 64 windows an axis, window_sum took
no symbolic axis) and the file was refused."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.tensorrt import lint_tensorrt

torch = pytest.importorskip("torch")


def loop_mean(x: np.ndarray, out_sizes) -> np.ndarray:
    """Adaptive average of x's last axes by start = floor(i*n/m), end = ceil((i+1)*n/m), one window at a time."""
    k = len(out_sizes)
    ins = x.shape[-k:]
    y = np.empty(x.shape[:-k] + tuple(out_sizes), dtype=np.float64)
    for idx in np.ndindex(*out_sizes):
        sl = tuple(slice((i * n) // m, -(-((i + 1) * n) // m)) for i, n, m in zip(idx, ins, out_sizes))
        y[(...,) + idx] = x[(...,) + sl].astype(np.float64).reshape(x.shape[:-k] + (-1,)).mean(-1)
    return y


def inputs(shape, seed: int):
    """A random input, then the same with a NaN, a -NaN, +inf, -inf, and +inf beside -inf (one window's NaN)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    yield x
    for values in ([np.nan], [-np.nan], [np.inf], [-np.inf], [np.inf, -np.inf]):
        v = x.copy().reshape(-1)
        start = int(rng.integers(0, v.size - len(values) + 1))
        v[start:start + len(values)] = values
        yield v.reshape(shape)


def assert_same(got: np.ndarray, want: np.ndarray):
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("in_shape,size,runs,opset", [
    (["N", "C", "H", 200], (1, 70), [(1, 2, 5, 200), (2, 1, 1, 200)], 17),
    (["N", "C", 200, "W"], (70, 6), [(1, 2, 200, 9), (2, 1, 200, 3), (1, 1, 200, 13)], 17),
    (["N", "C", "H", 10], (5, 100), [(1, 2, 9, 10), (2, 1, 3, 10)], 13),
    (["N", "C", "H", 130], (7, 65), [(1, 2, 9, 130), (2, 1, 3, 130)], 10),
    (["N", "C", "D", 7, 100], (3, 2, 66), [(1, 2, 5, 7, 100), (1, 1, 2, 7, 100)], 18),
    (["C", "H", 100], (3, 66), [(2, 5, 100), (1, 1, 100)], 21),
])
def test_static_axis_beyond_64_windows_beside_symbolic_ones(in_shape, size, runs, opset):
    result = onnxpoolfix.patch(make_leftover("avg", in_shape, size, opset=opset), target="tensorrt")
    ops = {n.op_type for n in result.model.graph.node}
    assert not ops & {"MatMul", "If", "Gemm"}
    assert [f for f in lint_tensorrt(result.model) if f.severity == "error"] == []
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")
    for shape in runs:
        for x in inputs(shape, seed=sum(shape)):
            got = sess.run(None, {"x": x})[0]
            assert_same(got, loop_mean(x, size).astype(np.float32))
            assert_same(got, fn(torch.from_numpy(x), size).numpy())


def test_symbolic_axis_beyond_64_windows_stays_refused_with_the_remedy():
    """A symbolic axis of 65 windows has no constant window table: refused, the remedy binding the sizes."""
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as err:
        onnxpoolfix.patch(make_leftover("avg", ["N", "C", "H", "W"], (65, 3), opset=17), target="tensorrt")
    assert err.value.exit_code == 4 and "input_shapes" in err.value.hint


def test_portable_target_keeps_its_refusal():
    """ncnn has no Gather layer: the portable target does not take window sums beside symbolic axes."""
    with pytest.raises(onnxpoolfix.UnsupportedNodeError):
        onnxpoolfix.patch(make_leftover("avg", ["N", "C", "H", 200], (3, 70), opset=17), target="portable")

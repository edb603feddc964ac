"""Every benchmark case's patched model passes the TensorRT lint, for both targets.

(The fixtures are linted in tests/inspection/test_inspect.py and tests/lowering/test_dynamic.py.) With --target tensorrt no
lowering may emit anything the parser rejects; the default onnxruntime target may add an If (the lazy
NaN/inf guard of max pooling), which the parser also accepts.
"""
from __future__ import annotations

import pytest
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.tensorrt import lint_tensorrt

# the shapes of benchmarks/bench.py's cases (kind, input shape, output size)
BENCH_CASES = [
    ("avg", (1, 2048, 9, 9), (7, 7)), ("avg", (1, 512, 10, 10), (7, 7)), ("avg", (8, 256, 64, 64), (5, 7)),
    ("avg", (1, 512, 64, 64), (3, 3)), ("avg", (1, 512, 64, 64), (6, 6)), ("avg", (1, 64, 4, 5), (6, 6)),
    ("avg", (1, 256, 33, 33), (8, 8)), ("avg", (32, 64, 128, 128), (3, 3)), ("avg", (1, 3, 1024, 1024), (7, 7)),
    ("avg", (1, 2048, 7, 7), (1, 1)), ("avg", (16, 256, 1000), (30,)), ("avg", (1, 64, 17, 17, 17), (4, 4, 4)),
    ("max", (1, 512, 10, 10), (7, 7)), ("max", (8, 256, 64, 64), (5, 7)), ("max", (1, 256, 33, 33), (8, 8)),
]


@pytest.mark.parametrize("target", ["tensorrt", "onnxruntime"])
@pytest.mark.parametrize("kind,shape,size", BENCH_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_benchmark_models_pass_the_tensorrt_lint(kind, shape, size, target):
    model = make_leftover(kind, shape, size)
    patched = onnxpoolfix.patch(model, check=False, target=target).model
    errors = [f for f in lint_tensorrt(patched) if f.severity == "error"]
    assert errors == [], errors
    if target == "tensorrt":
        assert not any(n.op_type in ("If", "Loop", "Scan") for n in patched.graph.node)


def test_tensorrt_indices_do_not_rest_on_argmax_ties():
    """TensorRT imports ArgMax as TopK(k=1), which documents no order among equal values; with indices the
    tensorrt target picks the first maximum by position instead. Exact on tie-heavy input (ReLU zeros,
    0.0/-0.0, all -inf windows, NaN) in onnxruntime."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from helpers import make_leftover

    import onnxpoolfix
    from onnxpoolfix import reference

    m = make_leftover("max", [2, 3, 11, 13], (4, 5), indices="output")
    patched = onnxpoolfix.patch(m, target="tensorrt", strategy="argmax").model
    assert "ArgMax" not in {n.op_type for n in patched.graph.node}
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, (2, 3, 11, 13)).astype(np.float32)  # ties everywhere
    x[0, 0, :3, :3] = -np.inf
    x[0, 1][x[0, 1] == 0] = -0.0
    x[1, 2, 5, 6] = np.nan
    sess = ort.InferenceSession(patched.SerializeToString(), providers=["CPUExecutionProvider"])
    y, idx = sess.run(None, {"x": x})
    want_y, want_idx = reference.adaptive_max_pool(x, (4, 5))
    np.testing.assert_array_equal(idx, want_idx)
    assert np.array_equal(y, want_y, equal_nan=True)
    assert np.array_equal(np.signbit(y), np.signbit(want_y))
    onnx.checker.check_model(patched, full_check=True)

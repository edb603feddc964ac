"""The separable MatMul's last-axis pass on a large float32 input with fewer than 8 output columns: its
matrix zero-padded to 8 columns, then a Slice back (lowering/steps.MatMulStep.at; MLAS runs a 5- or
7-column GEMM slowly). The result must stay exact: against the numpy reference and torch, batch > 1, and
a broken Slice (one column too many) must show."""
from __future__ import annotations

import numpy as np
import onnx
from helpers import make_leftover, ort_run
from onnx import numpy_helper

import onnxpoolfix
from onnxpoolfix import reference

SHAPE, SIZE = (4, 32, 256, 256), (5, 7)  # 32 MB: past CACHE_BYTES


def _patched(shape=SHAPE, size=SIZE, **kw):
    model = make_leftover("avg", list(shape), size)
    return onnxpoolfix.patch(model, strategy="matmul", check=False, **kw).model


def test_large_input_is_padded_and_exact(torch_mod):
    model = _patched()
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["MatMul", "Slice", "MatMul"]
    (padded,) = [numpy_helper.to_array(t) for t in model.graph.initializer if "padded" in t.name]
    assert padded.shape == (256, 8) and not padded[:, 7:].any()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    (y,) = ort_run(model, {"x": x})
    want = reference.adaptive_avg_pool(x, SIZE)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    got_torch = torch_mod.nn.functional.adaptive_avg_pool2d(torch_mod.from_numpy(x), SIZE).numpy()
    np.testing.assert_allclose(y, got_torch, rtol=1e-5, atol=1e-6)


def test_small_inputs_and_other_dtypes_are_not_padded():
    assert "Slice" not in {n.op_type for n in _patched((1, 8, 64, 64)).graph.node}
    from onnx import TensorProto

    model = make_leftover("avg", list(SHAPE), SIZE, dtype=TensorProto.DOUBLE)
    patched = onnxpoolfix.patch(model, strategy="matmul", check=False).model
    assert "Slice" not in {n.op_type for n in patched.graph.node}


def test_a_wrong_slice_is_caught():
    """Broken on purpose: the Slice keeps the zero column. The output shape (and the values) are wrong."""
    model = _patched()
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    (ends,) = [t for t in bad.graph.initializer if t.name.endswith("/ends")]
    ends.CopyFrom(numpy_helper.from_array(np.array([8], np.int64), ends.name))
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    (y,) = ort_run(bad, {"x": x})
    assert y.shape != reference.adaptive_avg_pool(x, SIZE).shape

"""The separable MatMul's pass over an axis before the last whose later dims are small and static: one GEMM
of the flattened tail against ``kron(P^T, I_t)`` (lowering/steps.MatMulStep.layout), the form the dynamic
lowering uses, instead of one GEMM per plane. It must stay exact (against the numpy reference and torch,
the block form with gcd > 1 too), and a large 5- or 7-column last-axis pass is no longer zero-padded to 8
(re-measured slower, the Slice back included)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_leftover, ort_run
from onnx import numpy_helper

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.lowering.steps import MatMulStep

pytestmark = pytest.mark.usefixtures("bare_matmuls")  # the layouts' matrices and op sequences, unguarded


def _patched(shape, size, **kw):
    model = make_leftover("avg", list(shape), size)
    return onnxpoolfix.patch(model, strategy="matmul", check=False, **kw).model


def _inits(model):
    return {t.name.rsplit("/", 1)[-1]: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_second_axis_is_one_gemm_against_the_kron_matrix(torch_mod):
    shape, size = (2, 16, 64, 64), (5, 7)
    model = _patched(shape, size)
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Reshape", "MatMul", "Reshape"]
    kron = _inits(model)["kron_matrix_t"]
    assert kron.shape == (64 * 7, 5 * 7)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(y, reference.adaptive_avg_pool(x, size), rtol=1e-5, atol=1e-6)
    want = torch_mod.nn.functional.adaptive_avg_pool2d(torch_mod.from_numpy(x), size).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,size,layout", [
    ((2, 8, 24, 24), (16, 3), (8, True)),  # 24 -> 16 after 24 -> 3: 8 periods of 3 -> 2, tail 3
    ((3, 4, 100, 30), (30, 3), (10, True)),  # 100 -> 30: 10 periods of 10 -> 3
    ((1, 8, 17, 17, 17), (4, 4, 4), None),  # 3D: the middle axis with tail 4, the first with tail 16
])
def test_kron_forms_are_exact(shape, size, layout):
    model = _patched(shape, size)
    if layout is not None:  # the H pass, on the W-pooled tensor
        pooled = shape[:-1] + size[-1:]
        assert MatMulStep(len(shape) - 2, shape[-2], size[-2]).layout(pooled) == layout
    assert any(n.endswith("kron_matrix_t") for n in (t.name for t in model.graph.initializer))
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (y,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(y, reference.adaptive_avg_pool(x, size), rtol=1e-5, atol=1e-6)


def test_batch_of_zero_and_symbolic_batch():
    """The Reshapes keep the leading dims with 0 and spell the tail out: a batch of 0 and a symbolic batch run."""
    size = (5, 7)
    model = _patched(("N", 64, 20, 20), size)
    assert any(t.name.endswith("kron_matrix_t") for t in model.graph.initializer)
    for n in (0, 2):
        x = np.random.default_rng(2).standard_normal((n, 64, 20, 20)).astype(np.float32)
        (y,) = ort_run(model, {"x": x})
        np.testing.assert_allclose(y, reference.adaptive_avg_pool(x, size), rtol=1e-5, atol=1e-6)


def test_a_large_narrow_last_axis_pass_is_not_padded():
    model = _patched((4, 32, 256, 256), (5, 7))
    assert "Slice" not in {n.op_type for n in model.graph.node}
    assert _inits(model)["pool_matrix_t"].shape == (256, 7)


def test_a_wrong_kron_order_is_caught():
    """Broken on purpose: kron(I_t, P^T) instead of kron(P^T, I_t) (same shape, wrong layout)."""
    shape, size = (1, 64, 16, 16), (5, 7)
    model = _patched(shape, size)
    (k,) = [t for t in model.graph.initializer if t.name.endswith("kron_matrix_t")]
    good = numpy_helper.to_array(k)
    pt = good[::7, ::7]  # P^T, the kron's block at every 7th row and column
    k.CopyFrom(numpy_helper.from_array(np.kron(np.eye(7, dtype=pt.dtype), pt), k.name))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    (y,) = ort_run(model, {"x": x})
    assert not np.allclose(y, reference.adaptive_avg_pool(x, size), rtol=1e-5, atol=1e-6)

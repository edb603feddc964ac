"""The separable first maximum (lowering/first_max.py): one of the argmax lowering's two constructions for
inputs with no NaN, forced here (the other, every window at once, has tests/lowering/test_first_max_windows.py).
Its claims, each checked against torch and the numpy reference, bit for bit:

- reduced innermost axis first it is torch's first maximum in row-major order (tie data: the wrong order would
  give the first maximum in column-major order);
- a tie of 0.0 and -0.0 gives torch's value (the first), which rests on onnxruntime's ReduceMax keeping the
  first of equal values;
- kept axes (output length = input length) mixed with pooled ones, 1D to 3D, batch > 1, no batch, upsampling;
- values only (the planner may take it for max pooling without indices) matches too.
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_bits_equal, finite_branch_construction, force_first_max, make_leftover, ort_run
from onnx import TensorProto

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.graph import nodes_deep

CASES = [
    ((2, 3, 10, 10), (7, 7)),
    ((1, 4, 33, 33), (8, 8)),
    ((2, 3, 13, 17), (5, 6)),
    ((3, 5, 17, 6), (17, 4)),  # H kept, W pooled
    ((3, 5, 6, 17), (4, 17)),  # H pooled, W kept
    ((2, 2, 6, 7, 9), (6, 3, 9)),  # 3D: only the middle axis pooled
    ((2, 2, 9, 7, 6), (4, 7, 2)),  # 3D: the middle axis kept
    ((1, 2, 5, 6, 7), (2, 4, 3)),
    ((3, 2, 11), (4,)),
    ((2, 11, 9), (4, 4)),  # no batch: [C, H, W]
    ((1, 2, 4, 5), (6, 6)),  # upsampling: windows of 1 and 2
    ((2, 3, 7, 1), (3, 1)),
    # uniform innermost windows (no padding), with or without outer axes
    ((2, 3, 12), (4,)),  # 1D: no outer axis
    ((2, 3, 5, 12), (5, 4)),  # H kept
    ((2, 3, 11, 12), (4, 4)),  # H pooled, non-uniform
]


def _ids(c):
    return f"{'x'.join(map(str, c[0]))}->{'x'.join(map(str, c[1]))}"


def _torch_pool(torch, x, size):
    pool = {1: torch.nn.functional.adaptive_max_pool1d, 2: torch.nn.functional.adaptive_max_pool2d,
            3: torch.nn.functional.adaptive_max_pool3d}[len(size)]
    return pool(torch.from_numpy(x), size, return_indices=True)


@pytest.fixture(autouse=True)
def _separable(monkeypatch):
    force_first_max(monkeypatch, "separable")


def _patched(shape, size, indices="output"):
    model = make_leftover("max", list(shape), size, indices=indices)
    model = onnxpoolfix.patch(model, strategy="argmax", check=False).model  # the test, not the tool, compares
    (if_node,) = [n for n in model.graph.node if n.op_type == "If"]
    then_branch = next(a.g for a in if_node.attribute if a.name == "then_branch")
    assert "ArgMax" not in {n.op_type for n in nodes_deep(then_branch.node)}
    assert finite_branch_construction(model) == "separable"
    return model


@pytest.mark.parametrize("shape,size", CASES, ids=[_ids(c) for c in CASES])
def test_ties_give_torchs_first_maximum(shape, size, torch_mod):
    model = _patched(shape, size)
    rng = np.random.default_rng(7)
    for x in (rng.integers(-1, 2, shape).astype(np.float32),  # equal maxima nearly everywhere
              np.zeros(shape, np.float32),  # every element ties
              rng.standard_normal(shape).astype(np.float32)):
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = _torch_pool(torch_mod, x, size)
        assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
        assert_bits_equal(got_v, want_v.numpy(), "values vs torch")
        ref_v, ref_i = reference.adaptive_max_pool(x, size)
        assert_bits_equal(got_i, ref_i, "indices vs reference")


@pytest.mark.parametrize("shape,size", CASES[:4] + CASES[-3:], ids=[_ids(c) for c in CASES[:4] + CASES[-3:]])
def test_a_tie_of_signed_zeros_keeps_the_first(shape, size, torch_mod):
    model = _patched(shape, size)
    rng = np.random.default_rng(3)
    x = np.where(rng.random(shape) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    x[..., ::3] *= -1  # both orders of the pair occur
    got_v, got_i = ort_run(model, {"x": x})
    want_v, want_i = _torch_pool(torch_mod, x, size)
    assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
    assert_bits_equal(got_v, want_v.numpy(), "values vs torch (sign of zero)")


@pytest.mark.parametrize("shape,size", CASES[:3], ids=[_ids(c) for c in CASES[:3]])
def test_values_only(shape, size, torch_mod):
    model = _patched(shape, size, indices="none")
    x = np.random.default_rng(5).integers(-2, 3, shape).astype(np.float32)
    (got,) = ort_run(model, {"x": x})
    assert_bits_equal(got, _torch_pool(torch_mod, x, size)[0].numpy())


def test_the_innermost_axis_goes_first():
    """Column-major ties would differ: a window whose first maximum in row-major order is not the first in
    column-major order, e.g. [[0, 1], [1, 0]] (row-major: (0, 1), column-major: (1, 0))."""
    x = np.array([[0, 1], [1, 0]], np.float32).reshape(1, 1, 2, 2)
    model = _patched((1, 1, 2, 2), (1, 1))
    _, got_i = ort_run(model, {"x": x})
    assert int(got_i.reshape(-1)[0]) == 1


def test_float16(torch_mod):
    shape, size = (2, 3, 10, 9), (4, 5)
    model = make_leftover("max", list(shape), size, indices="output", dtype=TensorProto.FLOAT16)
    model = onnxpoolfix.patch(model, strategy="argmax", check=False).model
    x = np.random.default_rng(2).integers(-2, 3, shape).astype(np.float16)
    got_v, got_i = ort_run(model, {"x": x})
    want_v, want_i = _torch_pool(torch_mod, x.astype(np.float32), size)
    assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
    assert_bits_equal(got_v.astype(np.float32), want_v.numpy())


@pytest.mark.parametrize("shape", [["N", 3, "H", 9], ["N", 3, 9, "W"], [2, "C", "H", "W"]])
def test_symbolic_axes_mixed_with_static_ones(shape, torch_mod):
    """The dynamic lowering's tables: runtime for a symbolic axis, constant for a static one (one file)."""
    size = (4, 5)
    model = onnxpoolfix.patch(make_leftover("max", shape, size, indices="output"), check=False).model
    rng = np.random.default_rng(11)
    for h, w in [(9, 9), (4, 2), (13, 17), (1, 5), (6, 1)]:
        sizes = {"N": 2, "C": 3, "H": h, "W": w}
        concrete = [sizes.get(d, d) for d in shape]  # a static dim stays what it is
        x = rng.integers(-1, 2, concrete).astype(np.float32)
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = _torch_pool(torch_mod, x, size)
        assert_bits_equal(got_i, want_i.numpy(), f"indices vs torch at {concrete}")
        assert_bits_equal(got_v, want_v.numpy(), f"values vs torch at {concrete}")

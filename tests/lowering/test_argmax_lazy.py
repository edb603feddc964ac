"""The argmax lowering's If-guarded form (onnxruntime target): finite inputs take the separable first maximum
(lowering/first_max.py) or every window at once (lowering/first_max_windows.py), each forced here, others
the NaN-aware construction (lowering/argmax.py). Both branches must give
torch's values and indices bit for bit: finite data with ties (the fast branch decides), NaN and -inf (the
exact branch), non-uniform windows, sizes of 1, batch > 1, float16; and a corrupted fast branch (the last
of equal maxima) must be caught."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import (
    assert_bits_equal,
    constant_tensors,
    finite_branch_construction,
    force_first_max,
    make_leftover,
    ort_run,
)
from onnx import TensorProto

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.graph import nodes_deep

CASES = [
    ((2, 3, 10, 10), (7, 7)),  # non-uniform on both axes, batch 2
    ((1, 4, 33, 33), (8, 8)),  # uniform k5 s4
    ((2, 2, 1, 9), (1, 4)),  # a size of 1 kept, the other non-uniform
    ((1, 2, 9, 1), (4, 1)),
    ((3, 2, 11), (4,)),  # 1D
    ((1, 2, 5, 6, 7), (2, 4, 3)),  # 3D
    ((1, 2, 4, 5), (6, 6)),  # non-integer upsampling (windows of 1 and 2)
]


def _ids(c):
    return f"{'x'.join(map(str, c[0]))}->{'x'.join(map(str, c[1]))}"


def _patched(shape, size, dtype=TensorProto.FLOAT):
    model = make_leftover("max", list(shape), size, indices="output", dtype=dtype)
    result = onnxpoolfix.patch(model, strategy="argmax")  # its own check runs (random and structured inputs)
    assert result.report.check_passed
    return result.model


def _ties(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).integers(-2, 3, shape).astype(dtype)  # equal maxima in most windows


@pytest.mark.parametrize("shape,size", CASES, ids=[_ids(c) for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("construction", ["separable", "whole_windows"])
def test_both_branches_match_torch(shape, size, dtype, construction, torch_mod, monkeypatch):
    torch = torch_mod
    force_first_max(monkeypatch, construction)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    model = _patched(shape, size, elem)
    ops = {n.op_type for n in nodes_deep(model.graph.node)}
    assert "If" in ops and "ArgMax" in ops
    pool = {1: torch.nn.functional.adaptive_max_pool1d, 2: torch.nn.functional.adaptive_max_pool2d,
            3: torch.nn.functional.adaptive_max_pool3d}[len(size)]
    rng = np.random.default_rng(1)
    nan = rng.standard_normal(shape).astype(dtype)
    nan.reshape(-1)[::5] = np.nan
    nan[..., :1] = -np.inf
    for x in (_ties(shape, 0, dtype), rng.standard_normal(shape).astype(dtype), nan):
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = reference.adaptive_max_pool(x, size)
        assert_bits_equal(got_v, want_v)
        assert_bits_equal(got_i, want_i, "indices")
        tv, ti = pool(torch.from_numpy(x.astype(np.float32)), size, return_indices=True)
        assert_bits_equal(got_i, ti.numpy(), "indices vs torch")
        assert_bits_equal(got_v.astype(np.float32), tv.numpy(), "values vs torch")


def test_tensorrt_target_has_no_if():
    model = make_leftover("max", [1, 2, 10, 10], (7, 7), indices="output")
    patched = onnxpoolfix.patch(model, strategy="argmax", target="tensorrt").model
    assert "If" not in {n.op_type for n in nodes_deep(patched.graph.node)}


# the finite branch's position weights, per construction, and how many it has for a 2D pool
WEIGHTS = {"separable": ("descending", 2), "whole_windows": ("reversed_position", 1)}


@pytest.mark.parametrize("construction", sorted(WEIGHTS))
def test_a_fast_branch_losing_the_first_maximum_is_caught(construction, monkeypatch):
    """Broken on purpose: the finite branch's position weights are all equal, so every maximum scores the same
    and it answers the window's first element. The values stay right; the indices differ from the reference
    (what the tool's own check compares)."""
    force_first_max(monkeypatch, construction)
    shape, size = (1, 3, 11, 13), (4, 5)
    model = _patched(shape, size)
    assert finite_branch_construction(model) == construction
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    (if_node,) = [n for n in bad.graph.node if n.op_type == "If"]
    then_branch = next(a.g for a in if_node.attribute if a.name == "then_branch")
    hint, count = WEIGHTS[construction]
    weights = {i for n in then_branch.node if n.op_type == "Mul" for i in n.input if hint in i}
    assert len(weights) == count
    for init in constant_tensors(bad):  # (an If branch writes its constants as its own Constant nodes)
        if init.name in weights:
            w = onnx.numpy_helper.to_array(init)
            init.CopyFrom(onnx.numpy_helper.from_array(np.full_like(w, w.max()), init.name))
    x = _ties(shape, 0)
    want_v, want_i = reference.adaptive_max_pool(x, size)
    got_v, got_i = ort_run(bad, {"x": x})
    assert_bits_equal(got_v, want_v)
    assert not np.array_equal(got_i, want_i)
    from onnxpoolfix.check import check_patched
    from onnxpoolfix.frontends.leftovers import find_pool_nodes
    from onnxpoolfix.graph.shapes import model_opset, resolve_specs

    base = make_leftover("max", list(shape), size, indices="output")
    specs = resolve_specs(base, find_pool_nodes(base.graph), opset=model_opset(base), target="onnxruntime")
    (result,) = check_patched(bad, specs).values()
    assert not result.passed

"""The argmax lowering runs in onnx's own ReferenceEvaluator (issue 12, minor): its GatherElements with
axis=-1 fails there, so the lowering writes every axis non-negative. Values and indices must equal the numpy
reference bit for bit, NaN and all -inf windows included."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_leftover
from onnx.reference import ReferenceEvaluator

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.graph import nodes_deep

CASES = [((1, 2, 9, 10), (4, 3)), ((2, 3, 7), (3,)), ((1, 1, 5, 6, 7), (2, 4, 3)), ((3, 11), (4,))]


@pytest.mark.parametrize("in_shape,out_size", CASES, ids=[f"{'x'.join(map(str, a))}->{'x'.join(map(str, b))}"
                                                          for a, b in CASES])
@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_argmax_lowering_runs_in_the_reference_evaluator(in_shape, out_size, target):
    model = make_leftover("max", in_shape, out_size, indices="output")
    patched = onnxpoolfix.patch(model, strategy="argmax", target=target).model
    for n in nodes_deep(patched.graph.node):
        for a in n.attribute:
            if a.name in ("axis", "axes"):
                values = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints)
                assert min(values) >= 0, f"{n.op_type} {a.name}={values}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal(in_shape).astype(np.float32)
    x.reshape(-1)[::7] = np.nan
    x[..., :2] = -np.inf
    got_values, got_indices = ReferenceEvaluator(patched).run(None, {"x": x})
    want_values, want_indices = reference.adaptive_max_pool(x, out_size)
    np.testing.assert_array_equal(got_values, want_values)
    np.testing.assert_array_equal(got_indices, want_indices)

"""The max-pooling fixtures, patched for each target, on the structured inputs of tests/support/structured_inputs.py
(ramps, ties, NaN, all -inf windows) in onnxruntime, bit for bit against onnxpoolfix.reference: the CPU half
of tests/test_tensorrt_engine.py (which runs the same inputs through TensorRT), in the fast suite."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_bits_equal, ort_run
from structured_inputs import structured_inputs

import onnxpoolfix
from onnxpoolfix import reference

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures"
MAX_CASES = [c for c in json.loads((FIXTURE_DIR / "manifest.json").read_text())["cases"] if c["kind"] == "max"]


def _concrete(dims):
    return tuple(d if isinstance(d, int) and d > 0 else 13 for d in dims)


@pytest.mark.parametrize("target", ["tensorrt", "onnxruntime"])
@pytest.mark.parametrize("case", MAX_CASES, ids=[c["name"] for c in MAX_CASES])
def test_max_fixture_on_structured_inputs(case, target):
    model = onnx.load(str(FIXTURE_DIR / case["file"]))
    patched = onnxpoolfix.patch(model, target=target, check=False).model
    (graph_input,) = [i for i in model.graph.input]
    pool = case["pools"][0]
    assert pool["inputs"][0] == graph_input.name  # every max fixture pools its input: the reference applies
    shape = _concrete([d.dim_value or d.dim_param for d in graph_input.type.tensor_type.shape.dim])
    dtype = onnx.helper.tensor_dtype_to_np_dtype(graph_input.type.tensor_type.elem_type)
    names = [o.name for o in patched.graph.output]
    xs = structured_inputs(shape, dtype, finite=False)
    assert {"all equal", "nan", "-inf windows"} <= set(xs)
    for label, x in xs.items():
        got = dict(zip(names, ort_run(patched, {graph_input.name: x})))
        values, indices = reference.adaptive_max_pool(x, case["output_size"])
        assert_bits_equal(got[pool["outputs"][0]], values.astype(x.dtype), f"{label}: values")
        if pool["outputs"][1] in got:
            assert_bits_equal(got[pool["outputs"][1]], indices, f"{label}: indices")
        elif "indices_f" in got:  # max2d_indices_consumed: the indices through a Cast to float
            np.testing.assert_array_equal(got["indices_f"], indices.astype(got["indices_f"].dtype), label)

"""The portable target's static max pooling joined once (lowering/window_grid.py), in files that accept more than
one size: symbolic batch and channels beside static pooled axes, unbatched inputs, and 3-D pools not cut into
planes. Each file is run at several batches and channel counts in onnxruntime and compared bit for bit with torch
on inputs with NaN, +-inf, windows of -inf alone, -FLT_MAX and -0.0."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import assert_bits_equal, make_leftover, non_finite_max_input
from onnx import TensorProto

import onnxpoolfix

torch = pytest.importorskip("torch")

CASES = [  # (input shape, output size, opset, dtype): non-square, odd
    (("N", 7, 9, 11), (5, 4), 17, TensorProto.FLOAT),
    (("N", "C", 13, 7), (5, 3), 11, TensorProto.FLOAT),
    (("N", 7, 5, 7, 9), (2, 3, 4), 13, TensorProto.FLOAT),  # symbolic N: no planes, one grid over three axes
    (("N", 7, 9, 11), (5, 4), 18, TensorProto.DOUBLE),  # float64: ReduceMax windows from opset 18 too
    ((7, 9, 11), (5, 4), 17, TensorProto.FLOAT),  # unbatched
]
IDS = ["2d", "2d_n_c", "3d_symbolic_n", "2d_float64_opset18", "unbatched"]


@pytest.mark.parametrize("shape,size,opset,dtype", CASES, ids=IDS)
def test_one_join_at_every_batch_and_channel_count(shape, size, opset, dtype):
    model = onnxpoolfix.patch(make_leftover("max", shape, size, opset=opset, dtype=dtype), target="portable", check=False).model
    ops = [n.op_type for n in model.graph.node]
    assert "Reshape" in ops and "Gather" not in ops  # the form this is about
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np_dtype = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    pool = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")
    batched = shape[0] == "N"
    for n, c in [(1, 7), (3, 7), (2, 9)]:
        dims = tuple(n if d == "N" else c if d == "C" else d for d in shape)
        if dims[-len(size) - 1] != c and c != 7:
            continue  # the channels are static in this file
        x = non_finite_max_input(dims if batched else (1, *dims), seed=n + c)
        x = (x if batched else x[0]).astype(np_dtype)
        assert_bits_equal(session.run(None, {"x": x})[0], pool(torch.from_numpy(x), size).numpy())

"""A batch of 0 at run time (a symbolic batch, an empty request): the static lowerings' Reshapes spell the
flattened lengths out instead of -1, which Reshape cannot determine where a copied dim is 0."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import make_leftover

import onnxpoolfix

# (kind, input shape, output size, indices, strategy)
CASES = [
    ("avg", ["N", 3, 10, 9], [4, 5], "none", "kronecker"),
    ("avg", ["N", 3, 12, 9], [8, 9], "none", "block_pool"),
    ("max", ["N", 3, 12, 9], [8, 9], "none", "block_pool"),
    ("avg", ["N", 3, 10, 9], [4, 5], "none", "matmul"),
    ("max", ["N", 3, 10, 9], [4, 5], "output", "argmax"),
    ("max", ["N", 3, "H", "W"], [4, 5], "output", "dynamic"),
    ("max", ["N", 3, "H", "W"], [4, 5], "none", "dynamic"),
    # 1-D and 3-D max with indices (review35: the result reshaped to [m..., lead...] read the 0 batch as "copy the
    # input's dim", which was not 0 there, or past the input's rank)
    ("max", ["N", 3, 7], [3], "output", "argmax"),
    ("max", ["N", 3, "W"], [3], "output", "dynamic"),
    ("max", ["N", 3, 5, 4, 6], [2, 3, 2], "output", "argmax"),
    ("max", ["N", 3, "D", "H", "W"], [2, 3, 2], "output", "dynamic"),
    ("max", ["N", 3, 5, 4, 6], [2, 3, 2], "none", "argmax"),
]


#: the tensorrt target writes no MatMul average (TF32, NaN): its own choice there
MATMUL_AVERAGES = ("kronecker", "matmul")


@pytest.mark.parametrize("kind,shape,out,indices,strategy", CASES)
@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_a_batch_of_zero_gives_an_empty_output(kind, shape, out, indices, strategy, target):
    model = make_leftover(kind, shape, out, indices=indices)
    if target == "tensorrt" and strategy in MATMUL_AVERAGES:
        strategy = "auto"
    result = onnxpoolfix.patch(model, strategy=strategy, target=target, check=False)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(result.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.zeros([0 if d == "N" else 10 if d == "H" else 9 if d == "W" else 5 if d == "D" else d for d in shape],
                 np.float32)
    outs = sess.run(None, {"x": x})
    assert len(outs) == (2 if indices == "output" else 1)
    for o in outs:
        assert o.shape == (0, 3, *out)

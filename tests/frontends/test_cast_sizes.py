"""A leftover's constant output size read through a Cast is the size the Cast gives, as ONNX casts: 300 cast to
uint8 is 44, 2.7 cast to int64 is 2 (review80: frontends/leftovers.py read Cast as Identity, and a 10x10 map went
out pooled to 300x300 with exit 0 where the file's own arithmetic says 44x44). Expected values from numpy's cast,
OUT compared with torch's adaptive pooling at that size."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import ort_run
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix

torch = pytest.importorskip("torch")


def _cast_size(values, dtype, to) -> onnx.ModelProto:
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(values, dtype))),
             helper.make_node("Cast", ["c"], ["size"], to=to),
             helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["y"], domain="org.pytorch.aten")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 50, 50])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)])


@pytest.mark.parametrize("values,dtype,to,np_to", [([300, 300], np.int64, TensorProto.UINT8, np.uint8),
                                                   ([2.7, 3.2], np.float32, TensorProto.INT64, np.int64),
                                                   ([7, 5], np.int64, TensorProto.INT32, np.int32)])
def test_a_cast_output_size_is_the_cast_value(values, dtype, to, np_to):
    size = tuple(int(v) for v in np.array(values, dtype).astype(np_to))
    out = onnxpoolfix.patch(_cast_size(values, dtype, to)).model
    x = np.random.default_rng(0).standard_normal((1, 2, 50, 50)).astype(np.float32)
    (got,) = ort_run(out, {"x": x})
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), size).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

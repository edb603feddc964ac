"""The portable target's static batched 3-D pools to 1 along some or every axis (the ``global`` lowering; for max
``--strategy global``, the remedy docs/targets.md gives ncnn users): two 2-D pools between Reshapes, as the other
static 3-D pools (lowering/separable.py), not a Reduce over the 5-D tensor, which ncnn fails to load (``layer
load_param 1 mean_0 failed``; a 5-D input Mat where pnnx finds no batch; review87). tests/test_runtime_ncnn.py runs
them in ncnn; here the form and torch's values in onnxruntime, NaN and infinities included."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from helpers import (
    assert_bits_equal,
    assert_same_non_finite,
    make_leftover,
    non_finite_max_input,
    non_finite_pool_input,
)

import onnxpoolfix

torch = pytest.importorskip("torch")

TO_ONE = [((1, 6, 4, 5, 6), (1, 1, 1)), ((1, 6, 4, 5, 6), (4, 1, 1)), ((1, 6, 4, 5, 6), (1, 5, 6)),
          ((2, 6, 4, 5, 6), (1, 1, 1))]


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,size", TO_ONE, ids=["x".join(map(str, s)) + f"_n{i[0]}" for i, s in TO_ONE])
def test_no_5d_reduce_and_torchs_values(shape, size, kind, opset):
    strategy = "global" if kind == "max" else "auto"  # (the default static max takes Gathers: ncnn has none)
    patched = onnxpoolfix.patch(make_leftover(kind, shape, size, opset=opset), target="portable", strategy=strategy)
    assert [n.lowering for n in patched.report.nodes] == ["global"]
    model = onnx.shape_inference.infer_shapes(patched.model)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in list(model.graph.value_info) + list(model.graph.input)}
    pooled = [n for n in model.graph.node if n.op_type.startswith(("Reduce", "AveragePool", "MaxPool", "Slice"))]
    assert pooled and all(ranks[n.input[0]] == 4 for n in pooled), [(n.op_type, ranks[n.input[0]]) for n in pooled]
    x = non_finite_pool_input(shape) if kind == "avg" else non_finite_max_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_{kind}_pool3d")(torch.from_numpy(x), size).numpy()
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if kind == "max":
        assert_bits_equal(got, want)
    else:
        assert_same_non_finite(got, want)

"""Averages of float32 subnormal values (a random-init EfficientNet's SE squeeze pools activations near 1e-40):
every product and sum of a lowering rounds on the subnormal grid, whose fixed spacing the check's relative
tolerance never reached, so a correct patch failed its check (exit 5; onnxpoolfix.export refused the model).
The check must pass them, stay exact to a few grid steps against torch, and still catch a wrong window."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_leftover, ort_run
from onnx import helper, numpy_helper

import onnxpoolfix
from onnxpoolfix import windows as W
from onnxpoolfix.check import check_patched
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph.shapes import model_opset, resolve_specs

SCALE = 1e-40
STEP = float(np.finfo(np.float32).smallest_subnormal)


def _scaled_leftover(shape, size, dynamic=False):
    """x -> Mul(1e-40) -> adaptive_avg_pool2d: the check's random inputs reach the pool as subnormals."""
    m = make_leftover("avg", list(shape), size)
    g = m.graph
    for n in g.node:
        n.input[:] = ["xs" if i == "x" else i for i in n.input]
    g.initializer.append(numpy_helper.from_array(np.array(SCALE, dtype=np.float32), "scale"))
    g.node.insert(0, helper.make_node("Mul", ["x", "scale"], ["xs"], name="scale_mul"))
    if dynamic:
        for a, name in ((2, "H"), (3, "W")):
            d = g.input[0].type.tensor_type.shape.dim[a]
            d.Clear()
            d.dim_param = name
        del g.output[0].type.tensor_type.shape.dim[:]
    onnx.checker.check_model(m)
    return m


def _windows_matrix(n, m, windows):
    p = np.zeros((m, n))
    for i, (a, b) in enumerate(windows):
        p[i, a:b] = 1.0 / (b - a)
    return p


@pytest.mark.parametrize("strategy, dynamic", [("auto", False), ("matmul", False), ("kronecker", False),
                                               ("mixed", False), ("dynamic", True)])
def test_subnormal_averages_pass_the_check_and_match_torch(strategy, dynamic):
    torch = pytest.importorskip("torch")
    shape, size = (1, 4, 10, 11), (3, 4)
    result = onnxpoolfix.patch(_scaled_leftover(shape, size, dynamic), strategy=strategy)
    assert result.report.check_passed
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = ort_run(result.model, {"x": x})
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x) * SCALE, size).numpy()
    assert np.count_nonzero(want) > want.size // 2  # the values are subnormal, not flushed
    lengths = max(b - a for a, b in W.windows(10, 3)) * max(b - a for a, b in W.windows(11, 4))
    assert float(np.abs(got.astype(np.float64) - want).max()) <= (lengths + 1) * STEP


def test_a_wrong_window_of_subnormal_values_still_fails_the_check():
    model = _scaled_leftover((1, 4, 10, 11), (3, 4))
    specs = resolve_specs(model, find_pool_nodes(model.graph), opset=model_opset(model), target="onnxruntime")
    patched = onnxpoolfix.patch(model, strategy="matmul").model
    (ok,) = check_patched(patched, specs).values()
    assert ok.passed
    w = list(W.windows(11, 4))
    w[1] = (w[1][0], w[1][1] + 1)  # one element longer
    hit = 0
    for t in patched.graph.initializer:
        a = numpy_helper.to_array(t)
        if "pool_matrix" in t.name and sorted(a.shape) == [4, 11]:
            p = _windows_matrix(11, 4, w)
            t.CopyFrom(numpy_helper.from_array((p.T if a.shape == (11, 4) else p).astype(a.dtype), t.name))
            hit += 1
    assert hit
    (bad,) = check_patched(patched, specs).values()
    assert not bad.passed

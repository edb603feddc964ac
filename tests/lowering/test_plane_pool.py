"""A one-axis pool over a large input runs over single-channel planes (lowering/plane_pool.py): bit for bit
against torch, NaN and -inf included, symbolic batch or channels, and only where it is meant to apply."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_leftover, ort_run
from onnx import numpy_helper

import onnxpoolfix
from onnxpoolfix.lowering import cost as C


def _pools(model):
    """(op, kernel) of every pooling node, If branches included."""
    out = []

    def walk(graph):
        for node in graph.node:
            if node.op_type in ("MaxPool", "AveragePool"):
                kernel = next(list(a.ints) for a in node.attribute if a.name == "kernel_shape")
                out.append((node.op_type, kernel))
            for a in node.attribute:
                if a.g.node:
                    walk(a.g)
    walk(model.graph)
    return out


def _reshape_targets(model):
    """The constant target shape of every Reshape, If branches included."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = []

    def walk(graph):
        local = {**inits, **{i.name: numpy_helper.to_array(i) for i in graph.initializer}}
        for node in graph.node:
            if node.op_type == "Constant":
                local[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            if node.op_type == "Reshape" and node.input[1] in local:
                out.append(local[node.input[1]].tolist())
            for a in node.attribute:
                if a.g.node:
                    walk(a.g)
    walk(model.graph)
    return out


def _torch(torch, kind, x, size):
    fn = getattr(torch.nn.functional, f"adaptive_{kind}_pool2d")
    return fn(torch.from_numpy(x), size).numpy()


@pytest.fixture
def small_cache(monkeypatch):
    """Every input counts as out of cache, so small odd shapes take the planes form."""
    monkeypatch.setattr(C, "CACHE_BYTES", 0)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("in_shape,size,run_n,kernel", [
    ((2, 3, 13, 17), (13, 4), 2, [5]),  # W only: 17 -> 4 is k5 s4, a 1D pool over rows
    ((2, 3, 13, 17), (6, 17), 2, [3, 1]),  # H only: 13 -> 6 is k3 s2, [N*C, 1, H, W]
    (("n", 3, 9, 10), (9, 3), 3, [4]),  # symbolic batch: the way back keeps C, N is -1
    ((2, "c", 7, 6), (3, 6), 5, [3, 1]),  # symbolic channels
])
def test_bit_exact_against_torch(torch_mod, small_cache, kind, in_shape, size, run_n, kernel):
    checked = isinstance(in_shape[1], int)  # the tool's check picks sizes for a symbolic batch, not channels
    res = onnxpoolfix.patch(make_leftover(kind, in_shape, size), strategy="pool", check=checked)
    assert res.report.check_passed or not checked
    assert [k for _, k in _pools(res.model)] == [kernel] * len(_pools(res.model)) and _pools(res.model)
    shape = tuple(run_n if not isinstance(d, int) else d for d in in_shape)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    feeds = [x]
    if kind == "max":  # NaN, -inf and -0.0 through the If-guarded wrapper's exact branch
        spiked = x.copy()
        spiked[0, 0, 1, 2] = np.nan
        spiked[-1, -1, ..., -1] = -np.inf
        feeds += [spiked, np.full(shape, -np.inf, np.float32), -np.zeros(shape, np.float32)]
    for xx in feeds:
        (y,) = ort_run(res.model, {"x": xx})
        assert y.tobytes() == _torch(torch_mod, kind, xx, size).tobytes()


def test_only_one_axis_kernels_large_inputs_and_onnxruntime(small_cache, monkeypatch):
    both = onnxpoolfix.patch(make_leftover("avg", (1, 4, 12, 12), (4, 4)), strategy="pool", check=False)
    assert _pools(both.model) == [("AveragePool", [3, 3])] and not _reshape_targets(both.model)
    trt = onnxpoolfix.patch(make_leftover("avg", (1, 4, 12, 12), (12, 4)), strategy="pool", check=False,
                            target="tensorrt")
    assert _pools(trt.model) == [("AveragePool", [1, 3])] and not _reshape_targets(trt.model)
    both_symbolic = onnxpoolfix.patch(make_leftover("avg", ("n", "c", 12, 12), (12, 4)), strategy="pool", check=False)
    assert _pools(both_symbolic.model) == [("AveragePool", [1, 3])]  # no way back without N or C
    monkeypatch.setattr(C, "CACHE_BYTES", 16 << 20)
    small = onnxpoolfix.patch(make_leftover("avg", (1, 4, 12, 12), (12, 4)), strategy="pool", check=False)
    assert _pools(small.model) == [("AveragePool", [1, 3])]
    planes = onnxpoolfix.patch(make_leftover("avg", (8, 256, 64, 64), (64, 7)), strategy="pool", check=False)
    assert _pools(planes.model) == [("AveragePool", [10])]
    assert _reshape_targets(planes.model) == [[-1, 1, 64], [8, 256, 64, 7]]


def test_the_large_max_pools_its_uniform_axis_over_rows(torch_mod):
    """8x256x64x64 -> 5x7 (32 MB): W (k10 s9) as a 1D MaxPool over rows, H by its window Gather (measured
    1.3-1.6x faster than pool_cover's two-axis MaxPool, benchmarks/RESULTS.md); exact."""
    res = onnxpoolfix.patch(make_leftover("max", (8, 256, 64, 64), (5, 7)), check=False)
    assert res.report.nodes[0].lowering == "window_gather"
    assert {tuple(k) for _, k in _pools(res.model)} == {(10,)}
    x = np.random.default_rng(2).standard_normal((8, 256, 64, 64)).astype(np.float32)
    (y,) = ort_run(res.model, {"x": x})
    assert y.tobytes() == _torch(torch_mod, "max", x, (5, 7)).tobytes()

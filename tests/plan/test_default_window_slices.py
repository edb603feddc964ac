"""The default target's averages: window Slices (no weights, no If) where they measure faster than the MatMuls in
onnxruntime (large planes), the MatMuls on small planes (issue 33; benchmarks/RESULTS.md, "The default target's
choice between MatMul and window Slices"). The choice is read off the written graph's ops; each file is compared
with torch itself, a NaN, a +inf, a -inf and a +inf beside a -inf placed in one window each."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_avg_close, make_leftover, ort_run

import onnxpoolfix

F = torch.nn.functional
POOL = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}

#: (input shape, output size): window Slices measured faster (0.42x-0.84x the MatMul: RESULTS.md)
SLICES = [((1, 3, 1024, 1024), (7, 7)), ((1, 64, 224, 224), (6, 6)), ((1, 256, 1000), (7,)),
          ((4, 3, 1024, 1024), (7, 7))]  # (the last: 7 MB a window's copy, under the read-back's 8 MB)
#: ... and slower where one window's copy is over 8 MB: the ReduceMean reads it back from memory (batched large
#: inputs; the Slices measured 1.2x-3.2x the MatMul chosen since: RESULTS.md, "window copies out of cache")
OUT_OF_CACHE = [((8, 256, 64, 64), (3, 3)), ((2, 64, 256, 256), (3, 3))]
#: ... and slower (1.2x-3.4x; one channel of 1024x1024: 8x-23x, onnxruntime's reduction over a leading axis)
MATMUL = [((1, 512, 8, 9), (5, 7)), ((1, 64, 17, 13), (5, 7)), ((1, 512, 10, 10), (7, 7)),
          ((1, 64, 17, 17, 17), (5, 5, 5)), ((1, 1, 1024, 1024), (7, 7)), ((1, 64, 100), (7,))]


def ops(model) -> set[str]:
    out = set()
    stack = [model.graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            out.add(n.op_type)
            stack += [a.g for a in n.attribute if a.type == a.GRAPH]
    return out


def non_finite_input(shape) -> np.ndarray:
    """Random numbers with a NaN, a +inf, a -inf and a +inf beside a -inf at the first, last, middle and
    quarter points of the pooled axes (windows are small against the axes: each reaches windows of its own)."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    first, last, spatial = (0, 0), (shape[0] - 1, shape[1] - 1), shape[2:]
    x[first + tuple(0 for _ in spatial)] = np.nan
    x[first + tuple(n - 1 for n in spatial)] = np.inf
    x[last + tuple(n // 2 for n in spatial)] = -np.inf
    x[last + tuple(n // 4 for n in spatial)] = np.inf
    x[last + tuple(n // 4 + 1 for n in spatial)] = -np.inf
    return x


def check_against_torch(model, shape, size) -> None:
    for x in (np.random.default_rng(1).standard_normal(shape).astype(np.float32), non_finite_input(shape)):
        (got,) = ort_run(model, {"x": x})
        want = POOL[len(size)](torch.from_numpy(x), size).numpy()
        with np.errstate(invalid="ignore"):  # inf - inf in the helper, where both are the same inf
            assert_avg_close(got, want, x)
        assert np.array_equal(np.isposinf(got), np.isposinf(want))
        assert np.array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(want).any() and np.isposinf(want).any() and np.isneginf(want).any()  # each one reached


@pytest.mark.parametrize("shape,size", SLICES, ids=lambda v: "x".join(map(str, v)))
def test_large_planes_take_the_window_slices(shape, size):
    res = onnxpoolfix.patch(make_leftover("avg", shape, size), check=False)
    (node,) = res.report.nodes
    written = ops(res.model)
    assert "MatMul" not in written and "If" not in written and "Gather" not in written, written
    assert {"Slice", "Concat"} <= written and written & {"ReduceMean", "AveragePool"}, written
    assert not res.model.graph.initializer or all(t.data_type == 7 for t in res.model.graph.initializer)  # int64
    assert node.lowering == "window_slices"
    check_against_torch(res.model, shape, size)


@pytest.mark.parametrize("shape,size", MATMUL + OUT_OF_CACHE, ids=lambda v: "x".join(map(str, v)))
def test_the_matmul_stays_where_it_measures_faster(shape, size):
    res = onnxpoolfix.patch(make_leftover("avg", shape, size), check=False)
    written = ops(res.model)
    assert {"MatMul", "If"} <= written and "Slice" not in written, written
    check_against_torch(res.model, shape, size)


def test_the_portable_target_writes_the_same_file_at_a_large_plane():
    """Where the default target takes the window Slices, its file is the portable target's (it runs where
    that one does: ncnn, TFLite)."""
    model = make_leftover("avg", (1, 3, 1024, 1024), (7, 7))
    default = onnxpoolfix.patch(model, check=False).model
    portable = onnxpoolfix.patch(model, check=False, target="portable").model
    assert [(n.op_type, list(n.input)) for n in default.graph.node] == \
           [(n.op_type, list(n.input)) for n in portable.graph.node]

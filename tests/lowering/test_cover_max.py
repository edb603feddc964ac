"""pool_cover (lowering/cover_max.py): one MaxPool (ceil_mode) on a grid inside a non-uniform axis' windows
plus a Gather of the elements the grid misses. The grid is checked against windows.py for every n, m it
claims; the lowering bit for bit against torch, NaN and -inf included (the If-guarded wrapper's branch)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import constant_tensors, make_leftover, ort_run
from onnx import numpy_helper

import onnxpoolfix
from onnxpoolfix import windows as W
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph.shapes import resolve_specs
from onnxpoolfix.lowering import BY_NAME
from onnxpoolfix.lowering.cover_max import Cover, cover


def test_the_documented_grid():
    assert cover(64, 5) == Cover(13, 13, ((0,), (12,), (25,), (38,), (51,)))
    assert cover(10, 7) is None  # windows of 2 and 3 at irregular starts: no stride stays inside


def test_every_grid_covers_its_windows_exactly():
    """What the lowering relies on, window by window: the MaxPool's ceil_mode output count is m, its i-th
    window lies inside window i, and with the missed elements it is the whole window."""
    found = 0
    for n in range(2, 90):
        for m in range(1, n):
            c = cover(n, m)
            if c is None:
                continue
            found += 1
            assert -(-(n - c.kernel) // c.stride) + 1 == m and (m - 1) * c.stride < n
            for i, (start, end) in enumerate(W.windows(n, m)):
                grid = set(range(i * c.stride, min(i * c.stride + c.kernel, n)))
                assert grid and grid <= set(range(start, end))
                assert grid | set(c.missed[i]) == set(range(start, end)), (n, m, i)
    assert found > 300


def _torch_max(torch, x, size):
    fn = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")
    return fn(torch.from_numpy(x), size).numpy()


@pytest.mark.parametrize("shape,size", [
    ((2, 8, 64, 64), (5, 7)),  # the case: H on the grid k13 s13, W uniform k10 s9 in the same MaxPool
    ((1, 4, 10, 9), (4, 3)),  # 10 -> 4 misses two elements in its last window (a Reshape + ReduceMax)
    ((1, 3, 64, 8), (5, 8)),  # no other pooled axis: the missed rows are not pooled
    ((1, 3, 64, 64), (5, 5)),  # two non-uniform axes: the second by a window Gather after
    ((2, 3, 11), (4,)),  # 1D
])
def test_bit_exact_against_torch_with_nan_and_inf(torch_mod, shape, size):
    res = onnxpoolfix.patch(make_leftover("max", shape, size), strategy="pool_cover", check=True)
    assert res.report.check_passed
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    spiked = x.copy()
    spiked[0, 0, ..., 0] = -np.inf
    spiked.reshape(-1)[5] = np.nan
    for xx in (x, spiked, np.full(shape, -np.inf, np.float32), -np.zeros(shape, np.float32)):
        (y,) = ort_run(res.model, {"x": xx})
        assert y.tobytes() == _torch_max(torch_mod, xx, size).tobytes()


def test_planned_for_the_large_input_on_tensorrt():
    """For onnxruntime a 1D pool over rows beats it there (tests/lowering/test_plane_pool.py)."""
    res = onnxpoolfix.patch(make_leftover("max", (8, 256, 64, 64), (5, 7)), check=False, target="tensorrt")
    assert res.report.nodes[0].lowering == "pool_cover"


@pytest.mark.parametrize("shape,size,reason", [
    ((1, 4, 10, 10), (7, 7), "no grid fits inside the windows of 10->7 non-uniform"),
    ((1, 4, 33, 33), (8, 8), "no axis has non-uniform windows"),
    ((1, 4, 6, 6), (12, 12), "an axis is upsampled"),
    ((4, 64, 5), (5, 3), "not N, C"),
])
def test_why_not(shape, size, reason):
    model = make_leftover("max", shape, size)
    (spec,) = resolve_specs(model, find_pool_nodes(model.graph), opset=17, target="onnxruntime")
    assert reason in (BY_NAME["pool_cover"].check(spec) or "")


def test_a_missing_row_is_caught():
    """Broken on purpose: the missed rows replaced by rows of the grid windows; a maximum on a missed row
    (row 12 belongs to window 1 only through it) is then lost."""
    shape, size = (1, 2, 64, 64), (5, 7)
    model = onnxpoolfix.patch(make_leftover("max", shape, size), strategy="pool_cover", check=False).model
    x = np.zeros(shape, np.float32)
    x[0, 0, 12, 20] = 5.0
    assert ort_run(model, {"x": x})[0][0, 0, 1, 2] == 5.0
    (rows,) = [t for t in constant_tensors(model) if t.name.endswith("missed_rows")]
    rows.CopyFrom(numpy_helper.from_array(np.array([0, 13, 26, 39, 52], np.int64), rows.name))
    (y,) = ort_run(model, {"x": x})
    assert y[0, 0, 1, 2] != 5.0

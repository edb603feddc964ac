"""The first maximum over every window at once (lowering/first_max_windows.py): the argmax lowering's other
construction for inputs with no NaN, forced here where it applies. Its claims, each checked against torch and
the numpy reference, bit for bit:

- the smallest flat position holding the maximum is torch's first maximum in row-major order (tie data, all
  zeros: a construction answering the last, or the first in column-major order, fails);
- a tie of 0.0 and -0.0 gives torch's value (the first), which rests on onnxruntime's ReduceMax keeping the
  first of equal values;
- non-uniform windows, upsampling (windows of 1 and 2), kept axes mixed with pooled ones in 3D, batch > 1,
  no batch, float16, a symbolic batch;
- where it does not apply (one pooled axis, windows over MAX_WINDOW elements) the separable one is emitted;
- the planner takes it where it is the cheaper estimate, for 1x512x10x10 -> 7x7 (measured 0.7x the
  separable's time) but not for 8x64x31x40 -> 6x9 (measured 1.27x).
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_bits_equal, finite_branch_construction, force_first_max, make_leftover, ort_run
from onnx import TensorProto

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.lowering import first_max_windows

CASES = [
    ((2, 3, 10, 10), (7, 7)),
    ((1, 4, 13, 11), (5, 4)),
    ((2, 3, 13, 17), (5, 6)),
    ((2, 2, 5, 6, 7), (2, 4, 3)),  # 3D, every axis pooled
    ((2, 2, 9, 7, 6), (4, 7, 2)),  # 3D, the middle axis kept
    ((2, 11, 9), (4, 4)),  # no batch: [C, H, W]
    ((1, 2, 4, 5), (6, 6)),  # upsampling: windows of 1 and 2
    ((3, 2, 2, 9), (1, 4)),  # an output size of 1
]


def _ids(c):
    return f"{'x'.join(map(str, c[0]))}->{'x'.join(map(str, c[1]))}"


def _torch_pool(torch, x, size):
    pool = {1: torch.nn.functional.adaptive_max_pool1d, 2: torch.nn.functional.adaptive_max_pool2d,
            3: torch.nn.functional.adaptive_max_pool3d}[len(size)]
    return pool(torch.from_numpy(x), size, return_indices=True)


def _patched(shape, size, monkeypatch=None, dtype=TensorProto.FLOAT, **kw):
    if monkeypatch is not None:
        force_first_max(monkeypatch, "whole_windows")
    model = make_leftover("max", list(shape), size, indices="output", dtype=dtype)
    return onnxpoolfix.patch(model, strategy="argmax", check=False, **kw).model  # the test, not the tool, compares


@pytest.mark.parametrize("shape,size", CASES, ids=[_ids(c) for c in CASES])
def test_ties_give_torchs_first_maximum(shape, size, torch_mod, monkeypatch):
    model = _patched(shape, size, monkeypatch)
    assert finite_branch_construction(model) == "whole_windows"
    rng = np.random.default_rng(7)
    for x in (rng.integers(-1, 2, shape).astype(np.float32),  # equal maxima nearly everywhere
              np.zeros(shape, np.float32),  # every element ties
              rng.standard_normal(shape).astype(np.float32)):
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = _torch_pool(torch_mod, x, size)
        assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
        assert_bits_equal(got_v, want_v.numpy(), "values vs torch")
        ref_v, ref_i = reference.adaptive_max_pool(x, size)
        assert_bits_equal(got_i, ref_i, "indices vs reference")


@pytest.mark.parametrize("shape,size", CASES[:3], ids=[_ids(c) for c in CASES[:3]])
def test_a_tie_of_signed_zeros_keeps_the_first(shape, size, torch_mod, monkeypatch):
    model = _patched(shape, size, monkeypatch)
    rng = np.random.default_rng(3)
    x = np.where(rng.random(shape) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    x[..., ::3] *= -1  # both orders of the pair occur
    got_v, got_i = ort_run(model, {"x": x})
    want_v, want_i = _torch_pool(torch_mod, x, size)
    assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
    assert_bits_equal(got_v, want_v.numpy(), "values vs torch (sign of zero)")


def test_row_major_not_column_major(monkeypatch):
    """[[0, 1], [1, 0]]: the first maximum in row-major order is (0, 1), flat 1; column-major would be 2."""
    x = np.array([[0, 1], [1, 0]], np.float32).reshape(1, 1, 2, 2)
    model = _patched((1, 1, 2, 2), (1, 1), monkeypatch)
    assert finite_branch_construction(model) == "whole_windows"
    _, got_i = ort_run(model, {"x": x})
    assert int(got_i.reshape(-1)[0]) == 1


def test_float16(torch_mod, monkeypatch):
    shape, size = (2, 3, 10, 9), (4, 5)
    model = _patched(shape, size, monkeypatch, dtype=TensorProto.FLOAT16)
    assert finite_branch_construction(model) == "whole_windows"
    x = np.random.default_rng(2).integers(-2, 3, shape).astype(np.float16)
    got_v, got_i = ort_run(model, {"x": x})
    want_v, want_i = _torch_pool(torch_mod, x.astype(np.float32), size)
    assert_bits_equal(got_i, want_i.numpy(), "indices vs torch")
    assert_bits_equal(got_v.astype(np.float32), want_v.numpy())


def test_symbolic_batch(torch_mod, monkeypatch):
    force_first_max(monkeypatch, "whole_windows")
    size = (7, 7)
    model = make_leftover("max", ["N", 3, 10, 10], size, indices="output")
    model = onnxpoolfix.patch(model, strategy="argmax", check=False).model
    assert finite_branch_construction(model) == "whole_windows"
    rng = np.random.default_rng(4)
    for n in (1, 2, 5):
        x = rng.integers(-1, 2, (n, 3, 10, 10)).astype(np.float32)
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = _torch_pool(torch_mod, x, size)
        assert_bits_equal(got_i, want_i.numpy(), f"indices vs torch at batch {n}")
        assert_bits_equal(got_v, want_v.numpy(), f"values vs torch at batch {n}")


@pytest.mark.parametrize("shape,size,why", [
    ((2, 3, 11), (4,), "one pooled axis"),
    ((2, 3, 5, 11), (5, 4), "one pooled axis (H kept)"),
    ((1, 2, 64, 64), (7, 7), "windows of 100 elements"),
])
def test_not_taken_where_it_does_not_apply(shape, size, why, monkeypatch):
    model = _patched(shape, size, monkeypatch)
    assert finite_branch_construction(model) == "separable", why


def test_window_positions_are_the_flat_input_positions():
    """Against a direct enumeration of torch's windows (windows.py's bounds): every row holds exactly its
    window's positions, in row-major order, padded only with positions it already holds."""
    from onnxpoolfix import windows as W

    n, m = (5, 7), (3, 4)
    tables = [W.window_table(a, b) for a, b in zip(n, m)]
    pos = first_max_windows.window_positions(n, tables)
    assert pos.shape == (12, prod_kmax := tables[0].shape[1] * tables[1].shape[1])
    for i in range(m[0]):
        for j in range(m[1]):
            h0, h1 = (i * n[0]) // m[0], -(-((i + 1) * n[0]) // m[0])
            w0, w1 = (j * n[1]) // m[1], -(-((j + 1) * n[1]) // m[1])
            want = [h * n[1] + w for h in range(h0, h1) for w in range(w0, w1)]
            row = pos[i * m[1] + j].tolist()
            assert sorted(set(row)) == want
            assert len(row) == prod_kmax
            firsts = [row.index(p) for p in want]
            assert firsts == sorted(firsts)  # each real element first appears in row-major order


@pytest.mark.parametrize("shape,size,construction", [
    ((1, 512, 10, 10), (7, 7), "whole_windows"),
    ((8, 64, 31, 40), (6, 9), "separable"),
])
def test_the_planner_takes_the_cheaper(shape, size, construction):
    model = make_leftover("max", list(shape), size, indices="output")
    model = onnxpoolfix.patch(model, check=False).model
    assert finite_branch_construction(model) == construction


@pytest.mark.parametrize("shape", [["N", 3, "H", "W"], ["N", 3, "H", 9], [2, "C", 9, "W"]])
def test_runtime_window_tables(shape, torch_mod, monkeypatch):
    """The dynamic lowering's positions, built at run time from its window tables (one file, every size)."""
    force_first_max(monkeypatch, "whole_windows")
    size = (4, 5)
    model = onnxpoolfix.patch(make_leftover("max", shape, size, indices="output"), check=False).model
    assert finite_branch_construction(model) == "chosen at run time"  # here: every size takes whole windows
    rng = np.random.default_rng(12)
    for h, w in [(9, 9), (4, 2), (13, 17), (1, 5), (6, 1), (4, 5)]:
        sizes = {"N": 2, "C": 3, "H": h, "W": w}
        concrete = [sizes.get(d, d) for d in shape]
        for x in (rng.integers(-1, 2, concrete).astype(np.float32), np.zeros(concrete, np.float32)):
            got_v, got_i = ort_run(model, {"x": x})
            want_v, want_i = _torch_pool(torch_mod, x, size)
            assert_bits_equal(got_i, want_i.numpy(), f"indices vs torch at {concrete}")
            assert_bits_equal(got_v, want_v.numpy(), f"values vs torch at {concrete}")


def test_runtime_choice_by_window_size(torch_mod):
    """Unforced, runtime tables: windows of at most RUNTIME_WHOLE_WINDOWS elements take every window at once,
    larger ones the separable construction, inside one file; both give torch's indices (sizes on both sides:
    9x9 -> 4x5 has windows of 3x3 = 9 elements, 40x41 -> 4x5 of 11x10)."""
    size = (4, 5)
    model = onnxpoolfix.patch(make_leftover("max", [1, 2, "H", "W"], size, indices="output"), check=False).model
    assert finite_branch_construction(model) == "chosen at run time"
    rng = np.random.default_rng(13)
    for h, w in [(9, 9), (40, 41), (4, 5), (17, 3)]:
        x = rng.integers(-1, 2, (1, 2, h, w)).astype(np.float32)
        got_v, got_i = ort_run(model, {"x": x})
        want_v, want_i = _torch_pool(torch_mod, x, size)
        assert_bits_equal(got_i, want_i.numpy(), f"indices vs torch at {h}x{w}")
        assert_bits_equal(got_v, want_v.numpy(), f"values vs torch at {h}x{w}")

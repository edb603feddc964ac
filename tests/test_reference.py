"""The numpy reference against torch itself (skipped cleanly without torch)."""
from __future__ import annotations

import numpy as np
import pytest

from onnxpoolfix import reference as R

torch = pytest.importorskip("torch")
F = torch.nn.functional

AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}

CASES = [
    ((2, 3, 11), (4,)),
    ((1, 2, 5), (9,)),
    ((2, 3, 8, 9), (5, 7)),
    ((1, 1, 4, 5), (6, 6)),
    ((3, 7, 7), (3, 2)),  # unbatched
    ((1, 2, 1, 1), (3, 1)),
    ((1, 2, 5, 6, 7), (3, None, 9)),
    ((2, 1, 3, 4, 2), (1, 1, 1)),
]


def _torch_size(out):
    return out[0] if len(out) == 1 else tuple(out)


@pytest.mark.parametrize("shape,out", CASES)
def test_average_matches_torch(shape, out):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = AVG[len(out)](torch.from_numpy(x), _torch_size(out)).numpy()
    got = R.adaptive_avg_pool(x, out)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=4e-7 * np.abs(x).max())


@pytest.mark.parametrize("shape,out", CASES)
def test_max_and_indices_match_torch_bit_for_bit(shape, out):
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 3, shape).astype(np.float32)  # many ties: first maximum must win
    v, i = MAX[len(out)](torch.from_numpy(x), _torch_size(out), return_indices=True)
    rv, ri = R.adaptive_max_pool(x, out)
    assert np.array_equal(rv, v.numpy())
    assert np.array_equal(ri, i.numpy())


def test_nan_and_infinities_follow_torch():
    x = np.array([[[1, 3, 3, np.nan, 2, np.nan, 0, -np.inf, np.inf]]], dtype=np.float32)
    for m in (1, 2, 3, 4, 9, 12):
        v, i = F.adaptive_max_pool1d(torch.from_numpy(x), m, return_indices=True)
        rv, ri = R.adaptive_max_pool(x, (m,))
        assert np.array_equal(rv, v.numpy(), equal_nan=True), m
        assert np.array_equal(ri, i.numpy()), m
    neg = np.full((1, 1, 4, 4), -np.inf, dtype=np.float32)
    v, i = F.adaptive_max_pool2d(torch.from_numpy(neg), 3, return_indices=True)
    rv, ri = R.adaptive_max_pool(neg, (3, 3))
    assert np.array_equal(ri, i.numpy())


def test_half_precision_average_rounds_like_torch():
    x = np.random.default_rng(3).standard_normal((1, 4, 9, 10)).astype(np.float16)
    expected = F.adaptive_avg_pool2d(torch.from_numpy(x), (4, 7)).numpy()
    got = R.adaptive_avg_pool(x, (4, 7))
    # torch accumulates in float32 and rounds once; the reference rounds the float64 mean once
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=0,
                               atol=float(np.finfo(np.float16).eps) * np.abs(x.astype(np.float32)).max())


@pytest.mark.parametrize("shape,out", CASES)
def test_separable_max_values_equal_the_joint_windows(shape, out):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::7] = np.nan
    x.reshape(-1)[::11] = -np.inf
    joint, _ = R.adaptive_max_pool(x, out)
    assert np.array_equal(R.adaptive_max_pool_values(x, out), joint, equal_nan=True)


def test_large_outputs_match_torch():
    # per-axis pooling makes this ~2k slices rather than 900k windows (the check uses these functions)
    x = np.random.default_rng(5).standard_normal((1, 1, 500, 600)).astype(np.float32)
    y = R.adaptive_avg_pool(x, (1000, 900))
    v = R.adaptive_max_pool_values(x, (1000, 900))
    assert y.shape == v.shape == (1, 1, 1000, 900)
    expected = F.adaptive_avg_pool2d(torch.from_numpy(x), (1000, 900)).numpy()
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-6)
    assert np.array_equal(v, F.adaptive_max_pool2d(torch.from_numpy(x), (1000, 900)).numpy())

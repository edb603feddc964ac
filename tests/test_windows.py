"""PyTorch's window arithmetic, checked exhaustively over every (n, m) in 1..64."""
from __future__ import annotations

import numpy as np
import pytest

from onnxpoolfix import windows as W

SIZES = range(1, 65)


def torch_style_windows(n: int, m: int):
    # the float formula of aten/src/ATen/native/AdaptivePooling.h, written independently
    out = []
    for i in range(m):
        start = int(np.floor(i * n / m))
        end = int(np.ceil((i + 1) * n / m))
        out.append((start, end))
    return tuple(out)


def test_windows_match_the_formula_for_all_sizes():
    for n in SIZES:
        for m in SIZES:
            assert W.windows(n, m) == torch_style_windows(n, m), (n, m)


def test_windows_cover_the_axis_and_lengths_take_at_most_two_values():
    for n in SIZES:
        for m in SIZES:
            w = W.windows(n, m)
            assert w[0][0] == 0 and w[-1][1] == n
            assert all(b > a for a, b in w)
            # consecutive windows touch or overlap: no input element is skipped
            assert all(w[i + 1][0] <= w[i][1] for i in range(m - 1))
            lengths = set(W.window_lengths(n, m))
            assert len(lengths) <= 2
            assert max(lengths) <= 2 * min(lengths)  # what makes MaxPool(kmin)+2 Gathers exact


def test_uniform_windows_is_exactly_one_length_and_one_stride():
    for n in SIZES:
        for m in SIZES:
            u = W.uniform_windows(n, m)
            w = W.windows(n, m)
            lengths_equal = len(set(W.window_lengths(n, m))) == 1
            evenly_spaced = m == 1 or len({w[i + 1][0] - w[i][0] for i in range(m - 1)}) == 1
            expected = lengths_equal and evenly_spaced and (m == 1 or w[1][0] > 0)
            assert (u is not None) == expected, (n, m)
            if u is not None:
                # AveragePool(k, s) without padding produces exactly these windows
                assert (n - u.kernel) // u.stride + 1 == m
                assert all((i * u.stride, i * u.stride + u.kernel) == w[i] for i in range(m))


@pytest.mark.parametrize("n,m,expected", [
    (7, 3, W.Uniform(3, 2)),  # not divisible, yet uniform
    (5, 4, W.Uniform(2, 1)),
    (8, 4, W.Uniform(2, 2)),
    (10, 4, None),  # equal lengths, uneven starts 0,2,5,7
    (11, 4, None),
    (8, 6, None),  # AlexNet at 300x300
    (9, 1, W.Uniform(9, 9)),
])
def test_uniform_examples(n, m, expected):
    assert W.uniform_windows(n, m) == expected


def test_known_wrong_recipes_are_wrong_where_windows_are_not_uniform():
    # the popular stride = n // m, kernel = n - (m - 1) * stride recipe
    n, m = 11, 4
    stride = n // m
    kernel = n - (m - 1) * stride
    recipe = tuple((i * stride, i * stride + kernel) for i in range(m))
    assert W.windows(n, m) == ((0, 3), (2, 6), (5, 9), (8, 11))
    assert recipe != W.windows(n, m)


def test_seed_article_tables_are_corrected():
    assert W.window_lengths(7, 3) == (3, 3, 3)
    assert W.windows(17, 5) == ((0, 4), (3, 7), (6, 11), (10, 14), (13, 17))


def test_integer_upsample_factor():
    for n in SIZES:
        for m in SIZES:
            q = W.integer_upsample_factor(n, m)
            if q:
                assert m == q * n
                assert W.windows(n, m) == tuple((i // q, i // q + 1) for i in range(m))
            else:
                assert m <= n or m % n


def test_pooling_matrix_rows_average_their_windows():
    rng = np.random.default_rng(0)
    for n, m in [(11, 4), (5, 6), (1, 3), (9, 9), (64, 7)]:
        p = W.pooling_matrix(n, m, dtype=np.float64)
        x = rng.standard_normal(n)
        expected = [x[a:b].mean() for a, b in W.windows(n, m)]
        np.testing.assert_allclose(p @ x, expected, rtol=1e-14)


def test_window_table_pads_with_the_windows_own_last_index():
    for n in SIZES:
        for m in (1, 3, 7, 40):
            t = W.window_table(n, m)
            for i, (a, b) in enumerate(W.windows(n, m)):
                assert set(t[i].tolist()) == set(range(a, b))
                assert list(t[i][: b - a]) == list(range(a, b))


@pytest.mark.parametrize("bad", [(0, 3), (3, 0), (-1, 2)])
def test_rejects_non_positive_sizes(bad):
    with pytest.raises(ValueError):
        W.windows(*bad)

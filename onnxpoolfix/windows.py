"""PyTorch's adaptive pooling windows, as pure integer arithmetic.

For one axis of input length ``n`` pooled to output length ``m``, output index ``i`` reads
``x[start(i):end(i)]`` with::

    start(i) = floor(i * n / m)
    end(i)   = ceil((i + 1) * n / m)

(aten/src/ATen/native/AdaptivePooling.h). Example, n=11 -> m=4: windows [0,3) [2,6) [5,9) [8,11)
(lengths 3,4,4,3: not uniform, so no AveragePool/MaxPool reproduces them).

Everything here is integer-only and side-effect free; the lowerings decide *which* ONNX op is exact from
these predicates.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def window_start(i: int, n: int, m: int) -> int:
    """First input index of output ``i`` (``floor(i*n/m)``)."""
    return (i * n) // m


def window_end(i: int, n: int, m: int) -> int:
    """One past the last input index of output ``i`` (``ceil((i+1)*n/m)``)."""
    return ((i + 1) * n + m - 1) // m


def _check(n: int, m: int) -> None:
    if not (isinstance(n, (int, np.integer)) and isinstance(m, (int, np.integer))):
        raise TypeError(f"window sizes must be integers, got n={n!r}, m={m!r}")
    if n < 1 or m < 1:
        raise ValueError(f"window sizes must be >= 1, got n={n}, m={m}")


@lru_cache(maxsize=4096)
def windows(n: int, m: int) -> tuple[tuple[int, int], ...]:
    """All ``(start, end)`` pairs for ``n -> m``. ``windows(7, 3) == ((0, 3), (2, 5), (4, 7))``."""
    _check(n, m)
    return tuple((window_start(i, n, m), window_end(i, n, m)) for i in range(m))


def window_lengths(n: int, m: int) -> tuple[int, ...]:
    """``windows(10, 4)`` lengths: ``(3, 3, 3, 3)`` (equal, but starts 0,2,5,7 are not evenly spaced)."""
    return tuple(e - s for s, e in windows(n, m))


@dataclass(frozen=True)
class Uniform:
    """Windows of one length ``kernel`` starting at ``i * stride``: one AveragePool/MaxPool is exact."""

    kernel: int
    stride: int


@lru_cache(maxsize=4096)
def uniform_windows(n: int, m: int) -> Uniform | None:
    """The (kernel, stride) that reproduces every window exactly, or None.

    Divisibility is not the test: ``7 -> 3`` is kernel 3 stride 2; ``5 -> 4`` is kernel 2 stride 1;
    ``10 -> 4`` has equal lengths but starts 0,2,5,7, so it returns None. With ``m == 1`` the single
    window is the whole axis (kernel ``n``; the stride is irrelevant and reported as ``n``). Cached, and
    vectorized: the planner asks it of every lowering, and an axis may have a million windows.
    """
    _check(n, m)
    k = window_end(0, n, m) - window_start(0, n, m)
    if m == 1:
        return Uniform(k, n)
    s = window_start(1, n, m)
    if s < 1:
        return None
    i = np.arange(m, dtype=np.int64)  # i * n < 2**63 for any size onnxpoolfix lowers
    starts, ends = (i * n) // m, ((i + 1) * n + m - 1) // m
    if np.any(ends - starts != k) or np.any(starts != i * s):
        return None
    return Uniform(int(k), int(s))


def integer_upsample_factor(n: int, m: int) -> int | None:
    """``q`` when ``m == q * n`` with ``q >= 2``: every window is the single element ``x[i // q]``."""
    _check(n, m)
    if m > n and m % n == 0:
        return m // n
    return None


def max_window(n: int, m: int) -> int:
    return max(window_lengths(n, m))


def pooling_matrix(n: int, m: int, dtype=np.float32) -> np.ndarray:
    """``P`` of shape ``[m, n]`` with ``P[i, j] = 1/len_i`` for ``j`` in window ``i``: ``avg = P @ x``."""
    p = np.zeros((m, n), dtype=np.float64)
    for i, (a, b) in enumerate(windows(n, m)):
        p[i, a:b] = 1.0 / (b - a)
    return p.astype(dtype)


def window_table(n: int, m: int) -> np.ndarray:
    """``[m, kmax]`` int64 indices: row ``i`` lists window ``i``, padded by repeating its last index.

    Padding with an index that is already in the window leaves max() and first-argmax unchanged.
    """
    w = windows(n, m)
    kmax = max(b - a for a, b in w)
    t = np.empty((m, kmax), dtype=np.int64)
    for i, (a, b) in enumerate(w):
        t[i] = np.minimum(np.arange(a, a + kmax), b - 1)
    return t


def nests(n: int, fine: int, coarse: int, *, average: bool) -> bool:
    """Whether pooling ``n -> coarse`` equals pooling ``n -> fine`` and then ``fine -> coarse`` (exactly).

    Coarse window ``i`` must be the union of the fine windows ``windows(fine, coarse)[i]`` (a run without
    gaps). For averages those fine windows must also be disjoint and of one length, so that the mean of
    their means is the mean; max needs only the union. PSP's 60 -> 6 then 6 -> 3, 2, 1 nests (lengths 10);
    64 -> 6 does not (its windows overlap) for averages.
    """
    _check(n, fine)
    _check(n, coarse)
    fw, cw = windows(n, fine), windows(n, coarse)
    for (a, b), (p, q) in zip(cw, windows(fine, coarse)):
        run = fw[p:q]
        if run[0][0] != a or run[-1][1] != b:
            return False
        for (s0, e0), (s1, e1) in zip(run, run[1:]):
            if s1 > e0 or (average and (s1 != e0 or e1 - s1 != e0 - s0)):
                return False
    return True

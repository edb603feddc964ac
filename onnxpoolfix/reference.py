"""Numpy adaptive pooling with PyTorch's semantics: the single, independent definition of "exact".

Deliberately written from the formula in aten/src/ATen/native/AdaptivePooling.h and the CPU kernels
(AdaptiveAvgPoolKernel.cpp, AdaptiveMaxPoolKernel.cpp), not from onnxpoolfix.windows, so that a mistake in
the lowering arithmetic cannot hide behind the same mistake here.

- The pooled axes are the last ``len(output_size)`` axes; any leading axes are batch/channel.
- ``None`` in ``output_size`` keeps that axis' input length.
- Average: the mean of each window, accumulated in float64 and rounded once to the input dtype (torch
  accumulates float32 in float32 on CPU, so float32 results agree to rounding, not to the bit).
- Max: the maximum of each window; the index is the flat position inside the input's pooled plane
  (``d*H*W + h*W + w``) of the first maximum in row-major scan order; a NaN is the maximum, and a later NaN
  replaces an earlier one (torch's ``val > maxval || isnan(val)``).
"""
from __future__ import annotations

from itertools import product
from typing import Sequence

import numpy as np


def _bounds(n: int, m: int, i: int) -> tuple[int, int]:
    # floor(i*n/m) and ceil((i+1)*n/m), in integers so that huge sizes do not round
    return (i * n) // m, -((-(i + 1) * n) // m)


def resolve_output_size(input_shape: Sequence[int], output_size: Sequence[int | None]) -> tuple[int, ...]:
    k = len(output_size)
    if len(input_shape) < k + 1:
        raise ValueError(f"input of rank {len(input_shape)} cannot be pooled over {k} axes")
    spatial = input_shape[len(input_shape) - k:]
    return tuple(int(n) if m is None else int(m) for n, m in zip(spatial, output_size))


def _pool_axis(x: np.ndarray, axis: int, m: int, reduce) -> np.ndarray:
    """``reduce`` over every window of one axis (the others untouched): m vectorised slices; m = 0 gives an
    empty axis, as torch does (``F.interpolate(x, scale_factor=1/32, mode="area")`` at 20)."""
    n = x.shape[axis]
    if m == 0:
        return np.take(x, np.arange(0), axis=axis)
    parts = []
    for i in range(m):
        a, b = _bounds(n, m, i)
        parts.append(reduce(np.take(x, np.arange(a, b), axis=axis), axis=axis, keepdims=True))
    return np.concatenate(parts, axis=axis)


def _pool_axes(x: np.ndarray, output_size: Sequence[int | None], reduce) -> np.ndarray:
    """``reduce`` over the windows of each pooled axis in turn (for a separable reduction: mean, max)."""
    out = resolve_output_size(x.shape, output_size)
    for j, m in enumerate(out):
        x = _pool_axis(x, x.ndim - len(out) + j, m, reduce)
    return x


def adaptive_avg_pool(x: np.ndarray, output_size: Sequence[int | None]) -> np.ndarray:
    """Reference ``adaptive_avg_pool{1,2,3}d``.

    Pooled one axis at a time (averaging is separable: the mean over a box of windows is the mean of the
    per-axis means), accumulated in float64 and rounded once to x's dtype. Per-axis keeps the cost at
    sum(m) slices instead of prod(m), so a 1000x1000 output is checked in seconds.
    """
    with np.errstate(invalid="ignore"):  # inf + -inf in a window: NaN, as torch gives it
        return _pool_axes(x.astype(np.float64), output_size, np.mean).astype(x.dtype)


def adaptive_max_pool_values(x: np.ndarray, output_size: Sequence[int | None]) -> np.ndarray:
    """The values of :func:`adaptive_max_pool` alone, one axis at a time (max is separable; np.max
    propagates NaN as torch does). Use it when the indices are not needed: it costs sum(m), not prod(m)."""
    return _pool_axes(x, output_size, np.max)


def adaptive_max_pool(x: np.ndarray, output_size: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Reference ``adaptive_max_pool{1,2,3}d``: ``(values, int64 indices)``."""
    out = resolve_output_size(x.shape, output_size)
    k = len(out)
    lead = x.shape[: x.ndim - k]
    spatial = x.shape[x.ndim - k:]
    strides = [int(np.prod(spatial[a + 1:], dtype=np.int64)) for a in range(k)]
    values = np.empty(lead + out, dtype=x.dtype)
    indices = np.empty(lead + out, dtype=np.int64)
    for idx in product(*(range(m) for m in out)):
        ranges = [_bounds(n, m, i) for n, m, i in zip(spatial, out, idx)]
        sl = tuple(slice(a, b) for a, b in ranges)
        win = x[(Ellipsis,) + sl]
        flat = win.reshape(lead + (-1,))
        # flat position (in the input plane) of each window element, in row-major scan order
        pos = np.zeros([b - a for a, b in ranges], dtype=np.int64)
        for ax, (a, b) in enumerate(ranges):
            shape = [1] * k
            shape[ax] = b - a
            pos = pos + (np.arange(a, b, dtype=np.int64) * strides[ax]).reshape(shape)
        pos = pos.reshape(-1)
        isnan = np.isnan(flat) if np.issubdtype(x.dtype, np.floating) else np.zeros(flat.shape, bool)
        first_max = np.argmax(np.where(isnan, -np.inf, flat.astype(np.float64)), axis=-1)
        has_nan = isnan.any(axis=-1)
        last_nan = flat.shape[-1] - 1 - np.argmax(isnan[..., ::-1], axis=-1)
        choice = np.where(has_nan, last_nan, first_max)
        values[(Ellipsis,) + idx] = np.take_along_axis(flat, choice[..., None], axis=-1)[..., 0]
        indices[(Ellipsis,) + idx] = pos[choice]
    return values, indices

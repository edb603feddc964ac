"""Inputs that expose what random data rarely does, for tests that run a whole model on its graph inputs.

The tool's own check (``onnxpoolfix.check``) makes such inputs per replaced node; this is the tests' own,
independent generator, for the graph input of a model (its spatial axes are the ones from 2 on):

- ``ramp axis A`` / ``falling ramp axis A``: 0, 1, 2, ... along axis A (a window one element off moves an
  average by half a step and a max to another element; the falling ramp puts every max at a window start);
- ``all equal``: every element 1 (every window a tie: the first maximum must win);
- ``relu zeros``: max(N(0, 1), 0) (half the elements 0.0, ties among them);
- ``small integers``: 0, 1 or 2 (equal maxima in most windows);
- ``nan``: N(0, 1) with 2% NaN (any NaN in a window gives NaN, its index the last NaN, as torch);
- ``-inf windows``: N(0, 1) with the first half of every spatial axis -inf (at least one whole window
  of -inf in every plane when the pool downsamples), a -inf band along the last axis, and a NaN.

``finite=False`` adds the last two, which only max pooling defines exactly (an average over inf/NaN is a
known difference of the MatMul lowerings, see README "What is exact").
"""
from __future__ import annotations

import numpy as np


def structured_inputs(shape, dtype, *, finite: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Named arrays of ``shape`` and ``dtype`` (see the module docstring); axes 2.. are the spatial ones
    (all axes from 1 for rank 2)."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for a in range(min(2, rank - 1), rank):
        n = shape[a]
        ramp = np.arange(n, dtype=np.float64).reshape([n if b == a else 1 for b in range(rank)])
        out[f"ramp axis {a}"] = np.ascontiguousarray(np.broadcast_to(ramp, shape)).astype(dtype)
        out[f"falling ramp axis {a}"] = np.ascontiguousarray(np.broadcast_to(n - 1 - ramp, shape)).astype(dtype)
    out["all equal"] = np.ones(shape, dtype=dtype)
    out["relu zeros"] = np.maximum(rng.standard_normal(shape), 0).astype(dtype)
    out["small integers"] = rng.integers(0, 3, shape).astype(dtype)
    if not finite:
        x = rng.standard_normal(shape).astype(dtype)
        x[rng.random(shape) < 0.02] = np.nan
        out["nan"] = x
        x = rng.standard_normal(shape).astype(dtype)
        spatial = range(min(2, rank - 1), rank)
        x[tuple(slice(0, max(1, (shape[a] + 1) // 2)) if a in spatial else slice(None) for a in range(rank))] = -np.inf
        band = [slice(None)] * rank
        band[rank - 1] = slice(shape[-1] // 2, shape[-1] // 2 + 2)
        x[tuple(band)] = -np.inf
        x.reshape(-1)[-1] = np.nan
        out["-inf windows"] = x
    return out

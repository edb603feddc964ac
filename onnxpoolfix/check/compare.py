"""The pure part of the check: one node's actual output against :mod:`onnxpoolfix.reference`, with the
tolerance a correct average may differ by (max pooling: bit exact, values and indices). numpy only.
The tolerance of an average: :func:`tolerance` (docs/exactness.md, "Average pooling").
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto

from .. import reference
from .. import windows as W
from ..spec import PoolSpec


@dataclass
class NodeCheck:
    name: str
    max_error: float = 0.0
    tolerance: float = 0.0
    passed: bool = True
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    detail: str = ""
    structured: int = 0  # structured inputs the subgraph also ran on alone
    # float16/bfloat16: runs where onnxruntime fed the subgraph its input before rounding (the subgraph alone
    # was exact on the fetched tensor, the output within the reference over that rounding); upstream: a
    # failure seen in the model only, with the subgraph alone exact on the same input (not the replacement)
    input_rounding: int = 0
    upstream: bool = False
    size_kinds: set = field(default_factory=set)  # runtime output sizes: "downsampling" / "upsampling" / "equal"


_MANTISSA = {TensorProto.FLOAT16: 10, TensorProto.BFLOAT16: 7}


def tolerance(spec: PoolSpec, x: np.ndarray, ref: np.ndarray, input_rounding: bool = False) -> np.ndarray:
    """Per output element, what a correct average may differ from the exact one (float64) by.

    The lowering sums L = window-size terms in its compute dtype (float32 for float16/bfloat16, as torch):
    rounding errors of a sum of L terms of mean magnitude A grow like sqrt(L) * eps * A (random walk;
    4x that is allowed), plus the rounding of the result itself, one ulp of the output dtype (float16 and
    bfloat16 outputs are rounded once from float32). A from the window's own mean |x|, not max|x|: a
    window off by one element on a big plane (a ~1/L change) stays above it, as do weights 1/(L+1) on small
    ones. Used for averages only: max must be bit exact.

    ``input_rounding``: ``x`` is a float16/bfloat16 tensor fetched from the model while the subgraph consumed
    it unrounded (onnxruntime runs float16 ops in float32 and drops the Cast pair between them and the
    lowering's Cast to float32): the true input is within half an ulp of each element of ``x``, so the
    window's mean of those half ulps is allowed on top.
    """
    size = torch_size(spec)
    xf = np.where(np.isfinite(x), x, 0).astype(np.float64)
    mean_abs = reference.adaptive_avg_pool(np.abs(xf), size)
    spatial = x.shape[x.ndim - spec.k:]
    lengths = np.ones(ref.shape[x.ndim - spec.k:], dtype=np.float64)
    for a, (n, m) in enumerate(zip(spatial, out_sizes(spec, x))):
        ln = np.array([e - b for b, e in W.windows(n, m)], dtype=np.float64)
        shape = [1] * spec.k
        shape[a] = m
        lengths = lengths * ln.reshape(shape)
    compute = np.float64 if spec.dtype == TensorProto.DOUBLE else np.float32
    compute_eps = float(np.finfo(compute).eps)
    mag = np.abs(np.where(np.isfinite(ref), ref, 0).astype(np.float64))
    tol = 4 * compute_eps * np.sqrt(lengths) * mean_abs + compute_eps * mag + np.finfo(np.float64).tiny
    if compute == np.float32 and lengths.max() > SUMMED_IN_ORDER_FROM:
        tol = tol + 2 * np.abs(_in_order_float32(xf, out_sizes(spec, x)) - reference.adaptive_avg_pool(xf, size))
    # subnormal values: each product and sum rounds on the subnormal grid, whose fixed spacing no relative
    # term reaches (a random-init EfficientNet's SE squeeze pools values near 1e-40); a window one element
    # off moves such an average by ~|x| / L, far above this
    tol = tol + (lengths + 1) * float(np.finfo(compute).smallest_subnormal)
    if spec.dtype in _MANTISSA:  # one ulp of the output at |ref|
        floor = 2.0 ** -24 if spec.dtype == TensorProto.FLOAT16 else 2.0 ** -133  # smallest subnormal
        tol = tol + np.maximum(2.0 ** (np.floor(np.log2(np.maximum(mag, floor))) - _MANTISSA[spec.dtype]), floor)
        if input_rounding:
            half_ulp = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(np.abs(xf), floor))) - _MANTISSA[spec.dtype] - 1),
                                  floor / 2)
            tol = tol + 2 * reference.adaptive_avg_pool(half_ulp, size)  # x2: the output's ulp may be the next one
    return tol


#: windows longer than this also allow the error of their float32 sum taken in order (:func:`_in_order_float32`)
SUMMED_IN_ORDER_FROM = 1 << 12


def _in_order_float32(x: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    """Each window's mean as torch's CPU kernel and onnxruntime's AveragePool take it: float32 sums element by
    element in row-major order. Its error is not a random walk on structured data (a ramp's partial sums pass
    2^24 and each step rounds the same way): [1, 3, 720, 1280] -> 2x2 of a ramp along W comes out 0.46 off the
    exact mean in torch and in onnxruntime alike, bit for bit, where the sqrt(L) bound above allows 0.07."""
    k = len(size)
    lead = x.shape[:x.ndim - k]
    out = np.empty(lead + tuple(size), np.float64)
    bounds = [list(W.windows(n, m)) for n, m in zip(x.shape[x.ndim - k:], size)]
    for idx in np.ndindex(*size):
        cut = x[(...,) + tuple(slice(*bounds[a][i]) for a, i in enumerate(idx))].reshape(lead + (-1,))
        out[(...,) + idx] = np.cumsum(cut.astype(np.float32), axis=-1, dtype=np.float32)[..., -1] / cut.shape[-1]
    return out


def out_sizes(spec: PoolSpec, x: np.ndarray) -> tuple[int, ...]:
    return reference.resolve_output_size(x.shape, torch_size(spec))


def torch_size(spec: PoolSpec) -> tuple[int | None, ...]:
    return tuple(None if f else s for f, s in zip(spec.follows_input, spec.node.output_size))


def compare(spec: PoolSpec, x: np.ndarray, y: np.ndarray, idx: np.ndarray | None, check: NodeCheck,
            input_rounding: bool = False) -> None:
    """Compare one node's actual output with the reference; accumulate into ``check`` (``input_rounding``:
    see :func:`tolerance`)."""
    size = torch_size(spec)
    shape = tuple(int(d) for d in x.shape)
    if shape not in check.shapes:
        check.shapes.append(shape)
    if spec.kind == "avg":
        ref = reference.adaptive_avg_pool(x.astype(np.float64), size)
    elif idx is None:
        ref, ref_i = reference.adaptive_max_pool_values(x, size), None
    else:
        ref, ref_i = reference.adaptive_max_pool(x, size)
    if ref.shape != y.shape:
        check.passed, check.detail = False, f"output shape {y.shape}, expected {ref.shape}"
        check.max_error = float("inf")
        return
    if spec.kind == "avg":
        if ref.size == 0:  # an output length of 0 (torch gives it too): equal shapes are all there is
            return
        tol = tolerance(spec, x, ref, input_rounding)
        both_nan = np.isnan(ref) & np.isnan(y)
        same_inf = np.isinf(ref) & (y.astype(np.float64) == ref)
        with np.errstate(invalid="ignore"):
            err = np.where(both_nan | same_inf, 0.0, np.abs(y.astype(np.float64) - ref))
        err = np.nan_to_num(err, nan=np.inf)
        check.max_error = max(check.max_error, float(err.max()))  # (not empty: ref.size checked above)
        check.tolerance = max(check.tolerance, float(tol.max()))
        bad = err > tol
        if bad.any():
            where = np.unravel_index(int(np.argmax(err - tol)), err.shape)
            check.passed = False
            check.detail = (f"error {float(err[where]):.3g} > tolerance {float(tol[where]):.3g} at output "
                            f"{tuple(int(i) for i in where)} for input {x.shape}")
        return
    if not np.array_equal(ref.astype(y.dtype), y, equal_nan=True):
        with np.errstate(invalid="ignore"):  # inf - inf where both are inf: NaN, counted as a difference
            diff = np.abs(ref.astype(np.float64) - y.astype(np.float64))
        check.max_error = max(check.max_error, float(np.nan_to_num(diff, nan=np.inf).max()))
        check.passed, check.detail = False, f"max values differ (error {check.max_error:.3g}) at input {x.shape}"
    if idx is not None and not np.array_equal(idx, ref_i):
        check.passed = False
        check.detail = f"indices differ at {int((idx != ref_i).sum())} positions at input {x.shape}"
        check.max_error = max(check.max_error, float("inf"))

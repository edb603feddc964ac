"""Max pooling with torch's indices for inputs with no NaN, every window at once: the ``argmax`` lowering's
other fast path behind its If (:mod:`.first_max` is the separable one; :class:`~.argmax.ArgMaxStep` prices
both and emits the cheaper).

On the input laid out ``[P, L]`` (the pooled plane flattened in front, ``P = n_1 * .. * n_k``; the leading
dims flattened behind it, so the Gather copies whole blocks):

1. one Gather of the ``[O, K]`` table of every window's flat input positions (``O`` output positions, ``K``
   the product of the per-axis kmax; short windows repeat an element they already hold, which changes
   neither the maximum nor the first position holding it): ``[O, K, L]``;
2. values: ``ReduceMax`` over the window (onnxruntime keeps the first of equal values, so a tie of ``0.0``
   and ``-0.0`` gives torch's);
3. indices: the smallest flat position holding the maximum, ``2**24 - ReduceMax(Cast(Equal(windows, max))
   * (2**24 - position))`` in float (exact: the plane has at most 2**24 elements). The smallest flat
   position is the first in row-major scan order, torch's choice.

Against the separable construction it does ``K`` comparisons per output where that one does
``kmax_1 + .. + kmax_k``, but in ~14 nodes instead of ~35 and without its read-back (GatherElements) and
index arithmetic: faster where windows are small. Measured in one process against it (2 threads, randn):
1x512x10x10 -> 7x7 350 vs 490 us, 1x512x14x14 -> 6x6 168 vs 341, 1x2048x7x7 -> 3x3 227 vs 349,
2x1024x9x9 -> 7x7 1066 vs 1425, 1x64x4x5 -> 6x6 69 vs 89; slower where windows are large: 1x256x33x33 ->
8x8 (K = 25) 595 vs 555, 8x64x31x40 -> 6x9 (K = 36) 1459 vs 1130, 1x128x64x64 -> 7x7 (K = 100) 921 vs 739.
"""
from __future__ import annotations

from math import prod

import numpy as np
from onnx import TensorProto

from ..graph.emit import Emitter
from . import cost as C
from .first_max import PooledAxis, output_shape

#: past this many elements per window the separable construction always wins (1x128x64x64 -> 7x7, K = 100:
#: 1.25x slower; 4x3x50x50 -> 7x7, K = 64: 1.34x); below it the estimates decide
MAX_WINDOW = 36
#: the plane's flat positions are exact in float below this
MAX_PLANE = 1 << 24
#: every op :func:`emit_first_max_windows` may emit
FIRST_MAX_WINDOWS_OPS = ("Reshape", "Transpose", "Gather", "ReduceMax", "Equal", "Cast", "Mul", "Sub", "Squeeze",
                         "Shape", "Slice", "Concat")


def window_positions(n: tuple[int, ...], tables: list[np.ndarray]) -> np.ndarray:
    """The ``[O, K]`` flat input positions (``d*H*W + h*W + w``) of every window element: output positions
    row-major over ``m_1..m_k``, window elements row-major over ``kmax_1..kmax_k``. ``tables``: each axis's
    ``[m, kmax]`` window table (windows.window_table: short windows repeat their last index)."""
    k = len(n)
    flat = np.zeros(tuple(t.shape[0] for t in tables) + tuple(t.shape[1] for t in tables), dtype=np.int64)
    for j, t in enumerate(tables):
        shape = [1] * (2 * k)
        shape[j], shape[k + j] = t.shape
        flat = flat + (t * prod(n[j + 1:])).reshape(shape)  # m_j on dim j, kmax_j on dim k + j
    return flat.reshape(prod(t.shape[0] for t in tables), -1)


def whole_windows_apply(n: tuple[int, ...], m: tuple[int, ...], kmax: list[int]) -> bool:
    """Whether :func:`emit_first_max_windows` can take these pooled sizes: at least two pooled axes (over
    one, the separable construction is already a single pass), windows of at most :data:`MAX_WINDOW`
    elements and a plane of at most :data:`MAX_PLANE`."""
    pooled = sum(a != b for a, b in zip(n, m))
    return pooled >= 2 and prod(kmax) <= MAX_WINDOW and prod(n) <= MAX_PLANE


def first_max_windows_seconds(lead: int, n: list[int], m: list[int], kmax: list[int], itemsize: int) -> float:
    """Estimated seconds of :func:`emit_first_max_windows` behind its If (lowering/cost.py's constants): the
    finiteness sum and the move of ``x``, the Gather of ``lead * O * K`` window elements and
    ``C.FIRST_MAX_WINDOWS_PASSES`` passes over them, ~16 nodes."""
    gathered = lead * prod(m) * prod(kmax)
    c = (16 * C.NODE + 3 * lead * prod(n) * itemsize / C.BANDWIDTH + gathered / C.GATHER_RATE
         + prod(m) * prod(kmax) * C.GATHER_BLOCK + C.FIRST_MAX_WINDOWS_PASSES * gathered * itemsize / C.BANDWIDTH)
    if gathered * itemsize > C.CACHE_BYTES:  # as first_max_seconds: out of cache every pass slows down
        c *= C.ARGMAX_OUT_OF_CACHE / 2
    return c


def emit_first_max_windows(em: Emitter, x: str, rank: int, axes: list[PooledAxis], positions: np.ndarray,
                           y: str, indices: str | None) -> None:
    """Values (into ``y``) and, if ``indices``, torch's indices of max pooling ``x``'s last ``len(axes)``
    axes (static sizes), exact where no element of ``x`` is NaN and ``x`` is not empty (the If's condition,
    :func:`~.first_max.takes_first_max`). ``positions``: :func:`window_positions` of the axes."""
    k = len(axes)
    plane = prod(ax.n for ax in axes)
    flat = em.op("Reshape", [x, em.ints("planes", [-1, plane])])  # [L, P]: not empty here
    v = em.op("Transpose", [flat], perm=[1, 0])  # [P, L]
    windows = em.op("Gather", [v, em.const("window_positions", positions)], axis=0, hint="windows")  # [O, K, L]
    kept_max = em.reduce("ReduceMax", windows, [1], keepdims=1)  # [O, 1, L]
    out_shape = output_shape(em, x, rank - k, axes)
    values = em.op("Transpose", [em.squeeze(kept_max, [1])], perm=[1, 0])
    em.op("Reshape", [values, out_shape], out=y)
    if not indices:
        return
    hit = em.cast(em.op("Equal", [windows, kept_max]), TensorProto.FLOAT)
    top = np.float32(MAX_PLANE)
    weights = em.const("reversed_position", (top - positions.astype(np.float32))[:, :, None])  # exact: < 2**24
    best = em.reduce("ReduceMax", em.op("Mul", [hit, weights]), [1], keepdims=0)  # [O, L]
    first = em.op("Sub", [em.const("top", top), best], hint="first_position")
    moved = em.op("Transpose", [first], perm=[1, 0])  # as float: onnxruntime moves int64 element by element
    em.op("Reshape", [em.cast(moved, TensorProto.INT64), out_shape], out=indices)

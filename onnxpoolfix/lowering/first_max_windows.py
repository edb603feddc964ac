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
#: with runtime window tables (the dynamic lowering), an If at run time takes this construction where the windows
#: hold at most this many elements: every shape measured was faster up to 16 (1x512x10x10 -> 7x7 0.71x,
#: 1x1024x12x12 -> 5x5 0.89x), some at 25 and 36 slower (1x256x33x33 -> 8x8 1.07x, 8x64x31x40 -> 6x9 1.27x)
RUNTIME_WHOLE_WINDOWS = 16
#: the plane's flat positions are exact in float below this
MAX_PLANE = 1 << 24
#: every op :func:`emit_first_max_windows` may emit
FIRST_MAX_WINDOWS_OPS = ("Reshape", "Transpose", "Gather", "ReduceMax", "Equal", "Cast", "Mul", "Sub", "Squeeze",
                         "Shape", "Slice", "Concat", "Flatten", "Unsqueeze", "ReduceProd", "Less", "And", "If",
                         "Where")


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


def emit_first_max_windows(em: Emitter, x: str, rank: int, axes: list[PooledAxis], positions: np.ndarray | str,
                           kall: int | str, y: str, indices: str) -> None:
    """Values (into ``y``) and torch's indices (into ``indices``: only the indices take this construction) of
    max pooling ``x``'s last ``len(axes)`` axes, exact where no element of ``x`` is NaN, ``x`` is not empty and
    its plane has at most :data:`MAX_PLANE` elements (the If's condition, :func:`~.first_max.takes_first_max` and
    :func:`takes_whole_windows`). ``positions``: the ``[O, K]`` :func:`window_positions` of the axes, or (the dynamic
    lowering's, built at run time) the name of the same int64 tensor flattened; ``kall``: ``K``, an int or a
    0-d int64 tensor."""
    k = len(axes)
    v = em.op("Transpose", [em.op("Flatten", [x], axis=rank - k)], perm=[1, 0])  # [P, L]
    if isinstance(positions, np.ndarray):
        table = em.const("window_positions", positions)
    else:
        width = em.ints("width", [kall]) if isinstance(kall, int) else em.unsqueeze(kall, [0])
        table = em.op("Reshape", [positions, em.op("Concat", [em.ints("rows", [-1]), width], axis=0)],
                      hint="window_positions")
    windows = em.op("Gather", [v, table], axis=0, hint="windows")  # [O, K, L]
    kept_max = em.reduce("ReduceMax", windows, [1], keepdims=1)  # [O, 1, L]
    out_shape = output_shape(em, x, rank - k, axes)
    values = em.op("Transpose", [em.squeeze(kept_max, [1])], perm=[1, 0])
    em.op("Reshape", [values, out_shape], out=y)
    hit = em.zero_one(em.op("Equal", [windows, kept_max]), TensorProto.FLOAT)
    top = np.float32(MAX_PLANE)
    if isinstance(positions, np.ndarray):  # exact: below 2**24
        weights = em.const("reversed_position", (top - positions.astype(np.float32))[:, :, None])
    else:
        weights = em.unsqueeze(em.op("Sub", [em.const("top", top), em.cast(table, TensorProto.FLOAT)],
                                     hint="reversed_position"), [2])
    best = em.reduce("ReduceMax", em.op("Mul", [hit, weights]), [1], keepdims=0)  # [O, L]
    first = em.op("Sub", [em.const("top", top), best], hint="first_position")
    moved = em.op("Transpose", [first], perm=[1, 0])  # as float: onnxruntime moves int64 element by element
    em.op("Reshape", [em.cast(moved, TensorProto.INT64), out_shape], out=indices)


def takes_whole_windows(em: Emitter, x: str, rank: int, k: int, kall: int | str, most: int) -> str:
    """A bool scalar (runtime sizes): the windows hold at most ``most`` elements (``kall``, 0-d int64) and
    ``x``'s last ``k`` dims at most :data:`MAX_PLANE` (its float positions are exact)."""
    plane = em.op("ReduceProd", [em.op("Slice", [em.op("Shape", [x]), em.ints("start", [rank - k]),
                                                 em.ints("end", [rank])])], keepdims=0)
    fits = em.op("Less", [plane, em.const("plane_limit", np.array(MAX_PLANE + 1, np.int64))])
    count = em.const("window_elements", np.array(kall, np.int64)) if isinstance(kall, int) else kall
    small = em.op("Less", [count, em.const("window_limit", np.array(most + 1, np.int64))])
    return em.op("And", [fits, small])

"""Max pooling over symbolic pooled axes (the ``dynamic`` lowering's max steps, :mod:`.dynamic`), on window
tables built at run time (:mod:`.runtime_windows`): :class:`DynamicWindowMaxStep` for the values alone (NaN and
-inf: the base class' wrapper), :class:`DynamicArgMaxStep` where the indices are read (NaN and -inf: there).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

import numpy as np
from onnx import TensorProto

from .. import windows as W
from ..spec import RuntimeDim
from . import cost as C
from .argmax import ARGMAX_OPS, LAZY_OPS, argmax_seconds, emit_argmax
from .first_max import PooledAxis, first_max_seconds
from .first_max_windows import RUNTIME_WHOLE_WINDOWS
from .max_steps import emit_if, gather_window_max, window_max
from .runtime_windows import (
    RuntimeLengths,
    guess_len,
    int64_scalar,
    out_dim,
    runtime_size,
    runtime_window_table,
    runtime_window_tables,
)
from .steps import Step

# from this many input elements on, the pooled axes are gathered in place (see DynamicWindowMaxStep)
IN_PLACE_MIN_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class DynamicWindowMaxStep(Step):
    """Max along ``axes`` ((axis, static n or None, m), earlier axes first): per axis a Gather of its window
    table (runtime for a symbolic axis) and a ReduceMax over the window dim, in one of two layouts:

    - front: the pooled axes moved in front of the others once (one Transpose of the whole input), so every
      Gather copies whole blocks of the other dims, and moved back at the end;
    - in place: each axis but the last gathered where it is (blocks of the later dims), the last one (whose
      Gather would copy element by element in onnxruntime) moved to the front once the others are pooled,
      so only that smaller tensor is transposed.

    onnxruntime's Transpose costs ~0.4-0.7 ns per element here, its Gather a fixed cost per copied block, so
    which is faster depends on the size (interleaved, static tables, 2 threads): in place 0.73-0.89x at
    1x256x33x33 -> 8x8, 0.39x at 8x256x64x64 -> 5x7, but 1.46x at 1x512x10x10 -> 7x7 and 1.7x at
    1x64x4x5 -> 6x6; the crossover lies near 2^16 input elements. With ``by_size`` (onnxruntime) an If on
    ``Size(x)`` takes the faster one at run time (both read the same tables; ~2 us); without (TensorRT: no
    If) the front layout.
    """

    axes: tuple[tuple[int, int | None, int | RuntimeDim], ...]
    by_size: bool = True

    def out_shape(self, shape):
        out = list(shape)
        for a, _, m in self.axes:
            out[a] = out_dim(m)
        return tuple(out)

    def cost(self, shape, itemsize):
        dims = [guess_len(d) for d in shape]
        chooses = self._chooses(len(dims))
        in_place = chooses and prod(dims) >= IN_PLACE_MIN_ELEMENTS
        total = prod(dims)
        moved = total if not in_place else 0  # what the Transposes move
        c = 2 * C.NODE + (3 * C.NODE if chooses else 0)
        for a, n, m in self.axes:
            m = guess_len(m)
            kmax = ceil(dims[a] / m) + 1
            if in_place and a == len(dims) - 1:
                moved = total
            gathered = total // dims[a] * m * kmax
            c += ((2 + (12 if n is None else 0)) * C.NODE + gathered / C.GATHER_RATE
                  + 2 * gathered * itemsize / C.BANDWIDTH)
            total = total // dims[a] * m
            dims[a] = m
        return c + (moved + total) * 2 * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        rank = len(shape)
        tables = self._tables(em, x)
        if not self._chooses(rank):
            return self._front(em, x, rank, tables)
        large = em.op("Less", [int64_scalar(em, "in_place_min", IN_PLACE_MIN_ELEMENTS - 1), em.op("Size", [x])])
        return emit_if(em, large, elem, ("large_input", lambda sub: self._in_place(sub, x, rank, tables)),
                       ("small_input", lambda sub: self._front(sub, x, rank, tables)))

    def _chooses(self, rank: int) -> bool:
        """Whether the If on the size is emitted: not for TensorRT, nor where only the last axis is pooled
        (both layouts move it to the front alone)."""
        return self.by_size and any(a < rank - 1 for a, _, _ in self.axes)

    def _tables(self, em, x) -> dict[int, str]:
        """Per pooled axis its window table (``[m, kmax]``)."""
        groups: dict[int, list[int]] = {}
        for a, n, m in self.axes:
            if n is None and isinstance(m, int):
                groups.setdefault(m, []).append(a)
        lengths = RuntimeLengths(em, x)
        out: dict[int, str] = {}
        for m, axes in groups.items():  # symbolic axes pooled to the same m share one construction
            shared = runtime_window_tables(em, lengths(axes), len(axes), m)
            for q, a in enumerate(axes):
                out[a] = shared if len(axes) == 1 else em.op(
                    "Gather", [shared, int64_scalar(em, "axis_index", q)], axis=0, hint="window_table")
        for a, n, m in self.axes:
            if isinstance(m, RuntimeDim):  # the graph's own runtime output length
                length = (int64_scalar(em, "n", n) if isinstance(n, int) else
                          em.op("Gather", [em.op("Shape", [x]), int64_scalar(em, "axis", a)], axis=0))
                out[a] = runtime_window_table(em, length, runtime_size(em, m))[0]
            elif n is not None:
                out[a] = em.const("window_table", W.window_table(n, m))
        return out

    def _front(self, em, x, rank, tables):
        first = min(a for a, _, _ in self.axes)
        g = em.op("Transpose", [x], perm=list(range(first, rank)) + list(range(first)))
        for a, _, _ in self.axes:
            g = window_max(em, g, tables[a], a - first)
        k = rank - first
        return em.op("Transpose", [g], perm=list(range(k, rank)) + list(range(k)))

    def _in_place(self, em, x, rank, tables):
        g = x
        for a, _, _ in self.axes:  # each where it is, but the last: moved to the front and back
            g = gather_window_max(em, g, tables[a], a, rank)
        return g

    @property
    def ops(self):
        tables = ("Shape", "Gather", "Mul", "Add", "Div", "Sub", "ReduceMin", "Range", "Max", "Min", "Less", "Where",
                  "Unsqueeze", "Cast")  # runtime_window_tables / runtime_window_table (Where/Less before opset 12)
        return tables + ("ReduceMax", "Transpose") + (("Size", "If", "Constant") if self.by_size else ())


@dataclass(frozen=True)
class DynamicArgMaxStep(Step):
    """Max pooling WITH torch's indices over symbolic pooled axes: :func:`~.argmax.emit_argmax` on window tables
    built from the runtime lengths (:func:`runtime_window_table`), its flat-index table (``d*H*W + h*W + w`` of
    every window element) built from them too: per axis its table (or, for an axis that follows the input,
    ``Range(n)``) times its runtime stride, summed by broadcasting.

    ``m[j]`` is None where axis ``j`` keeps its length (torch's ``None``: not gathered, its window the element
    itself); ``n[j]`` is None where the length is symbolic.
    """

    first_axis: int
    n: tuple[int | None, ...]
    m: tuple[int | RuntimeDim | None, ...]  # RuntimeDim: computed by the graph at run time
    tie_safe: bool = False
    exact_non_finite = True  # NaN and all -inf windows as torch, without the NonFiniteMaxStep wrapper
    #: finite inputs whose windows hold at most this many elements at run time take every window at once
    #: (first_max_windows.py; measured faster up to 16 in every shape tried, slower in some at 25 and 36)
    whole_windows_max = RUNTIME_WHOLE_WINDOWS

    def out_shape(self, shape):
        f = self.first_axis
        return tuple(shape[:f]) + tuple(shape[f + j] if m is None else out_dim(m) for j, m in enumerate(self.m))

    def cost(self, shape, isz):
        f = self.first_axis
        lead = prod(guess_len(d) for d in shape[:f])
        outs = [guess_len(d) for d in self.out_shape(shape)[f:]]
        kmax = [1 if m is None else ceil(guess_len(shape[f + j]) / guess_len(m)) + 1 for j, m in enumerate(self.m)]
        gathered = lead * prod(outs) * prod(kmax)
        tables = (12 * sum(n is None for n in self.n) + 10) * C.NODE  # ~12 small nodes per symbolic table
        if not self.tie_safe:  # priced for inputs without NaN: the separable first maximum (first_max.py)
            ins = [guess_len(d) for d in shape[f:]]
            return first_max_seconds(lead, ins, outs, kmax, isz, True) + tables
        return argmax_seconds(lead, gathered, sum(m is not None for m in self.m), isz) + tables

    @property
    def ops(self):
        tables = ("Div", "Sub", "Min", "Less", "Cast", "Equal", "Slice", "Concat")  # runtime_window_table; length 0
        choice = ("Equal", "ReduceMin") if self.tie_safe else ("ArgMax",) + LAZY_OPS  # lazy: onnxruntime target
        return tuple(dict.fromkeys(ARGMAX_OPS + tables + choice))

    def emit_both(self, em, x, shape, elem, y, indices):
        lead, k = self.first_axis, len(self.m)
        lengths: dict[int, str] = {}
        shape_of_x: list[str] = []

        def length(j: int) -> str:  # axis j's length as a 0-d int64 tensor
            if j not in lengths:
                if isinstance(self.n[j], int):
                    lengths[j] = int64_scalar(em, "n", self.n[j])
                else:
                    if not shape_of_x:
                        shape_of_x.append(em.op("Shape", [x]))
                    lengths[j] = em.op("Gather", [shape_of_x[0], int64_scalar(em, "axis", lead + j)], axis=0,
                                       hint="length")
            return lengths[j]

        def product(factors: list[int | str]) -> int | str:
            static = prod(f for f in factors if isinstance(f, int))
            out: int | str = static
            for f in factors:
                if isinstance(f, str) and out == 1:
                    out = f
                elif isinstance(f, str):  # the static part becomes a constant only where a Mul reads it
                    out = em.op("Mul", [out if isinstance(out, str) else int64_scalar(em, "factor", out), f])
            return out

        changed = [j for j in range(k) if self.m[j] is not None]
        tables: dict[int, str | np.ndarray] = {}
        kmax: dict[int, int | str] = {}
        # each output length as an int, or a 0-d int64 tensor (read from the graph's size tensor)
        ms = {j: runtime_size(em, self.m[j]) if isinstance(self.m[j], RuntimeDim) else self.m[j] for j in changed}
        # a runtime output length may be 0 (torch's empty output of floor(18 / 32)), where the flat layout cannot
        # be reshaped: computed at 1 there and sliced back to 0 at the end
        empty_able = {j: ms[j] for j in changed if isinstance(ms[j], str)} if indices else {}
        for j in empty_able:
            zero = em.op("Equal", [ms[j], int64_scalar(em, "zero", 0)])
            ms[j] = em.op("Add", [ms[j], em.cast(zero, TensorProto.INT64)], hint="output_length_at_least_1")
        for j in changed:
            if isinstance(self.n[j], int) and isinstance(ms[j], int):
                tables[j] = W.window_table(self.n[j], ms[j])
                kmax[j] = int(tables[j].shape[1])
            else:
                tables[j], kmax[j] = runtime_window_table(em, length(j), ms[j])
        kall = product([kmax[j] for j in changed])
        n_out = product([ms[j] if j in tables else
                         (self.n[j] if isinstance(self.n[j], int) else length(j)) for j in range(k)])

        flat = None
        if indices:
            # flat input index of every (output position, window element): sum_j coordinate_j * stride_j,
            # laid out [out_1..out_k, kmax_c...] (output-major, each part row-major), as emit_argmax reads it
            rank = len(changed) + k
            terms: list[str] = []
            stride: int | str = 1
            for j in reversed(range(k)):
                if j in tables and not isinstance(ms[j], int):  # [m, kmax], both runtime: placed by Unsqueeze
                    coord = em.unsqueeze(tables[j], [b for b in range(rank) if b not in (j, k + changed.index(j))])
                else:
                    dims = [1] * rank
                    if j in tables:
                        t = tables[j]
                        coord = em.const(f"window_table_{j}", t) if isinstance(t, np.ndarray) else t
                        dims[j], dims[k + changed.index(j)] = self.m[j], -1
                    else:
                        coord = (em.ints("coordinate", range(self.n[j])) if isinstance(self.n[j], int) else
                                 em.op("Range", [int64_scalar(em, "zero", 0), length(j), int64_scalar(em, "one", 1)],
                                       hint="coordinate"))
                        dims[j] = -1
                    coord = em.op("Reshape", [coord, em.ints("shape", dims)])
                if stride != 1:
                    by = stride if isinstance(stride, str) else int64_scalar(em, "stride", stride)
                    coord = em.op("Mul", [coord, by])
                terms.append(coord)
                if j > 0:
                    stride = product([stride, self.n[j] if isinstance(self.n[j], int) else length(j)])
            acc = terms[0]
            for t in terms[1:]:
                acc = em.op("Add", [acc, t])
            flat = em.op("Reshape", [acc, em.ints("flat", [-1])], hint="flat_index")
        # a static axis's table stays an array: made a constant by the emitter that reads it (an If branch's own)
        table_names = [tables.get(j) for j in range(k)]
        separable = [PooledAxis(table_names[j], kmax.get(j, 1), ms.get(j, n_j), n_j)
                     for j, n_j in ((j, self.n[j] if isinstance(self.n[j], int) else length(j)) for j in range(k))]
        # over 2+ pooled axes, finite inputs whose windows are small AT RUN TIME take every window at once
        whole = flat if indices and len(changed) >= 2 and not self.tie_safe and self.whole_windows_max else None
        outs = [em.fresh("values_at_least_1"), em.fresh("indices_at_least_1")] if empty_able else [y, indices]
        emit_argmax(em, x, len(shape), table_names, kall, n_out, elem, self.tie_safe, outs[0], outs[1], flat,
                    lazy=not self.tie_safe, separable=separable if changed else None, whole_windows=whole,
                    whole_windows_max=self.whole_windows_max)
        if empty_able:
            ends = em.op("Concat", [em.unsqueeze(m, [0]) for m in empty_able.values()], axis=0)
            bounds = [em.ints("zeros", [0] * len(empty_able)), ends, em.ints("axes", [lead + j for j in empty_able])]
            for full, out in zip(outs, (y, indices)):
                em.op("Slice", [full, *bounds], out=out)

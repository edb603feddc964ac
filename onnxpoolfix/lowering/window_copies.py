"""The portable target's static max pooling without its indices read as window copies (review89): per changed
axis one Concat of Slices laying the windows side by side, each padded to the axis' longest by a copy of its own
first element, every axis copied before any reduction; then the blocks pooled (a ReduceMax per axis over a 4-D
Reshape before opset 18, one MaxPool from opset 18 and for 3-D pools). ncnn (through pnnx) runs every op of it.

Why: onnxruntime's ``quantize_static`` (QDQ, its defaults) quantizes every input and the output of a Concat, each
with its own calibrated range, and nothing of a ReduceMax: the per-axis Concat of the window maxima the window
slices wrote (:mod:`.window_slices`) rounded each maximum twice more, 0.9e-2 to 1.45e-2 relative on the static
max fixtures. A Concat of windows covering its axis holds every value of its input, so its calibrated range, scale
and zero point are its input's, and requantizing values on that grid changes none; Slice, Reshape and MaxPool
carry their input's parameters. What remains is the quantization of the input itself (measured equal to torch's
pool of the fake-quantized input: tests/lowering/test_window_copies.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from onnx import TensorProto

from .. import windows as W
from . import cost as C
from .base import axis_windows, compute_dtype
from .separable import SeparableStep
from .steps import OneAxisStep, PoolStep, Step, numel


def window_pieces(n: int, m: int) -> tuple[tuple[int, int], ...]:
    """The ``[start, stop)`` runs of the axis copied in order: each window, then (where it is shorter than the
    longest, ``K``) its first ``K - len`` elements again; touching runs merged."""
    k = W.max_window(n, m)
    pieces: list[tuple[int, int]] = []
    for s, e in W.windows(n, m):
        runs = [(s, e)]
        short = k - (e - s)
        while short > 0:  # (adaptive windows differ by at most one in length: one run of one element)
            take = min(short, e - s)
            runs.append((s, s + take))
            short -= take
        for a, b in runs:
            if pieces and pieces[-1][1] == a:
                pieces[-1] = (pieces[-1][0], b)
            else:
                pieces.append((a, b))
    return tuple(pieces)


@dataclass(frozen=True)
class WindowCopiesStep(OneAxisStep):
    """One axis ``n -> m`` laid out as ``m`` blocks of ``K`` (the longest window): ``[.., n, ..] -> [.., m*K,
    ..]``, every block a window (padded with copies of its own elements). Pooling the blocks (kernel = stride
    = K) is the adaptive max; their mean is no adaptive mean, but the NaN carrier's (0, or NaN where a window
    holds one) comes out as the window's, so the step is its own mean twin."""

    @property
    def block(self) -> int:
        return W.max_window(self.n, self.m)

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = self.m * self.block
        return tuple(out)

    def cost(self, shape, itemsize):
        pieces = window_pieces(self.n, self.m)
        return (len(pieces) + 1) * C.NODE + 2 * numel(self.out_shape(shape)) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        pieces = window_pieces(self.n, self.m)
        if pieces == ((0, self.n),):
            return x
        axes = em.ints("axes", [self.axis])
        cuts = [x if (a, b) == (0, self.n) else
                em.op("Slice", [x, em.ints("copy_start", [a]), em.ints("copy_end", [b]), axes], hint="window_copy")
                for a, b in pieces]
        return em.op("Concat", cuts, axis=self.axis)

    @property
    def ops(self):
        return ("Slice", "Concat")

    def mean_twin(self):
        return self


@dataclass(frozen=True)
class BlockReduceStep(Step):
    """The blocks of :class:`WindowCopiesStep` reduced by ReduceMax (or its twin ReduceMean): per blocked axis,
    last first, a Reshape to ``[N, -1, K, rest]`` (4-D: ncnn's Mat) and a ReduceMax over the K dim; a Reshape
    to the pooled shape last."""

    op_type: str  # ReduceMax | ReduceMean
    blocks: tuple[tuple[int, int], ...]  # (axis, K), axes ascending

    def out_shape(self, shape):
        k = dict(self.blocks)
        return tuple(d // k[a] if a in k else d for a, d in enumerate(shape))

    def cost(self, shape, itemsize):
        return (2 * len(self.blocks) + 1) * C.NODE + 2 * numel(shape) * itemsize / C.BANDWIDTH

    def emit(self, em, x, shape, elem):
        lead = shape[0] if isinstance(shape[0], int) else 0
        cur = list(shape)
        for axis, k in reversed(self.blocks):
            rest = numel(tuple(cur[axis + 1:]))
            x = em.op("Reshape", [x, em.ints("shape", [lead, -1, k, rest])])
            x = em.reduce(self.op_type, x, [2], keepdims=0)
            cur[axis] //= k
        out = [lead] + [d if isinstance(d, int) else -1 for d in cur[1:]]
        return em.op("Reshape", [x, em.ints("shape", out)])

    @property
    def ops(self):
        return ("Reshape", self.op_type)

    def mean_twin(self):
        return replace(self, op_type="ReduceMean") if self.op_type == "ReduceMax" else None


def copies_apply(spec) -> bool:
    """Where the portable target writes its static max pooling as window copies: every pooled axis static, a
    1-D or 2-D pool, or a 3-D one as two 2-D ones but in float64 (its block MaxPool's twin, an AveragePool,
    has no float64 kernel in onnxruntime)."""
    if spec.kind != "max" or spec.target != "portable" or not spec.static or spec.ndim != spec.k + 2:
        return False
    return spec.k <= 2 or compute_dtype(spec) != TensorProto.DOUBLE


def copies_steps(spec) -> list[Step]:
    """The copies of every changed axis, then their blocks reduced: by one ReduceMax per axis before opset 18
    (MNN's MaxPool starts its max at -2^24), by one MaxPool over them all from opset 18 (whose ReduceMax takes
    its axes as an input, which pnnx leaves as a layer ncnn does not have) and for float64 (no float64
    AveragePool, the twin, in onnxruntime). A 3-D pool: the copies on 4-D planes as :mod:`.separable` cuts them,
    the blocks by 2-D MaxPools (what pnnx drops the batch at: measured, a ReduceMax form failed to load)."""
    def pool(blocks):
        return PoolStep("MaxPool", 2, tuple((axis, W.Uniform(k, k)) for axis, k in blocks))

    axes = axis_windows(spec)
    if spec.k == 3:
        d, h, w = axes
        plane = tuple(WindowCopiesStep(axis, a.n, a.m) for a, axis in ((h, 2), (w, 3)) if not a.keep)
        depth = (WindowCopiesStep(2, d.n, d.m),) if not d.keep else ()
        steps = [SeparableStep(plane, depth + ((pool([(2, depth[0].block)]),) if depth else ()))]
        if plane:
            steps.append(SeparableStep((pool([(s.axis, s.block) for s in plane]),), ()))
        return steps
    copies = [WindowCopiesStep(a.axis, a.n, a.m) for a in axes if not a.keep]
    blocks = tuple((c.axis, c.block) for c in copies)
    if spec.opset >= 18 and compute_dtype(spec) != TensorProto.DOUBLE:
        return copies + [pool(blocks)]
    return copies + [BlockReduceStep("ReduceMax", blocks)]

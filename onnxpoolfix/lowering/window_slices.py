"""The portable target's windows as Slices: each output window (or run of windows) a Slice of the input, reduced
(docs/targets.md, "--target portable": the form, the runtimes that take it, and why each choice).

Symbolic pooled sizes: the bounds ``start_i = (i * n) div m``, ``end_i = ((i + 1) * n + m - 1) div m`` computed
per window as 0-D int64 arithmetic on ``Gather(Shape(x), axis)`` (``k * n`` shared by ``end_{k-1}`` and
``start_k``), each bound Unsqueezed to one element: 0-D, not a vector of bounds, for TVM 0.27 (review33). Static
sizes: constant bounds (ncnn has no Gather layer: the portable target's averages take this form over the window
sums wherever it applies), a static average over a 1-D or 2-D pool's spatial axis in runs (:func:`window_runs`;
long windows: :meth:`WindowSlicesStep.at`). Each window or run is reduced (max: the base class' NaN / -inf wrapper)
and one Concat puts them back in order; the axes one after the other, the smaller output first read by the next
(static max pooling whose windows are ReduceMaxes: the windows of consecutive axes cut as a tree and joined once,
:mod:`.window_grid`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from onnx import TensorProto, numpy_helper

from .. import windows as W
from ..graph.emit import EQUAL_NAN_MIN_OPSET
from ..reason import needs_opset
from ..spec import RuntimeDim
from ..words import TARGET_PORTABLE
from . import cost as C
from .avg_non_finite import WEIGHTLESS
from .base import Lowering, axis_windows, compute_dtype, reduce_whole
from .runtime_windows import guess_len
from .separable import SeparableStep
from .steps import OneAxisStep, Step, numel
from .sum_steps import WindowSumStep
from .window_grid import MAX_GRID, WindowGridStep

#: the most windows one axis may be cut into (each is a Slice and a Reduce node)
MAX_WINDOWS = 64


@dataclass(frozen=True)
class WindowSlicesStep(OneAxisStep):
    """One axis pooled ``n -> m`` (``n`` an int, or None where it is read at run time): ``m`` Slices, each
    reduced with ``op_type`` (keepdims), concatenated along the axis."""

    op_type: str  # ReduceMean | ReduceMax
    #: each window an AveragePool over its slice (kernel = its length) instead of a ReduceMean: see pool_windows()
    pool_windows: bool = False
    #: the mean twin (max pooling's NaN carrier) in runs of AveragePools even where the max is not: a 3-D pool's
    #: planes (:mod:`.separable`), where a pooling op is what lets pnnx drop the batch (ncnn)
    twin_pools: bool = False
    #: below opset 10 the static windows are cut by Split (:func:`split_cut`), set by :meth:`at`
    split_cuts: bool = False

    def mean_twin(self):
        if self.op_type != "ReduceMax":
            return None
        return replace(self, op_type="ReduceMean", pool_windows=self.pool_windows or self.twin_pools)

    @property
    def pool_op(self) -> str:
        """The pooling op of a run of windows (:meth:`_emit_runs`)."""
        return "AveragePool" if self.op_type == "ReduceMean" else "MaxPool"

    def cost(self, shape, itemsize):
        dims = list(shape)
        dims[self.axis] = guess_len(dims[self.axis])
        out = numel(self.out_shape(shape))
        if self.pool_windows:
            return (self._runs_cost(tuple(dims), itemsize) + C.NODE + 2 * out * itemsize / C.BANDWIDTH
                    + self._split_cost(dims, itemsize))
        inner, lead = numel(tuple(dims[self.axis + 1:])), numel(tuple(dims[:self.axis]))
        # Shape, Gather, and 6 0-D int64 nodes a window, measured at 0.7 to 2.3 us a window in onnxruntime
        # (12 windows: +8 us, 128 windows: +300 us against the vector bounds; RESULTS.md, review33)
        bounds = (2 + self.m) * C.NODE if self.n is None else 0.0
        windows = out * guess_len(dims[self.axis]) / self.m * (self.m if self.n is None else 1)
        nodes = bounds + (2 * self.m + 1) * C.NODE
        # onnxruntime's reduction runs element by element over an axis followed by 2 to REDUCE_NARROW_INNER - 1
        # elements, and over one preceded by nothing (N = C = 1); over the last axis it reads contiguous windows
        if 1 < inner < C.REDUCE_NARROW_INNER or (lead == 1 and inner > 1):
            return nodes + numel(tuple(dims)) * itemsize / C.BANDWIDTH + windows * C.REDUCE_NARROW_READ
        # a Slice copies each window (read, write), its ReduceMean reads the copy back, from cache unless one
        # copy is over half of it (large inputs: [32,64,128,128] -> 3x3, 45 MB a Slice, 2.1x-2.9x the
        # Kronecker MatMul; [8,256,64,64] -> 3x3, 11 MB; [4,3,1024,1024] -> 7x7, 7 MB, stays: RESULTS.md,
        # "window copies out of cache"), and writes each output
        read_back = windows * itemsize / C.BANDWIDTH if windows / self.m * itemsize > C.CACHE_BYTES / 2 else 0.0
        return (nodes + windows * 2 * itemsize / C.BANDWIDTH + read_back + out * C.REDUCE_OUT
                + self._split_cost(dims, itemsize))

    def _split_cost(self, shape, itemsize) -> float:
        """What a Split cut (below opset 10) copies beyond the Slice it replaces: the rest of the axis, per cut."""
        if not self.split_cuts:
            return 0.0
        cuts = len(window_runs(self.n, self.m)) if self.pool_windows else self.m
        return cuts * (C.NODE + 2 * numel(tuple(shape)) * itemsize / C.BANDWIDTH)

    def _runs_cost(self, shape, itemsize) -> float:
        """Each run's Slice (a copy of what it covers) and AveragePool (as :class:`~.steps.PoolStep` costs it)."""
        total = 0.0
        for run in window_runs(self.n, self.m):
            covered = list(shape)
            covered[self.axis] = (run.count - 1) * run.step + run.length
            region = numel(tuple(covered))
            pooled = region // covered[self.axis] * run.count
            slow = max(1.0, run.length / C.POOL_LONG_KERNEL)
            total += (2 * C.NODE + 2 * region * itemsize / C.BANDWIDTH + pooled * run.length * slow / C.POOL_RATE
                      + numel(tuple(shape[:2])) * C.POOL_RUN_PLANE)
            if region * itemsize > C.CACHE_BYTES:
                total += region * C.POOL_OUT_OF_CACHE
        return total

    def at(self, shape, itemsize, opset):
        """Below opset 18, windows longer than ``POOL_LONG_KERNEL`` as a ReduceMean each: onnxruntime's
        AveragePool slows with the kernel's length (1x3x1024x1024 -> 7 along H, kernel 147: 6.6 ms; the
        ReduceMeans of the same windows 0.5 ms), while over short windows the runs win (1x2048x9x9 -> 7x7:
        0.6 ms, a ReduceMean per window 2.2 ms). From opset 18 the runs whatever the length (pnnx drops opset
        18's Reduce axes input when it writes ncnn: :func:`pool_windows`)."""
        step = replace(self, split_cuts=True) if opset < SLICE_INPUTS_OPSET and self.n is not None else self
        if not step.pool_windows or opset >= 18:
            return step
        if max(run.length for run in window_runs(self.n, self.m)) > C.POOL_LONG_KERNEL:
            return replace(step, pool_windows=False)
        return step

    def bounds(self, em, x) -> tuple[list[str], list[str]]:
        """The ``m`` windows' one-element start and end tensors (int64 ``[1]``)."""
        if self.n is not None:  # a static axis: constants
            w = W.windows(self.n, self.m)
            return [em.ints("window_start", [s]) for s, _ in w], [em.ints("window_end", [e]) for _, e in w]
        # one 0-D chain per window, not a vector of bounds (TVM: the module docstring); the 0-D constants are
        # Constant nodes, which TVM folds under keep_params_in_input=True too (initializers become inputs there)
        def scalar(hint: str, v: int) -> str:
            return em.op("Constant", [], hint=hint, value=numpy_helper.from_array(np.asarray(v, np.int64)))

        n = em.op("Gather", [em.op("Shape", [x]), scalar("axis", self.axis)], axis=0, hint="length")  # 0-D
        m, m_minus_1 = scalar("m", self.m), scalar("m_minus_1", self.m - 1)
        starts, ends = [em.ints("window_start", [0])], []
        for k in range(1, self.m + 1):
            kn = em.op("Mul", [n, scalar("i", k)])  # k * n: end_{k-1} and start_k
            ends.append(em.unsqueeze(em.op("Div", [em.op("Add", [kn, m_minus_1]), m], hint="window_end"), [0]))
            if k < self.m:
                starts.append(em.unsqueeze(em.op("Div", [kn, m], hint="window_start"), [0]))
        return starts, ends

    def emit(self, em, x, shape, elem):
        if self.pool_windows:
            return self._emit_runs(em, x, shape)
        if self.split_cuts:  # (generators: each window cut just before its reduction)
            cuts = (split_cut(em, x, self.axis, self.n, s, e) for s, e in W.windows(self.n, self.m))
        else:
            starts, ends = self.bounds(em, x)
            axes = em.ints("axes", [self.axis])
            cuts = (em.op("Slice", [x, s, e, axes], hint="window") for s, e in zip(starts, ends))
        pooled = [em.reduce(self.op_type, cut, [self.axis], keepdims=1) for cut in cuts]
        return pooled[0] if self.m == 1 else em.op("Concat", pooled, axis=self.axis)

    def _emit_runs(self, em, x, shape):
        """Per run of :func:`window_runs`: the Slice it covers (none where that is the whole axis), averaged by
        one AveragePool whose kernel is the run's window length and stride its step along the axis (length 1:
        the Slice alone, stepped); the runs joined by one Concat."""
        axes: list[str] = []  # one constant, made at the first Slice (an unread one makes onnxruntime warn)

        def cut(start: int, stop: int, step: int, hint: str) -> str:
            if self.split_cuts:  # (a run of single elements: starts step by 1 here, a window being >= n/m long)
                part = split_cut(em, x, self.axis, self.n, start, stop)
                return part if step == 1 else em.op(self.pool_op, [part], kernel_shape=[1] * (len(shape) - 2),
                                                    strides=[step if a == self.axis else 1 for a in spatial])
            steps = [em.ints("step", [step])] if step != 1 else []
            bounds = [em.ints("run_start", [start]), em.ints("run_end", [stop])]
            if not axes:
                axes.append(em.ints("axes", [self.axis]))
            return em.op("Slice", [x, *bounds, axes[0], *steps], hint=hint)

        spatial = range(2, len(shape))
        parts = []
        for run in window_runs(self.n, self.m):
            stop = run.start + (run.count - 1) * run.step + run.length
            if run.length == 1:
                parts.append(cut(run.start, stop, run.step, "window"))
                continue
            xr = x if (run.start, stop) == (0, self.n) else cut(run.start, stop, 1, "window_run")
            parts.append(em.op(self.pool_op, [xr], kernel_shape=[run.length if a == self.axis else 1 for a in spatial],
                               strides=[run.step if a == self.axis else 1 for a in spatial]))
        return parts[0] if len(parts) == 1 else em.op("Concat", parts, axis=self.axis)

    @property
    def ops(self):
        cut = "Split" if self.split_cuts else "Slice"
        if self.pool_windows:
            return (cut, self.pool_op, "Concat")
        bounds = ("Shape", "Constant", "Gather", "Mul", "Add", "Div", "Unsqueeze") if self.n is None else ()
        return bounds + (cut, self.op_type, "Concat")


def split_cut(em, x: str, axis: int, n: int, start: int, stop: int) -> str:
    """``x[start:stop]`` along ``axis`` (of length ``n``) below opset 10, where Slice takes its bounds as
    attributes: one Split at the bounds (attribute ``split``), its middle part, or ``x`` itself where the cut is
    the whole axis. Not Slice-1: TVM 0.27's ONNX frontend converts every Slice with its opset 13 converter, which
    reads the bounds as inputs (``Cannot cast <class 'NoneType'> to list of Expr``; review76); not a Gather:
    ncnn has no layer for it."""
    if (start, stop) == (0, n):
        return x
    parts = [length for length in (start, stop - start, n - stop) if length]
    outs = [em.fresh("window_cut") if i == int(start > 0) else em.fresh("window_cut_unread") for i in range(len(parts))]
    em.op("Split", [x], out=outs, axis=axis, split=parts)
    return outs[int(start > 0)]


@dataclass(frozen=True)
class WindowRun:
    """``count`` consecutive windows of one ``length`` whose starts are ``start``, ``start + step``, ..."""

    start: int
    length: int
    step: int
    count: int


def window_runs(n: int, m: int) -> list[WindowRun]:
    """The windows of ``n -> m`` in order, as the fewest runs taken greedily: a window joins the run before it
    where its length is the run's and its start is one step (>= 1) past the run's last."""
    runs: list[WindowRun] = []
    for s, e in W.windows(n, m):
        if runs:
            r = runs[-1]
            last = r.start + (r.count - 1) * r.step
            step = s - last if r.count == 1 else r.step
            if e - s == r.length and step >= 1 and s == last + step:
                runs[-1] = WindowRun(r.start, r.length, step, r.count + 1)
                continue
        runs.append(WindowRun(s, e - s, 1, 1))
    return runs


def pool_windows(spec, axis: int, n, planes: bool = False) -> bool:
    """Whether a static axis is pooled as runs of AveragePools or MaxPools (:meth:`WindowSlicesStep._emit_runs`)
    rather than a ReduceMean/ReduceMax per window: fewer nodes, each window read once. Over a 1-D or 2-D pool's
    spatial dims (no 3-D pooling op: MNN, TFLite), where onnxruntime has an AveragePool kernel (max pooling's NaN
    test averages too). Max pooling only from opset 18, whose ReduceMax takes its axes as an input, which pnnx leaves
    as a layer ncnn does not have; below it ReduceMax, as MNN's MaxPool starts its max at -2^24 (docs/targets.md).
    ``planes``: an axis of a 3-D pool cut as 2-D ones (:mod:`.separable`), whose tensors are 4-D."""
    max_ok = spec.kind == "max" and spec.opset >= 18
    rank_ok = (spec.ndim in (3, 4) and spec.k <= 2) or planes
    return ((spec.kind == "avg" or max_ok) and isinstance(n, int) and rank_ok
            and axis >= 2 and compute_dtype(spec) != TensorProto.DOUBLE)


def slices_fit(spec) -> bool:
    """Every changed axis of ``spec`` is cut into at most :data:`MAX_WINDOWS` windows, from opset 10 (Slice's
    bounds as inputs), or static averages before (cut by Split): window_slices applies, and the portable target
    prefers it to Gathers (ncnn has none)."""
    return below_slice_inputs(spec) is None and all(a.keep or a.m <= MAX_WINDOWS for a in axis_windows(spec))


#: Slice takes its bounds as inputs from this opset; before, static windows are cut by Split (:func:`split_cut`)
SLICE_INPUTS_OPSET = 10


def below_slice_inputs(spec) -> str | None:
    """Why window_slices does not apply below opset 10, or None: symbolic bounds need Slice's inputs, and max
    pooling's NaN test without IsNaN (ncnn, MNN) opset 11. The portable and tensorrt targets' static averages are
    cut by Split there; the default target keeps its window sums (onnxruntime: [1,512,10,10] -> 7x7 at opset 8,
    78 us as window sums, 284 us as Split cuts; review76)."""
    if spec.opset >= SLICE_INPUTS_OPSET or (spec.kind == "avg" and spec.static and spec.target in WEIGHTLESS):
        return None
    need = EQUAL_NAN_MIN_OPSET if spec.kind == "max" and spec.target == "portable" else SLICE_INPUTS_OPSET
    return needs_opset(need, f"needs opset {need}, the model has {spec.opset}")


class WindowSlicesLowering(Lowering):
    name = "window_slices"
    summary = "per pooled axis: a Slice per window (bounds constant, or from Shape), ReduceMean/ReduceMax, Concat"
    dynamic = True
    # (no min_opset: Slice takes tensor bounds from opset 10; before, static averages are cut by Split and the
    # rest refused with the opset that would do: below_slice_inputs)
    #: the default target takes its static averages where they are estimated faster than the MatMuls (large
    #: planes: issue 33, benchmarks/RESULTS.md); exact with no If and no weights, so that file runs in ncnn/TFLite too
    #: every target (the tensorrt one for its averages, static and symbolic), listed: tests/test_roundtrip.py forces
    #: a lowering with a target other than onnxruntime from this list
    targets = frozenset({"portable", "onnxruntime", "tensorrt"})

    def check(self, spec):
        """The default target's restriction first: a reason about the opset would offer an opset it does not
        meet (symbolic sizes below opset 11 are the ``dynamic`` lowering's)."""
        if spec.target == "onnxruntime" and (spec.kind != "avg" or not spec.static or not any(
                not a.keep and a.upsample is None for a in axis_windows(spec))):
            return (f"for {TARGET_PORTABLE} (no Range or runtime matrices, max pooling without comparisons); the "
                    f"default target takes it for static averages that shrink or unevenly stretch some axis, where "
                    f"it was measured (symbolic sizes: the dynamic lowering runs faster in onnxruntime)")
        if spec.target == "tensorrt" and spec.kind != "avg":
            return "the tensorrt target's max pooling keeps MaxPool, ReduceMax and Gathers"
        return super().check(spec)

    def _check(self, spec):
        below = below_slice_inputs(spec)
        if below:
            return below
        for a, size in zip(axis_windows(spec), spec.node.output_size):
            if isinstance(size, RuntimeDim):
                return (f"the output size of axis {a.axis} is computed from the input's size at run time; the "
                        f"window Slices need a constant one")
            if not a.keep and a.m > MAX_WINDOWS and not summed_axis(spec, a):
                return f"axis {a.axis} has {a.m} windows (at most {MAX_WINDOWS} are cut as Slices)"
        return None

    def _steps(self, spec):
        op = "ReduceMean" if spec.kind == "avg" else "ReduceMax"
        if separable(spec):
            return [separable_step(spec, op)]
        changed = [a for a in axis_windows(spec) if not a.keep]
        steps: list[Step] = []
        whole = tuple(a.axis for a in changed if a.m == 1)
        if whole:
            steps += reduce_whole(spec, whole)
        # the axis whose output is smallest relative to its input first: later axes slice less
        rest = sorted((a for a in changed if a.m != 1), key=lambda a: a.m / guess_len(a.n))
        stages = [WindowSumStep(a.axis, a.n, a.m) if summed_axis(spec, a) else
                  WindowSlicesStep(a.axis, a.n if isinstance(a.n, int) else None, a.m, op,
                                   pool_windows(spec, a.axis, a.n)) for a in rest]
        return steps + grid_or(stages, spec.kind)


def grid_or(stages: list[Step], kind: str, planes: bool = False) -> list[Step]:
    """Max pooling's window Slices of two or more consecutive static axes, at most :data:`MAX_GRID` windows in
    all, as one :class:`~.window_grid.WindowGridStep` (one join for quantize_static), else ``stages``; ``planes``:
    a 3-D pool's planes (:func:`separable_step`)."""
    cut = [s for s in stages if isinstance(s, WindowSlicesStep) and s.n is not None and not s.pool_windows]
    axes = sorted(s.axis for s in cut)
    if kind != "max" or len(cut) < 2 or len(cut) != len(stages) or axes != list(range(axes[0], axes[0] + len(axes))):
        return stages
    by_axis = sorted(cut, key=lambda s: s.axis)
    if math.prod(s.m for s in by_axis) > MAX_GRID:
        return stages
    return [WindowGridStep(tuple(axes), tuple(s.n for s in by_axis), tuple(s.m for s in by_axis),
                           plane_stages=tuple(stages) if planes else ())]


def summed_axis(spec, a) -> bool:
    """The tensorrt target's static axis of more than :data:`MAX_WINDOWS` windows beside a symbolic pooled one:
    window sums along it (:class:`~.sum_steps.WindowSumStep`, its table constant), Slices on the others; no other
    TensorRT average keeps NaN in its windows (review90). The portable target refuses it: ncnn has no Gather."""
    return (spec.target == "tensorrt" and not spec.static and not a.keep and isinstance(a.n, int)
            and a.m > MAX_WINDOWS)


def separable(spec) -> bool:
    """The portable target's static batched 3-D pools go as two 2-D ones (:mod:`.separable`: ncnn), and the
    tensorrt target's averages (no 3-D pooling op: MNN, TFLite; TensorRT pools 2-D as well)."""
    return spec.target in WEIGHTLESS and spec.k == 3 and spec.ndim == 5 and spec.static


def separable_step(spec, op: str) -> SeparableStep:
    """Axes H and W (2 and 3 of ``[N, C*D, H, W]``), then D (2 of ``[N, C, D, H'*W']``), each changed one cut
    into windows (one spanning an axis pooled to 1); the max's NaN carrier averaged in runs of AveragePools (the
    pooling op pnnx drops the batch at, :attr:`WindowSlicesStep.twin_pools`)."""
    d, h, w = axis_windows(spec)
    double = compute_dtype(spec) == TensorProto.DOUBLE

    def step(a, axis):
        return WindowSlicesStep(axis, a.n, a.m, op, pool_windows(spec, axis, a.n, planes=True), twin_pools=not double)

    plane = tuple(grid_or([step(a, axis) for a, axis in ((h, 2), (w, 3)) if not a.keep], spec.kind, planes=True))
    return SeparableStep(plane, (step(d, 2),) if not d.keep else ())

"""The steps of the max lowerings that are not plain pools: MaxPool(kmin, stride 1) + 2 Gathers + Max,
the window-table Gather + ReduceMax, and the NaN/-inf guard that makes MaxPool/ReduceMax agree with torch's
max on non-finite inputs (:class:`NonFiniteMaxStep`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import GraphProto, TensorProto

from .. import windows as W
from ..graph.emit import Emitter, np_dtype
from . import cost as C
from .steps import OneAxisStep, WrappedSteps, emit_chain, gather_cost, numel, run_cost, window_gather_cost


@dataclass(frozen=True)
class MaxPoolGatherStep(OneAxisStep):
    """Max along one axis with non-uniform windows: ``M = MaxPool(kmin, stride 1)``, then
    ``max(M[start_i], M[end_i - kmin])``. Exact: every window is covered by those two kmin-windows because
    the longest window is at most twice the shortest. Needs the input to be N, C, spatial."""

    first_spatial: int

    def _parts(self):
        w = W.windows(self.n, self.m)
        kmin = min(e - s for s, e in w)
        starts = tuple(s for s, _ in w)
        lasts = tuple(e - kmin for _, e in w)
        return kmin, starts, lasts

    def cost(self, shape, itemsize):
        kmin, starts, lasts = self._parts()
        out_shape = self.out_shape(shape)
        e_in, e_out = numel(shape), numel(out_shape)
        c = C.NODE * 2 + gather_cost(out_shape, self.axis)
        if kmin > 1:
            rate = C.POOL_RATE_3D if len(shape) - self.first_spatial >= 3 else C.POOL_RATE
            c += C.NODE + e_in * kmin / rate + 2 * e_in * itemsize / C.BANDWIDTH
        if starts != lasts:
            c += C.NODE + gather_cost(out_shape, self.axis) + 3 * e_out * itemsize / C.BANDWIDTH
        return c

    def emit(self, em, x, shape, elem):
        kmin, starts, lasts = self._parts()
        src = x
        if kmin > 1:
            spatial = range(self.first_spatial, len(shape))
            kernel = [kmin if a == self.axis else 1 for a in spatial]
            src = em.op("MaxPool", [x], kernel_shape=kernel, strides=[1] * len(kernel))
        a = em.op("Gather", [src, em.ints("window_starts", starts)], axis=self.axis)
        if starts == lasts:  # all windows of length kmin (e.g. 10 -> 4): one gather covers them
            return a
        b = em.op("Gather", [src, em.ints("window_lasts", lasts)], axis=self.axis)
        return em.op("Max", [a, b])

    @property
    def ops(self):
        return ("MaxPool", "Gather", "Max")


@dataclass(frozen=True)
class WindowGatherStep(OneAxisStep):
    """Max along one axis via the window table: Gather ``[m, kmax]`` indices (short windows padded with
    their own last index), then ReduceMax over the window dim. Exact for any windows and any rank."""

    def cost(self, shape, itemsize):
        return window_gather_cost(shape, self.out_shape(shape), self.axis, W.max_window(self.n, self.m), itemsize)

    def emit(self, em, x, shape, elem):
        table = em.const("window_table", W.window_table(self.n, self.m))
        return gather_window_max(em, x, table, self.axis, len(shape))

    ops = ("Gather", "ReduceMax", "Transpose")


def gather_window_max(em: Emitter, x: str, table: str, axis: int, rank: int) -> str:
    """``ReduceMax(Gather(x, table, axis))`` over the window dim.

    onnxruntime's Gather along the LAST axis copies element by element (10x slower than along any other
    axis), so a last axis is first moved to the front, where every index copies one contiguous block, and
    moved back after the ReduceMax (measured 725 -> 309 us for 1x256x33x33 -> 8 along W).
    """
    if axis != rank - 1:
        return window_max(em, x, table, axis)
    front = em.op("Transpose", [x], perm=[rank - 1] + list(range(rank - 1)))
    return em.op("Transpose", [window_max(em, front, table, 0)], perm=list(range(1, rank)) + [0])


def window_max(em: Emitter, x: str, table: str, axis: int) -> str:
    """ReduceMax over the windows of ``table`` (``[m, kmax]``) gathered along ``axis``."""
    return em.reduce("ReduceMax", em.op("Gather", [x, table], axis=axis), [axis + 1], keepdims=0)


# ops whose onnxruntime CPU kernels are not torch's max on non-finite input (measured, onnxruntime 1.32):
# MaxPool/GlobalMaxPool give -FLT_MAX for a window of -inf (and for an all-NaN window with stride 1), and
# MaxPool/ReduceMax drop a NaN unless it comes last/first. torch: any NaN in the window -> NaN; all -inf -> -inf.
NON_FINITE_UNSAFE_MAX = frozenset({"MaxPool", "GlobalMaxPool", "ReduceMax"})
#: the comparison-free form's code of a window of -inf alone: above every runtime's max-pooling start (-FLT_MAX,
#: MNN's -2^24), Exp of it infinite in float16, float32 and float64
NEG_INF_CODE = 1000.0


@dataclass(frozen=True)
class NonFiniteMaxStep(WrappedSteps):
    """Wraps max steps so NaN and -inf come out as torch's.

    Exact form: the same steps also run on a per-element code (2 = NaN, 0 = -inf, 1 = anything else),
    whose window max says which windows hold a NaN (-> NaN) or only -inf (-> -inf); elsewhere the inner
    steps' value stands (exact for those windows). That doubles the pooling work, so with ``lazy`` (the
    onnxruntime target) it sits in the else-branch of an If whose condition is "the input's sum is
    finite" (one ReduceSum pass): finite inputs, nearly all of them, run only the plain steps. TensorRT
    gets the eager form (its If is a conditional layer that evaluates both branches anyway).
    Needs opset 9 (IsNaN, Where). The portable target, where every inner step has a mean twin (window
    slices, reductions, MaxPool), takes the form without comparisons of :meth:`_comparison_free` instead (ncnn has
    no comparison layer)."""

    lazy: bool = False
    #: every mask an Equal (the portable target): MNN 3.6 compares a tensor with a constant wrongly in Less and
    #: Greater (measured: Less(x, -1) false for x = -inf), and -inf, NaN's code and -inf's code are single values
    equal_masks: bool = False

    def cost(self, shape, itemsize):
        if self.lazy:  # priced for the finite path: the plain steps + one read of x + If
            return run_cost(self.inner, shape, itemsize) + 4 * C.NODE + numel(shape) * itemsize / C.BANDWIDTH
        out = numel(self.out_shape(shape))
        if self.comparison_free:  # three poolings (M, E, S); ten elementwise passes over x, six over the output
            return (3 * run_cost(self.inner, shape, itemsize) + 16 * C.NODE
                    + numel(shape) * itemsize * 10 / C.BANDWIDTH + out * itemsize * 6 / C.BANDWIDTH)
        return (2 * run_cost(self.inner, shape, itemsize) + 6 * C.NODE
                + numel(shape) * (itemsize + 4 * 3) / C.BANDWIDTH + out * (4 + 3 * itemsize) / C.BANDWIDTH)

    def _mean_steps(self):
        """The inner steps with each window max replaced by the window mean, or None where a step has no such
        twin: what pools the NaN carrier of the form without comparisons (:meth:`_comparison_free`)."""
        twins = tuple(s.mean_twin() for s in self.inner)
        return None if None in twins else twins

    @property
    def comparison_free(self) -> bool:
        """The portable target's comparison-free form applies (every inner step has a mean twin)."""
        return self.equal_masks and not self.lazy and self._mean_steps() is not None

    @property
    def ops(self):
        if self.comparison_free:
            means = tuple(op for s in self._mean_steps() for op in s.ops)
            arith = ("Mul", "Min", "Add", "Max", "Sub", "Abs", "Neg", "Exp")
            return self.inner_ops() + tuple(op for op in dict.fromkeys(means + arith) if op not in self.inner_ops())
        masks = ("Equal",) if self.equal_masks else ("Less", "Greater")
        finite_test = ("Sub", "Equal") if self.equal_masks else ("Sub", "Not")  # (Constant: the branches' own)
        lazy = ("ReduceSum",) + finite_test + ("If", "Constant") if self.lazy else ()
        extra = ("Cast", "IsNaN", "Where") + masks + lazy
        return self.inner_ops() + extra

    def _comparison_free(self, em, x, shape, elem):
        """Torch's max without comparisons (ncnn has no comparison layer; review32 measured it bit-exact in
        onnxruntime, OpenVINO, tract, MNN, ncnn through pnnx, TVM and TFLite through onnx2tf)::

            Y = ((M - S) - G) - G
            M = the window max of x (the inner steps)
            E = the window max of Max(Min(u, -4096) + 4096, -1000), u = x * 2^(12 - maxexp) (|u| < 4096 for a
                number): -1000 exactly where the window holds only -inf, else +0
            G = 4 (Max(Exp(-E), 2) - 2) (as G - -G twice): +0, or +inf for a window of -inf alone
            S = the window mean of the NaN carrier t - t, t = Min(4096, Max(-4096, u)) + Exp(-|x|): NaN for a
                window holding a NaN, else +0 (taken as S - S: TFLite's AveragePool makes a NaN mean -inf)

        Why each constant and each branch (the runtimes' max starts, Exp's clamps, which runtime drops NaN where,
        no Mul or Add after the pooling for quantize_static: review89): docs/targets.md, "--target portable"."""
        fdt = np_dtype(elem)
        y = self.plain(em, x, shape, elem)
        # e before its Max: 0 for a number, -inf for -inf. Not Min(x, -MAX) + MAX: onnxconverter_common's float16
        # conversion runs Min/Max in float32 and clamps the other ops' constants into [1e-7, 1e4] (MAX became 1e4,
        # e -inf for every number); here it only raises the scale, which float16's range allows. Not
        # -Relu(-MAX - x): MNN's Relu makes NaN of -inf and of numbers below about -1e31.
        scale = np.array(2.0 ** (12 - np.finfo(fdt).maxexp), fdt)
        shift = np.array(4096.0, fdt)
        scaled_x = em.op("Mul", [x, em.const("scale", scale)])
        e = em.op("Min", [scaled_x, em.const("minus_shift", -shift)])
        e = em.op("Add", [e, em.const("shift", shift)])
        e = em.op("Max", [e, em.const("minus_code", np.array(-NEG_INF_CODE, fdt))], hint="neg_inf_code")
        neg_inf = self.plain(em, e, shape, elem)  # -1000 exactly where the window holds only -inf, else +0
        # the carrier's clip on the scaled x, to +-4096: what a float16 conversion casts back stays finite; two
        # branches, as each runtime drops NaN in one (tract: Max/Min; OpenVINO: the pair, a clamp; MNN: Abs; ncnn: Exp)
        clipped = em.op("Min", [em.const("shift", shift), em.op("Max", [em.const("minus_shift", -shift), scaled_x])])
        t = em.op("Add", [clipped, em.op("Exp", [em.op("Neg", [em.op("Abs", [x])])])])
        carrier = em.op("Sub", [t, t], hint="nan_carrier")
        carrier = emit_chain(em, self._mean_steps(), carrier, shape, elem)
        carrier = em.op("Sub", [carrier, carrier])  # TFLite's AveragePool makes a NaN mean -inf: NaN again
        # G = Max(Exp(-E), 2) - 2: +0 (whatever Exp(0)'s rounding), or +inf / Exp's clamp (MNN: 6.1e37), doubled
        # twice; a constant each (onnxconverter_common's float16 conversion keeps Max's in float32)
        two = [em.const("two", np.array(2.0, fdt)) for _ in range(2)]
        grow = em.op("Sub", [em.op("Max", [em.op("Exp", [em.op("Neg", [neg_inf])]), two[0]]), two[1]])
        for _ in range(2):
            grow = em.op("Sub", [grow, em.op("Neg", [grow])])
        return em.op("Sub", [em.op("Sub", [em.op("Sub", [y, carrier]), grow]), grow])

    def _exact(self, em, x, shape, elem):
        if self.comparison_free:
            return self._comparison_free(em, x, shape, elem)
        y = self.plain(em, x, shape, elem)
        f32 = TensorProto.FLOAT
        fdt = np_dtype(elem)
        one = em.const("code_one", np.array(1.0, np.float32))
        two = em.const("code_two", np.array(2.0, np.float32))
        zero = em.const("code_zero", np.array(0.0, np.float32))
        # the masks are taken in x's own dtype: a float64 value below float32's range is not -inf
        if self.equal_masks:
            neg_inf = em.op("Equal", [x, em.const("minus_inf", np.array(-np.inf, fdt))])
        else:
            neg_inf = em.op("Less", [x, em.const("lowest", np.array(np.finfo(fdt).min, fdt))])
        code = em.op("Where", [em.is_nan(x, fdt), two, em.op("Where", [neg_inf, zero, one])])
        code = self.plain(em, code, shape, f32)  # each window's max of {0, 1, 2}: exactly one of them
        if self.equal_masks:
            only_neg_inf, has_nan = em.op("Equal", [code, zero]), em.op("Equal", [code, two])
        else:
            only_neg_inf = em.op("Less", [code, em.const("half", np.array(0.5, np.float32))])
            has_nan = em.op("Greater", [code, em.const("one_half", np.array(1.5, np.float32))])
        y = em.op("Where", [only_neg_inf, em.const("minus_inf", np.array(-np.inf, fdt)), y])
        return em.op("Where", [has_nan, em.const("nan", np.array(np.nan, fdt)), y])

    def emit(self, em, x, shape, elem):
        if not self.lazy:
            return self._exact(em, x, shape, elem)
        return emit_if(em, finite_input(em, x, elem), elem,
                       ("finite_inputs", lambda sub: self.plain(sub, x, shape, elem)),
                       ("non_finite_inputs", lambda sub: self._exact(sub, x, shape, elem)))


def finite_input(em: Emitter, x: str, elem: int) -> str:
    """A bool scalar: ``sum(x)`` is finite, i.e. ``x`` holds no NaN or inf (an overflowing sum only sends a
    finite ``x`` down the exact branch); float16 is summed in float32 (its sums overflow early)."""
    summed = TensorProto.FLOAT if elem == TensorProto.FLOAT16 else elem
    xs = em.cast(x, summed) if summed != elem else x
    return em.is_finite(em.op("ReduceSum", [xs], keepdims=0), np_dtype(summed))


def branch(em: Emitter, hint: str, outputs: list[tuple[str, int]], build) -> GraphProto:
    """A subgraph for If with several outputs: ``build(sub_emitter, names)`` writes each of ``names`` (fresh
    names, one per ``(If output, dtype)`` of ``outputs``); its constants live in the outer graph."""
    from onnx import helper

    sub = em.sub()
    names = [em.fresh(f"{hint}_{out.rsplit('/', 1)[-1]}") for out, _ in outputs]
    build(sub, names)
    return helper.make_graph(sub.nodes, em.fresh(hint), [],
                             [helper.make_tensor_value_info(n, elem, None) for n, (_, elem) in zip(names, outputs)])


def emit_if(em: Emitter, cond: str, elem: int, then: tuple[str, Callable], otherwise: tuple[str, Callable]) -> str:
    """``If(cond)`` with one output of ``elem``; each branch ``(hint, build)``, ``build(sub_emitter) -> output``, is
    built in that order, its constants its own Constant nodes (:meth:`Emitter.sub`)."""
    from onnx import helper

    graphs = {}
    for key, (hint, build) in (("then_branch", then), ("else_branch", otherwise)):
        sub = em.sub()
        out = build(sub)
        if out not in {o for n in sub.nodes for o in n.output}:  # a branch must produce its output itself
            out = sub.op("Identity", [out])
        graphs[key] = helper.make_graph(sub.nodes, em.fresh(hint), [], [helper.make_tensor_value_info(out, elem, None)])
    return em.op("If", [cond], **graphs)

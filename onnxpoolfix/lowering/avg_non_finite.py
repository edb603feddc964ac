"""The NaN/inf guards of the averages: the onnxruntime target's MatMuls (:class:`NonFiniteAvgStep`: a MatMul's
``0 * NaN = 0 * inf = NaN`` would spread one NaN or inf over whole rows of the output, where torch keeps each to
the windows that hold it), the portable target's AveragePools (:class:`PooledNanStep`: TFLite).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.emit import equal_nan_tests, np_dtype
from ..reason import needs_opset
from . import cost as C
from .max_steps import emit_if
from .steps import Step, WrappedSteps, numel, run_cost

#: the ops whose result at a window reads values outside it (a NaN or inf there would reach the window)
SPREADS_NON_FINITE = frozenset({"MatMul"})
#: the targets whose averages take no MatMul against a pooling matrix (docs/targets.md, docs/tensorrt.md)
WEIGHTLESS = frozenset({"portable", "tensorrt"})


@dataclass(frozen=True)
class NonFiniteAvgStep(WrappedSteps):
    """Wraps average steps that spread NaN/inf (MatMul) so non-finite values stay in their windows (docs/targets.md,
    "What the default target does with NaN, quantization and fp16").

    The plain steps run first; their output is finite exactly when the input is, so one ReduceSum over the pooled
    OUTPUT tells. Finite: the If hands the plain result on (under symbolic sizes a Where after the If picks it:
    :meth:`emit`). Otherwise the else-branch recomputes from the input with every NaN/inf zeroed, pools three 0/1
    masks (NaN, +inf, -inf) with the same steps (a window's mask average is > 0 iff the window holds one) and
    writes torch's value where a mask reached. Needs opset 9 (Where). From opset 11 every test is an Equal (MNN
    has no IsNaN and compares floats by their bits in Less/Greater; the masks' averages are compared with Greater
    against +0.0, which bits order as values); at opset 9 and 10 (Equal takes no floats) Less against 0 and 1
    (:func:`finite_by_less`)."""

    equal_masks: bool = False  # every test an Equal (from opset 11; see above)

    def cost(self, shape, itemsize):  # priced for the finite path: the plain steps, one read of y, the If (and under
        read = numel(self.out_shape(shape)) * itemsize / C.BANDWIDTH  # symbolic sizes the Where: y read, written)
        where = 0 if all(isinstance(d, int) for d in shape) else C.NODE + 2 * read
        tests = 4 if self.equal_masks else 6  # ReduceSum, Sub, Equal (or Less, Less, Xor), If
        return run_cost(self.inner, shape, itemsize) + tests * C.NODE + read + where

    @property
    def ops(self):
        tests = ("Sub", "Equal", "Abs", "Or", "Not") if self.equal_masks else ("Sub", "Less", "Xor", "Not", "Div")
        extra = ("ReduceSum",) + tests + ("If", "Identity", "Greater", "Or", "And", "Where", "Cast", "Constant")
        return self.inner_ops() + extra

    def _exact(self, em, x, shape, elem):
        fdt = np_dtype(elem)
        inf, minus_inf = em.const("inf", np.array(np.inf, fdt)), em.const("minus_inf", np.array(-np.inf, fdt))
        zero = em.const("zero", np.array(0, fdt))
        if self.equal_masks:
            nan = em.is_nan(x, fdt)
            pos_inf, neg_inf = em.op("Equal", [x, inf]), em.op("Equal", [x, minus_inf])
            bad = em.op("Or", [nan, em.op("Or", [pos_inf, neg_inf])])
        else:  # NaN: x and 1/x both non-finite (1/inf = 0); the sign of an infinity: Less(x, 0), right in MNN too
            bad = em.op("Not", [finite_by_less(em, x, fdt)])
            one_over = em.op("Div", [em.const("one", np.array(1, fdt)), x])
            nan = em.op("And", [bad, em.op("Not", [finite_by_less(em, one_over, fdt)])], hint="is_nan")
            infinite = em.op("And", [bad, em.op("Not", [nan])])
            negative = em.op("Less", [x, zero])
            pos_inf = em.op("And", [infinite, em.op("Not", [negative])])
            neg_inf = em.op("And", [infinite, negative])
        y = self.plain(em, em.op("Where", [bad, zero, x]), shape, elem)

        def reached(mask):  # the windows holding a mask element: their 0/1 average is > 0
            return em.op("Greater", [self.plain(em, em.zero_one(mask, elem), shape, elem), zero])

        has_nan, has_pos, has_neg = reached(nan), reached(pos_inf), reached(neg_inf)
        y = em.op("Where", [has_neg, minus_inf, em.op("Where", [has_pos, inf, y])])
        to_nan = em.op("Or", [has_nan, em.op("And", [has_pos, has_neg])])  # inf + -inf = NaN
        return em.op("Where", [to_nan, em.const("nan", np.array(np.nan, fdt)), y])

    def emit(self, em, x, shape, elem):
        y = self.plain(em, x, shape, elem)
        total = em.op("ReduceSum", [y], keepdims=0)  # NaN iff y holds a NaN or an inf (or both signs)
        finite = em.is_finite(total, np_dtype(elem)) if self.equal_masks else finite_by_less(em, total, np_dtype(elem))
        # Under symbolic sizes (a batch's too) the If hands out no tensor of the outer graph: its finite branch is
        # a one-element zero and a Where after it picks y. OpenVINO 2026.4's CPU plugin computed garbage on a
        # compiled model's first run where the branch passed y through and a Concat read the If (smp's Unet
        # with an area decoder; static files are right: measured, tests/test_runtimes.py). The Where costs one
        # pass over the pooled output.
        static = all(isinstance(d, int) for d in shape)
        nothing = np.zeros([1] * len(shape), np_dtype(elem))
        pooled = emit_if(em, finite, elem,
                         ("finite_pooled", lambda sub: y if static else sub.const("finite_pooled", nothing)),
                         ("non_finite_pooled", lambda sub: self._exact(sub, x, shape, elem)))
        return pooled if static else em.op("Where", [finite, y, pooled])


def finite_by_less(em, x: str, dtype) -> str:
    """A bool mask of ``x``'s finite values below opset 11 (Equal takes no floats), without IsNaN (MNN has none):
    ``d = x - x`` is +0.0 for a finite ``x`` and NaN otherwise, and ``Xor(Less(d, 1), Less(d, 0))`` is true for
    +0.0 only in every runtime measured (review76: MNN 3.6's Less takes a NaN with the sign bit as below 0 and 1, so
    ``Less(d, 1)`` alone passes it; the other forms' failures: docs/targets.md, "What the default target does with
    NaN, quantization and fp16")."""
    d = em.op("Sub", [x, x])
    below_one = em.op("Less", [d, em.const("one", np.array(1, dtype))])
    below_zero = em.op("Less", [d, em.const("zero", np.array(0, dtype))])
    return em.op("Xor", [below_one, below_zero], hint="finite")


#: Where, which the guard needs, comes with opset 9
GUARD_MIN_OPSET = 9


def unguardable(ops, kind: str, target: str, opset: int) -> str | None:
    """Why a target does not take average steps writing ``ops``, or None: their MatMul would carry a NaN or inf
    beyond its windows with nothing to keep it there (the window sums and pooling ops do not). The onnxruntime
    target guards it from opset 9. The :data:`WEIGHTLESS` targets never: the portable one's weights would be
    quantized and rounded (:func:`~.base.portable_rejection`); TensorRT's If runs both branches, and a TensorRT
    build computes a float32 MatMul in TF32 by default (docs/tensorrt.md, "Averages")."""
    if kind != "avg" or not set(ops) & SPREADS_NON_FINITE:
        return None
    if target == "portable":
        return "the portable target writes no MatMul against a pooling matrix (int8 quantization, fp16 storage, NaN)"
    if target == "tensorrt":
        return ("a MatMul carries a NaN or inf beyond its windows, and TensorRT computes it in TF32 by default "
                "(the tensorrt target writes averages as pooling and reductions)")
    if target == "onnxruntime" and opset < GUARD_MIN_OPSET:
        return needs_opset(GUARD_MIN_OPSET, f"a MatMul carries a NaN or inf beyond its windows, and its guard needs "
                                            f"opset {GUARD_MIN_OPSET} (Where), the model has {opset}")
    return None


def guarded(inner: list[Step], kind: str, target: str, opset: int, static: bool = True) -> list[Step]:
    """``inner`` wrapped in :class:`NonFiniteAvgStep` where it spreads NaN/inf (the onnxruntime target from opset
    9), and the portable target's averages through an AveragePool in :class:`PooledNanStep` (TFLite), but below
    opset 8 under symbolic sizes (Min-6 broadcasts nothing, and the zero it would take has the pooled shape)."""
    if (kind == "avg" and target == "onnxruntime" and opset >= GUARD_MIN_OPSET
            and any(op in SPREADS_NON_FINITE for s in inner for op in s.ops)):
        return [NonFiniteAvgStep(tuple(inner), equal_masks=equal_nan_tests(target, opset))]
    if (kind == "avg" and target == "portable" and any("AveragePool" in s.ops for s in inner)
            and (static or opset >= MIN_BROADCASTS_OPSET)):
        return [PooledNanStep(tuple(inner))]
    return inner


#: Max and Min broadcast from this opset
MIN_BROADCASTS_OPSET = 8


@dataclass(frozen=True)
class PooledNanStep(WrappedSteps):
    """The portable target's averages through AveragePool, with torch's NaN where TFLite's AveragePool loses it
    (-inf for a window holding a NaN or both infinities; every other runtime measured gives NaN)::

        Y = the mean (the inner steps)      Q = the same steps on -x      Z = Min(Max(Y, Q), 0)
        out = Y - (Z - Z)

    ``Q`` is ``-Y`` bit for bit wherever the mean is not NaN, so ``Z - Z`` is +0 but where TFLite lost a NaN (both
    -inf there), where it is NaN. No comparisons, Where or IsNaN (ncnn), no constant but 0 (int8 quantization, fp16
    storage). Why it holds, and what it costs: docs/targets.md, "--target portable"."""

    def cost(self, shape, itemsize):
        """Priced as the plain means: every portable lowering through AveragePool takes this form, and the planner's
        choice among them stays what it was. Priced at what it does (the pooling twice, the passes), it moved
        [16,256,1000] -> 30 from one block AveragePool (1.3 ms in onnxruntime) to window ReduceMeans (168 ms;
        review87), where the cost model misjudges the ReduceMeans."""
        return run_cost(self.inner, shape, itemsize)

    @property
    def ops(self):
        return self.inner_ops() + tuple(op for op in ("Neg", "Max", "Min", "Sub") if op not in self.inner_ops())

    def emit(self, em, x, shape, elem):
        y = self.plain(em, x, shape, elem)
        q = self.plain(em, em.op("Neg", [x]), shape, elem)  # -y, or -inf with y where TFLite lost a NaN
        out = self.out_shape(shape)
        # Min-6 broadcasts nothing (opset 7, static there): a zero of the output's shape
        zero = np.zeros(out if em.opset < MIN_BROADCASTS_OPSET else (), np_dtype(elem))
        z = em.op("Min", [em.op("Max", [y, q]), em.const("zero", zero)], hint="lost_nan")
        return em.op("Sub", [y, em.op("Sub", [z, z])], hint="nan_kept")

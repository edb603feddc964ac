"""What every lowering is: a name, a ``check`` that says why it does not apply, and its steps.

``check`` never raises: it returns a one-line reason (shown by ``inspect`` and asserted by the tests, so a
lowering that silently stops applying is caught) or None when the lowering is exact for the node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from onnx import TensorProto

from .. import windows as W
from ..graph.emit import (
    COMPUTE_IN_FLOAT32,
    EQUAL_NAN_MIN_OPSET,
    EQUAL_NAN_OPS,
    INDICATOR_WEIGHT_OPS,
    Emitter,
    equal_nan_tests,
)
from ..graph.shapes import PoolSpec, make_value_info
from ..reason import needs_opset
from ..tensorrt import SUPPORTED_OPS, GraphInfo, tensorrt_rejects
from .avg_non_finite import GUARD_MIN_OPSET, guarded, unguardable
from .max_steps import NON_FINITE_UNSAFE_MAX, NonFiniteMaxStep
from .steps import CastStep, PoolStep, ReduceStep, Step, WrappedSteps, emit_steps, run_cost

# ops onnxruntime's CPU provider has no float64 kernel for (measured: onnxruntime 1.16-1.32)
NO_FLOAT64_KERNEL = frozenset({"AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize"})
# ... before the opset given (MaxPool-1 to -7 take float only: a float64 file at opset 7 failed to load; every op
# the lowerings write forced at opsets 7-21, float64, with each target: this the only other one)
NO_FLOAT64_KERNEL_BEFORE = {"MaxPool": 8}


def no_float64_kernel(ops, opset: int) -> list[str]:
    """The ops of ``ops`` onnxruntime's CPU provider has no float64 kernel for at ``opset``, sorted."""
    return sorted(op for op in set(ops) if op in NO_FLOAT64_KERNEL or opset < NO_FLOAT64_KERNEL_BEFORE.get(op, 0))


@dataclass(frozen=True)
class AxisWindows:
    """How one pooled axis maps n -> m, classified once."""

    axis: int  # absolute axis index
    n: int
    m: int

    @property
    def keep(self) -> bool:
        return self.n == self.m

    @property
    def uniform(self) -> W.Uniform | None:
        return None if self.keep else W.uniform_windows(self.n, self.m)

    @property
    def upsample(self) -> int | None:
        return W.integer_upsample_factor(self.n, self.m)

    @property
    def general(self) -> bool:
        return not self.keep and self.uniform is None and self.upsample is None

    def describe(self) -> str:
        if self.keep:
            return f"{self.n}->{self.m} kept"
        if self.uniform:
            return f"{self.n}->{self.m} uniform k{self.uniform.kernel} s{self.uniform.stride}"
        if self.upsample:
            return f"{self.n}->{self.m} upsample x{self.upsample}"
        return f"{self.n}->{self.m} non-uniform"


def axis_windows(spec: PoolSpec) -> list[AxisWindows]:
    return [AxisWindows(a, n, m) for a, n, m in zip(spec.axes, spec.in_sizes, spec.out_sizes)]


def compute_dtype(spec: PoolSpec) -> int:
    """The dtype the lowering computes in: float16/bfloat16 averages (and bfloat16 max) go through float32,
    as torch's own CPU kernels accumulate them; everything else stays in its dtype."""
    if spec.dtype == TensorProto.BFLOAT16 or (spec.kind == "avg" and spec.dtype in COMPUTE_IN_FLOAT32):
        return TensorProto.FLOAT
    return spec.dtype


def itemsize(elem: int) -> int:
    return {TensorProto.DOUBLE: 8, TensorProto.FLOAT: 4}.get(elem, 2)


class Lowering:
    """Base class. Subclasses set ``name``/``summary`` and implement ``_check`` and ``_steps``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    kinds: ClassVar[frozenset[str]] = frozenset({"avg", "max"})
    computes_indices: ClassVar[bool] = False
    dynamic: ClassVar[bool] = False  # handles symbolic pooled axes
    min_opset: ClassVar[int] = 7  # AveragePool-7, MatMul, Reshape-5, Gather and Reduce* exist from here
    #: the targets the lowering is for (None: every one), and why not for the others
    targets: ClassVar[frozenset[str] | None] = None
    other_targets_reason: ClassVar[str] = ""
    #: a node whose every pooled axis keeps its length is not this lowering's to write (``identity`` copies it)
    refuses_copies: ClassVar[bool] = False

    def check(self, spec: PoolSpec) -> str | None:
        if spec.kind not in self.kinds:
            return f"only for {'/'.join(sorted(self.kinds))} pooling"
        if self.targets is not None and spec.target not in self.targets:
            return self.other_targets_reason
        if spec.node.indices_output and not self.computes_indices:
            return "the indices output is read, and this lowering does not compute it"
        if not spec.static and not self.dynamic:
            return "a pooled axis is symbolic; this lowering needs static sizes"
        if spec.opset < self.min_opset:
            if spec.kind == "max" and self.min_opset < GUARD_MIN_OPSET:  # and then the guard's opset
                return max_drops_nan(spec)
            need = self.min_opset  # the portable target's max: its NaN test too (portable_rejection)
            if spec.kind == "max" and spec.target == "portable" and not equal_nan_tests("portable", need):
                need = EQUAL_NAN_MIN_OPSET
            return needs_opset(need, f"needs opset {need}, the model has {spec.opset}")
        if spec.dtype == TensorProto.BFLOAT16 and spec.opset < 13:
            return needs_opset(13, f"bfloat16 needs opset 13 (no operator takes bfloat16 before), the model has "
                                   f"{spec.opset}")
        if self.refuses_copies and all(a.keep for a in axis_windows(spec)):
            return "nothing to pool (every size is kept)"
        reason = self._check(spec)
        if reason:
            return reason
        ops = set(self.ops(spec))
        if spec.kind == "max" and spec.opset < GUARD_MIN_OPSET and ops & NON_FINITE_UNSAFE_MAX:
            return max_drops_nan(spec)
        missing = no_float64_kernel(ops, spec.opset) if compute_dtype(spec) == TensorProto.DOUBLE else []
        if missing:
            return f"onnxruntime has no float64 kernel for {', '.join(missing)}" + (
                f" at opset {spec.opset}" if set(missing) & set(NO_FLOAT64_KERNEL_BEFORE) else "")
        if spec.target == "portable":
            return portable_rejection(ops, spec, self.steps(spec))
        if spec.target == "onnxruntime":
            return unguardable(ops, spec.kind, spec.target, spec.opset)
        if spec.target == "tensorrt":
            missing = ops - SUPPORTED_OPS
            if missing:
                return f"TensorRT's ONNX parser does not support {', '.join(sorted(missing))}"
            return unguardable(ops, spec.kind, spec.target, spec.opset) or tensorrt_rejection(self, spec)
        return None

    def _check(self, spec: PoolSpec) -> str | None:
        return None

    def _steps(self, spec: PoolSpec) -> Sequence[Step]:
        raise NotImplementedError

    def steps(self, spec: PoolSpec) -> list[Step]:
        """The steps, with Casts around them when the dtype is computed in float32."""
        inner = specialized(self._steps(spec), spec.input_shape, itemsize(compute_dtype(spec)), spec.opset)
        if (spec.kind == "max" and not any(s.exact_non_finite for s in inner) and spec.opset >= 9
                and any(op in NON_FINITE_UNSAFE_MAX for s in inner for op in s.ops)):
            inner = [NonFiniteMaxStep(tuple(inner), lazy=spec.target == "onnxruntime",  # NaN/-inf as torch
                                      equal_masks=equal_nan_tests(spec.target, spec.opset))]
        inner = guarded(inner, spec.kind, spec.target, spec.opset, all(isinstance(d, int) for d in spec.input_shape))
        work = compute_dtype(spec)
        if work != spec.dtype:
            return [CastStep(work)] + inner + [CastStep(spec.dtype)]
        return inner

    def ops(self, spec: PoolSpec) -> list[str]:
        """The op types this lowering writes for ``spec``, in step order, each once; the NaN test as
        :meth:`Emitter.is_nan <onnxpoolfix.graph.emit.Emitter.is_nan>` spells it for the target, a MatMul's
        weights as :meth:`Emitter.weights <onnxpoolfix.graph.emit.Emitter.weights>` writes them."""
        out: list[str] = []
        for op in (op for s in self.steps(spec) for op in s.ops):
            equal_nan = op == "IsNaN" and equal_nan_tests(spec.target, spec.opset)
            spelled = EQUAL_NAN_OPS if equal_nan else (op,)
            if op == "MatMul" and spec.target == "onnxruntime":
                spelled = INDICATOR_WEIGHT_OPS + spelled
            out += [o for o in spelled if o not in out]
        return out

    def cost(self, spec: PoolSpec) -> float:
        return run_cost(self.steps(spec), spec.input_shape, itemsize(compute_dtype(spec)))

    def build(self, em, spec: PoolSpec, x: str, y: str, indices: str | None = None) -> None:
        """Emit the nodes computing ``y`` (and ``indices`` for lowerings that compute them) from ``x``."""
        emit_steps(em, self.steps(spec), x, y, spec.input_shape, spec.dtype)


def max_drops_nan(spec: PoolSpec) -> str:
    """Why no max lowering applies below opset 9 (the portable target's guard: 11)."""
    guard = (f"{GUARD_MIN_OPSET} (IsNaN, Where)" if spec.target != "portable" else
             f"{EQUAL_NAN_MIN_OPSET} with the portable target (Equal on floats: MNN and ncnn lack IsNaN)")
    return needs_opset(EQUAL_NAN_MIN_OPSET if spec.target == "portable" else GUARD_MIN_OPSET,
                       f"MaxPool/ReduceMax would drop a NaN that torch's max keeps, and the guard that keeps it "
                       f"needs opset {guard}, the model has {spec.opset}")


def reduce_whole(spec, axes: tuple[int, ...]) -> list[Step]:
    """Axes pooled to 1: a ReduceMean/ReduceMax over them, except for the portable target where pnnx gets that
    wrong for ncnn (measured): from opset 18, where a Reduce takes its axes as an input, pnnx writes ReduceMean
    averaging the wrong dims and ReduceMax not at all, so static 1-D and 2-D pools take one AveragePool/MaxPool
    spanning the axes; before, it converts no ReduceMax over two axes, so max takes one ReduceMax per axis (not a
    MaxPool: MNN's starts its max at -2^24)."""
    op = "ReduceMean" if spec.kind == "avg" else "ReduceMax"
    if spec.target != "portable":
        return [ReduceStep(op, axes)]
    dims = spec.input_shape
    spatial = range(2, len(dims))
    if (spec.opset >= 18 and spec.ndim in (3, 4) and spec.k <= 2 and all(a >= 2 for a in axes)
            and all(isinstance(dims[a], int) for a in spatial) and compute_dtype(spec) != TensorProto.DOUBLE):
        pool = "AveragePool" if spec.kind == "avg" else "MaxPool"
        return [PoolStep(pool, 2, tuple((a, W.Uniform(dims[a], dims[a])) for a in axes))]
    return [ReduceStep(op, (a,)) for a in axes] if spec.kind == "max" else [ReduceStep(op, axes)]


# what the portable target leaves out, and why (issue 33: measured in onnxruntime, OpenVINO, tract, MNN,
# ncnn through pnnx, TFLite through onnx2tf, TVM and onnx2torch)
NOT_PORTABLE = {
    "MatMul": "quantize_static quantizes both its inputs, and its NaN guard needs If",
    "If": "onnx2torch refuses If, ncnn has no layer for its guard's comparisons, onnx2tf mostly fails on it",
}


#: what ncnn (through pnnx, 20261020) has no layer for, of what the lowerings write (measured:
#: tests/test_runtime_ncnn.py): the report notes where the portable target writes one (api.py)
NO_NCNN_LAYER = frozenset({"Gather", "GatherElements", "Equal", "Less", "Greater", "Where", "IsNaN", "Not", "If"})


def portable_rejection(ops: set[str], spec: PoolSpec, steps: Sequence[Step]) -> str | None:
    """Why the portable target does not take what a lowering emits for ``spec`` (``ops``, in ``steps``: a 3-D
    pool's pooling ops on 4-D planes are 2-D ones), or None."""
    for op, why in NOT_PORTABLE.items():
        if op in ops:
            return f"not portable: {op} ({why})"
    if "IsNaN" in ops and not equal_nan_tests("portable", spec.opset):  # Emitter.is_nan's Equal masks
        return needs_opset(EQUAL_NAN_MIN_OPSET, f"not portable: IsNaN (MNN and ncnn lack it; the Equal masks "
                                                f"written instead need opset {EQUAL_NAN_MIN_OPSET}), the model has "
                                                f"{spec.opset}")
    if spec.k >= 3 and pool_ops(steps) & {"AveragePool", "MaxPool"}:
        return "not portable: a 3-D pooling op (MNN crashes on 3-D AveragePool, TFLite needs TensorFlow's Flex ops)"
    if spec.k == 3 and spec.ndim == 5 and spec.static and "Resize" in pool_ops(steps):
        # a static 3-D pool's Resizes are 4-D (lowering/resize.py); mixed ones' copies are Gathers there
        return "not portable: a 5-D Resize (pnnx drops its scales: ncnn returns the input's size, measured)"
    return None


def pool_ops(steps: Sequence[Step]) -> set[str]:
    """The ops of ``steps`` (and of a wrapper's mean twins) but those of steps pooling 4-D planes whatever the
    input's rank (:class:`~.separable.SeparableStep`)."""
    out: set[str] = set()
    for s in steps:
        if isinstance(s, WrappedSteps):
            out |= pool_ops(s.inner) | pool_ops([t for t in (i.mean_twin() for i in s.inner) if t is not None])
        elif not getattr(s, "plane_pools", False):
            out |= set(s.ops)
    return out


def specialized(steps: Sequence[Step], shape, size: int, opset: int) -> list[Step]:
    """Each step as it runs on the shape it receives (:meth:`Step.at`)."""
    out = []
    for s in steps:
        s = s.at(shape, size, opset)
        out.append(s)
        shape = s.out_shape(shape)
    return out


def lowering_model(lowering: Lowering, spec: PoolSpec, x_shape, y_shape, name: str = "lowering"):
    """``lowering`` built alone for ``spec`` as a model (x -> y, and indices where it computes them, as the
    rewrite writes it), and its emitter."""
    from onnx import helper

    indices = "indices" if spec.node.indices_output and lowering.computes_indices else None
    em = Emitter(name, {"x", "y", "indices"}, spec.opset, target=spec.target)
    lowering.build(em, spec, "x", "y", indices)
    outputs = [make_value_info("y", spec.dtype, y_shape)]
    if indices:
        outputs.append(make_value_info(indices, TensorProto.INT64, y_shape))
    graph = helper.make_graph(em.nodes, name, [make_value_info("x", spec.dtype, x_shape)], outputs,
                              initializer=em.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", spec.opset)]), em


def tensorrt_rejection(lowering: Lowering, spec: PoolSpec) -> str | None:
    """Why TensorRT's ONNX parser would reject a node ``lowering`` emits for ``spec``, or None.

    SUPPORTED_OPS only says which op types exist; the parser also has rules on attributes and inputs
    (Reduce axes must be constants, 1D pooling only on rank-3 input, Resize modes, integer MatMul, ...).
    The lowering is built into a one-node-sized model and every emitted node goes through the same lint
    ``onnxpoolfix inspect --target tensorrt`` runs, so the planner never picks a lowering the lint flags.
    """
    try:
        model, em = lowering_model(lowering, spec, spec.input_shape, spec.output_shape)
        info = GraphInfo.from_model(model)
    except Exception as e:  # noqa: BLE001 - check() never raises; a build bug surfaces when the patch builds it
        import logging

        logging.getLogger(__name__).debug("%s: building %s for the TensorRT lint failed: %s",
                                          spec.node.label, lowering.name, e)
        return None
    for node in em.nodes:
        reason = tensorrt_rejects(node, info)
        if reason:
            return f"TensorRT's ONNX parser would reject its {node.op_type}: {reason}"
    return None

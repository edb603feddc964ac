"""Emitting replacement nodes: unique names, constants, and opset-dependent op forms in one place.

Every node and tensor an :class:`Emitter` creates is named ``<replaced node>/<what>``, so a reader of the
patched graph sees which leftover each piece came from. The last node of a lowering writes into the
original output tensor, so downstream names and graph outputs stay intact.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import nodes_deep

#: the ops :meth:`Emitter.is_nan` writes in its Equal form (see there), in order
EQUAL_NAN_OPS = ("Sub", "Equal", "Abs", "Or", "Not")
#: the ops :meth:`Emitter.weights` writes beside a MatMul for the onnxruntime target (the indicator over the lengths)
INDICATOR_WEIGHT_OPS = ("Where", "Cast", "Div")


#: the first opset whose Equal takes floats: NaN and inf tested with Equal alone from here (:func:`equal_nan_tests`)
EQUAL_NAN_MIN_OPSET = 11


def equal_nan_tests(target: str | None, opset: int) -> bool:
    """Whether NaN and inf are tested with Equal alone instead of IsNaN/Less/Greater: from opset 11 (Equal on
    floats), for the onnxruntime and portable targets. MNN has no IsNaN and compares floats by their bits in
    Less/Greater, ncnn has neither (measured); the onnxruntime target's tests sit in If conditions on one scalar
    and in branches only non-finite inputs take, so the form costs its finite path nothing. The tensorrt target
    keeps IsNaN on its always-evaluated path: onnx-tensorrt imports it as two layers (Equal(x, x), Not), the
    MNN-proof Equal form of :meth:`Emitter.is_nan` is six, and no GPU here has priced their fusion."""
    return target in ("onnxruntime", "portable") and opset >= EQUAL_NAN_MIN_OPSET


class Emitter:
    def __init__(self, prefix: str, taken: set[str], opset: int, *, constant_nodes: bool = False,
                 target: str | None = None):
        self.prefix = prefix
        self.target = target  # None: a probe or a proof, whose constants are written as they are
        self.equal_nan = equal_nan_tests(target, opset)  # NaN/inf tests without IsNaN, Less, Greater: is_nan
        # IR version < 4 requires every initializer to be a graph input too: use Constant nodes there
        self.constant_nodes = constant_nodes
        self.taken = taken  # shared across emitters: every name in the graph, plus what we add
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def fresh(self, hint: str) -> str:
        base = f"{self.prefix}/{hint}"
        name, i = base, 1
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def const(self, hint: str, value: np.ndarray) -> str:
        value = np.asarray(value)  # (np.ascontiguousarray would turn a 0-d scalar into shape [1])
        if self.constant_nodes and self.opset < 9 and value.dtype.kind not in "f":
            # Constant takes only float types before opset 9: the integers (window tables, shapes) as float64,
            # exact below 2**53, cast back
            if value.size and np.abs(value.astype(np.float64)).max() >= 2.0**53:
                raise ValueError(f"{hint}: an integer constant past 2**53 cannot be written before opset 9")
            return self.cast(self.const(f"{hint}_float", value.astype(np.float64)),
                             helper.np_dtype_to_tensor_dtype(value.dtype))
        name = self.fresh(hint)
        tensor = numpy_helper.from_array(value if value.ndim == 0 else np.ascontiguousarray(value), name)
        if self.constant_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh(f"{hint}_constant"),
                                               value=tensor))
        else:
            self.initializers.append(tensor)
        return name

    def weights(self, hint: str, matrix: np.ndarray, elem: int) -> str:
        """A pooling matrix (float64, entries 0 or 1/len) as a tensor of ``elem``.

        For the onnxruntime target it is written as ``Div(Where(indicator, 1, 0), lengths)``: a bool window
        indicator (a byte per entry) and the window lengths, both held exactly by any storage (fp16 included),
        and not an initializer feeding a MatMul, so onnxruntime's ``quantize_dynamic`` leaves the pooling in
        float (a quantized 1/len matrix costs 4e-3 to 8e-3 relative error: issue 33). onnxruntime folds the
        nodes at session start, so the MatMul runs as before. Where, not Cast: :meth:`zero_one`. Every other
        case: the matrix itself.
        """
        typed_constants = not self.constant_nodes or self.opset >= 9  # Constant takes bool from opset 9
        lengths = _window_lengths(matrix) if self.target == "onnxruntime" and typed_constants else None
        if lengths is None or not np.array_equal(lengths.astype(np_dtype(elem)), lengths):
            return self.const(hint, matrix.astype(np_dtype(elem)))
        indicator = self.zero_one(self.const(f"{hint}_indicator", matrix != 0), elem)
        return self.op("Div", [indicator, self.const(f"{hint}_lengths", lengths.astype(np_dtype(elem)))], hint=hint)

    def ints(self, hint: str, values: Sequence[int]) -> str:
        return self.const(hint, np.asarray(list(values), dtype=np.int64))

    def op(self, op_type: str, inputs: Sequence[str], *, out: str | Sequence[str] | None = None,
           hint: str | None = None, **attrs) -> str:
        """Add one node; returns its (first) output name. ``out`` names the output(s) explicitly."""
        label = hint or op_type
        outputs = [self.fresh(f"{label}_output")] if out is None else [out] if isinstance(out, str) else list(out)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=self.fresh(label), **attrs))
        return outputs[0]

    # ---- opset-dependent forms -------------------------------------------------------------------

    def reduce(self, op_type: str, x: str, axes: Sequence[int], *, keepdims: int | None = None) -> str:
        """ReduceMean/ReduceMax/ReduceSum (and Squeeze/Unsqueeze): axes are an attribute before opset 18
        (ReduceSum, Squeeze, Unsqueeze: 13), an input from then on. TensorRT needs the axes input to be a
        constant, which an initializer is."""
        if self.opset >= (13 if op_type in ("ReduceSum", "Squeeze", "Unsqueeze") else 18):
            return self.op(op_type, [x, self.ints("axes", axes)], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.reduce("Unsqueeze", x, axes)

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        return self.reduce("Squeeze", x, axes)

    def resize_nearest(self, x: str, scales: Sequence[float]) -> str:
        """Nearest-neighbour Resize with x_in = floor(x_out / scale): exact integer upsampling.

        Needs opset 11 (coordinate_transformation_mode); roi is a required input before opset 13.
        """
        scales_name = self.const("scales", np.asarray(scales, dtype=np.float32))
        roi = self.const("roi", np.zeros((0,), dtype=np.float32)) if self.opset < 13 else ""
        return self.op("Resize", [x, roi, scales_name], mode="nearest",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def cast(self, x: str, to: int, out: str | None = None) -> str:
        return self.op("Cast", [x], out=out, to=to)

    def zero_one(self, mask: str, elem: int) -> str:
        """A bool mask as 0/1 of ``elem``: ``Where(mask, 1, 0)``, not a Cast (onnxconverter_common's float16
        conversion types a Cast's output float16 and keeps its ``to``: onnxruntime refuses the file, review24);
        Where takes bool from opset 9."""
        if self.opset < 9:
            return self.cast(mask, elem)
        dt = np_dtype(elem)
        return self.op("Where", [mask, self.const("one", np.array(1, dt)), self.const("zero", np.array(0, dt))],
                       hint="zero_one")

    def is_nan(self, x: str, dtype=np.float32) -> str:
        """A bool mask of ``x``'s NaNs (``dtype``: x's numpy dtype): ``IsNaN``, or in the Equal form
        (:func:`equal_nan_tests`) the values that are neither ``x - x == 0`` (finite) nor ``|x| == inf``. That
        form holds under IEEE comparisons and under MNN's, whose Equal compares bits (NaN == NaN there, so
        ``Not(Equal(x, x))`` misses every NaN: measured)."""
        if self.equal_nan:
            finite = self.is_finite(x, dtype)
            infinite = self.op("Equal", [self.op("Abs", [x]), self.const("inf", np.array(np.inf, dtype))])
            return self.op("Not", [self.op("Or", [finite, infinite])], hint="is_nan")
        return self.op("IsNaN", [x])

    def is_finite(self, x: str, dtype=np.float32) -> str:
        """A bool mask of ``x``'s finite values: ``x - x == 0`` (NaN for NaN and inf; +0.0 otherwise, which
        MNN's bitwise Equal agrees on), or ``Not(IsNaN(x - x))`` below the Equal form."""
        if self.equal_nan:
            return self.op("Equal", [self.op("Sub", [x, x]), self.const("zero", np.zeros((), dtype))], hint="finite")
        return self.op("Not", [self.op("IsNaN", [self.op("Sub", [x, x])])], hint="finite")

    def sub(self) -> "Emitter":
        """An emitter for a subgraph (an If branch): the same names, opset and target; its constants are
        Constant nodes of the branch itself (onnx2tf drops a branch's reads of the outer graph's initializers,
        and pnnx crashed on them: measured; with them in the branch, TFLite runs every If we write)."""
        return Emitter(self.prefix, self.taken, self.opset, constant_nodes=True, target=self.target)


def _window_lengths(matrix: np.ndarray) -> np.ndarray | None:
    """The lengths L (shape [rows, 1] or [1, cols]) with ``matrix == (matrix != 0) / L`` exactly, or None."""
    ones = matrix != 0
    if matrix.ndim != 2 or not ones.any():
        return None
    for axis in (1, 0):  # each row one window (P: [m, n]), or each column (P^T, the kron and stacked forms)
        reach = ones.any(axis=axis, keepdims=True)
        lengths = np.where(reach, ones.sum(axis=axis, keepdims=True), 1).astype(np.float64)
        if np.allclose(matrix, ones / lengths, rtol=1e-12, atol=0):  # (kron products: 1/a * 1/b, to an ulp)
            return lengths
    return None


def np_dtype(elem: int) -> np.dtype:
    return helper.tensor_dtype_to_np_dtype(elem)


# dtypes onnxruntime's CPU kernels for the ops we emit do not all cover: compute in float32 and cast
# back (exact for max, and torch itself accumulates these in float32)
COMPUTE_IN_FLOAT32 = {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def op_types(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """The op types of ``nodes`` in order, each followed by those inside its subgraphs (If branches)."""
    return [n.op_type for n in nodes_deep(nodes)]


#: doc_string prefix of every node onnxpoolfix writes (provenance; its own pools are never adopted again)
EMITTED_BY = "onnxpoolfix: "


def mark_emitted(nodes: Sequence[onnx.NodeProto], what: str) -> None:
    for n in nodes:
        n.doc_string = EMITTED_BY + what

"""A translation table for torch's dynamo ONNX exporter that keeps adaptive pooling for onnxpoolfix.

    import torch, onnxpoolfix
    torch.onnx.export(model, (x,), "model.onnx", dynamo=True,
                      custom_translation_table=onnxpoolfix.translation_table())
    # then: onnxpoolfix model.onnx fixed.onnx   (or onnxpoolfix.export, which does both)

Without it, the dynamo exporter decomposes every adaptive pool into Gather/GatherND chains whose window
lengths are frozen at the traced size (wrong at other sizes, no guard), and refuses adaptive max pooling and
3D average pooling altogether (README.md, 'From PyTorch in one call'). Ops listed in
``custom_translation_table`` are kept from decomposition (torch >= 2.8), so each translation here sees the
op itself and writes the node the TorchScript exporter writes under ONNX_FALLTHROUGH, which
:mod:`onnxpoolfix.frontends.leftovers` reads::

    org.pytorch.aten::adaptive_avg_pool2d(x, Constant<int64 [5, 7]>) -> y
    org.pytorch.aten::adaptive_max_pool2d(x, Constant<int64 [5, 7]>) -> values, indices

A size entry that torch resolved from the input (``AdaptiveAvgPool2d((None, 7))`` with a symbolic H: torch
turns the None into ``x.size(2)`` before the op, so it arrives as a symbolic int) is written as
``Shape(x, start=axis, end=axis+1)``, the form the front end reads as "follows the input". A symbolic size that is
not one of the input's own dims is written as computed; the patch then refuses it with its usual message.

torch and onnxscript are imported only when :func:`translation_table` is called.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

logger = logging.getLogger(__name__)

ATEN_DOMAIN = "org.pytorch.aten"

# aten op name -> (onnx op_type written, number of outputs). The underscore forms are what
# adaptive_avg_pool{2,3}d call: a model (or a decomposition) may hold them directly.
POOL_OPS: dict[str, tuple[str, int]] = {
    "adaptive_avg_pool1d": ("adaptive_avg_pool1d", 1),
    "adaptive_avg_pool2d": ("adaptive_avg_pool2d", 1),
    "adaptive_avg_pool3d": ("adaptive_avg_pool3d", 1),
    "_adaptive_avg_pool2d": ("adaptive_avg_pool2d", 1),
    "_adaptive_avg_pool3d": ("adaptive_avg_pool3d", 1),
    "adaptive_max_pool1d": ("adaptive_max_pool1d", 2),
    "adaptive_max_pool2d": ("adaptive_max_pool2d", 2),
    "adaptive_max_pool3d": ("adaptive_max_pool3d", 2),
}

_FLOAT_TYPES = ["tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"]


@functools.lru_cache(maxsize=None)
def op_schema(op_type: str):
    """The onnx OpSchema of an ``org.pytorch.aten`` adaptive pooling op, as the TorchScript exporter writes it:
    ``(self: T, output_size: int64) -> (T[, int64 indices])``.

    onnxscript builds a node only from a schema ("No schema registered for 'adaptive_avg_pool2d' version
    '1' and domain 'org.pytorch.aten'" when it looks one up). The schema is handed to the op directly and
    NOT registered with ``onnx.defs``: a registered one would make onnx's checker judge every such node
    by it, in any model this process later loads (a fuzzed dtype would then be a checker crash, not
    the patch's own message).
    """
    import onnx.defs

    outputs = next(n for name, n in POOL_OPS.values() if name == op_type)
    param = onnx.defs.OpSchema.FormalParameter
    return onnx.defs.OpSchema(
        op_type, ATEN_DOMAIN, 1,
        doc=f"PyTorch's aten::{op_type}, as written for onnxpoolfix to replace with standard ONNX",
        inputs=[param("self", "T"), param("output_size", "tensor(int64)")],
        outputs=[param("output", "T")] + ([param("indices", "tensor(int64)")] if outputs == 2 else []),
        type_constraints=[("T", _FLOAT_TYPES, "the pooled tensor's type")],
    )


def _traced(value: Any):
    """What torch traced for an onnx IR value, its producer's whole ``val`` (None when it is not recorded)."""
    producer = value.producer()
    fx_node = producer.meta.get("node") if producer is not None else value.meta.get("node")
    return fx_node.meta.get("val") if fx_node is not None else None


def _fake_shape(value: Any):
    """The FakeTensor shape torch traced for an onnx IR value (None when it is not recorded)."""
    val, producer = _traced(value), value.producer()
    if producer is not None and len(producer.outputs) > 1 and isinstance(val, (tuple, list)):
        val = val[value.index()] if value.index() is not None and value.index() < len(val) else None
    return getattr(val, "shape", None)


def _same_dim(x: Any, axis: int, size: Any) -> bool:
    """Whether the symbolic size ``size`` is, by torch's own symbolic reasoning, ``x``'s length on ``axis``."""
    symint = _traced(size)  # a scalar size value: the SymInt
    shape = _fake_shape(x)
    if symint is not None and shape is not None and axis < len(shape):
        dim = shape[axis]
        try:
            return bool(getattr(dim, "node", None) is not None and getattr(symint, "node", None) is not None
                        and dim.node.expr == symint.node.expr)
        except Exception:  # noqa: BLE001 - a sympy comparison torch cannot decide: not provably the same
            return False
    # the IR shape holds the same sympy text torch printed for the FakeTensor
    dims = x.shape
    return (symint is not None and dims is not None and axis < len(dims)
            and str(getattr(dims[axis], "value", dims[axis])) == str(getattr(symint, "node", symint)))


def _size_value(op, x: Any, output_size, k: int) -> Any:
    """The output-size input of the node: a Constant when static, else Concat of Shape slices and constants.
    One entry for a ``k``-D pool is torch's broadcast of one int (``F.adaptive_avg_pool2d(x, x.shape[2] // 4)``
    passes ``[floordiv]``): written ``k`` times, as the node's readers take one entry per pooled axis."""
    import numpy as np
    import onnx_ir as ir

    sizes = list(output_size)
    if len(sizes) == 1:
        sizes *= k
    if all(isinstance(s, int) for s in sizes):
        return op.Constant(value=ir.tensor(np.asarray(sizes, dtype=np.int64), name="output_size"))
    rank = len(x.shape) if x.shape is not None else None
    parts, run = [], []
    for i, s in enumerate(sizes):
        if isinstance(s, int):
            run.append(s)
            continue
        if run:
            parts.append(op.Constant(value=ir.tensor(np.asarray(run, dtype=np.int64))))
            run = []
        axis = rank - len(sizes) + i if rank is not None else None
        if axis is not None and _same_dim(x, axis, s):
            parts.append(op.Shape(x, start=axis, end=axis + 1))
        else:
            logger.info("adaptive pool output size entry %d is computed at run time, not the input's own dim", i)
            parts.append(op.Reshape(s, op.Constant(value=ir.tensor(np.asarray([1], dtype=np.int64)))))
    if run:
        parts.append(op.Constant(value=ir.tensor(np.asarray(run, dtype=np.int64))))
    return parts[0] if len(parts) == 1 else op.Concat(*parts, axis=0)


def aten_translation(op_type: str, outputs: int) -> Callable:
    """The translation writing one ``org.pytorch.aten`` adaptive pooling node (``outputs``: 1, or 2 for max)."""
    import onnxscript
    from onnxscript import opset18 as op

    node = onnxscript.values.Op(onnxscript.values.Opset(ATEN_DOMAIN, 1), op_type, op_schema=op_schema(op_type))

    k = int(op_type.rstrip("d")[-1])  # adaptive_avg_pool2d, _adaptive_avg_pool3d, adaptive_max_pool1d

    def translate(x, output_size):
        size = _size_value(op, x, output_size, k)
        if outputs == 2:
            values, indices = node(x, size, _num_outputs=2)
            return values, indices
        return node(x, size)

    translate.__name__ = f"onnxpoolfix_{op_type}"
    translate.__qualname__ = translate.__name__
    return translate


def translation_table() -> dict:
    """``{torch.ops.aten.<adaptive pool>.default: translation}`` for ``torch.onnx.export(...,
    dynamo=True, custom_translation_table=...)``. Registers nothing globally (see :func:`op_schema`).

    Every adaptive pooling op (avg 1D/2D/3D, its ``_adaptive_avg_pool{2,3}d`` forms, max 1D/2D/3D with
    indices) is kept from decomposition and written as the ``org.pytorch.aten`` node that
    ``onnxpoolfix IN OUT`` (or :func:`onnxpoolfix.patch`) replaces with its exact lowering.
    """
    try:
        import onnxscript  # noqa: F401
        import torch
    except ImportError as e:
        raise ImportError(f"onnxpoolfix.translation_table needs torch and onnxscript ({e}); install them with: "
                          "pip install '.[torch]' in a checkout of onnxpoolfix") from e
    table = {}
    for aten_name, (op_type, outputs) in POOL_OPS.items():
        overload = getattr(getattr(torch.ops.aten, aten_name, None), "default", None)
        if overload is None:  # an op this torch does not have
            continue
        table[overload] = aten_translation(op_type, outputs)
    return table

"""Adaptive pools whose output size torch.export would freeze: a computed size kept symbolic.

Under ``torch.export`` an output size computed from a symbolic input size (``F.interpolate(x,
scale_factor=1.7, mode="area")`` of a 3-D input, ``F.adaptive_max_pool2d(x, (H // 3 + 1, 5))``) is a
``SymInt``. ``adaptive_avg_pool1d`` and every ``adaptive_max_pool*d`` take ``int[]``: the size is guarded to
its traced value (``trunc(1.7 * L) == 34``) and the export is frozen to it, or refused where a ``Dim`` range
says otherwise. ``adaptive_avg_pool2d``/``adaptive_avg_pool3d`` take ``SymInt[]``, but torch 2.9's
(composite) op and its meta kernel compare each size with 1 (the global-pool shortcut, the contiguity of the
output), a guard ``H // 2 != 1`` that a ``Dim`` range reaching such a size refuses ("Constraints violated");
torch 2.13 keeps the size without it. While :func:`symbolic_pool_sizes` is active, all of these given a
``SymInt`` size are routed to
``onnxpoolfix::`` custom ops of the same meaning that take ``SymInt[]`` (fake kernels give the output shape;
the eager kernels call torch's own ops), and :func:`symbolic_translations` writes them as the
``org.pytorch.aten`` node the patch replaces, the size computed in the graph. A static size takes torch's
own op, as before. Used by :func:`onnxpoolfix.export` only, around its ``torch.onnx.export`` call.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Callable, Iterator

from .translation import aten_translation

# onnxpoolfix op (named as the aten op it stands for) -> (outputs, where torch looks it up: (module path, attribute))
_OPS = {
    "adaptive_avg_pool1d": (1, ("torch.nn.functional", "adaptive_avg_pool1d")),
    "adaptive_avg_pool2d": (1, ("torch._C._nn", "adaptive_avg_pool2d")),
    "adaptive_avg_pool3d": (1, ("torch._C._nn", "adaptive_avg_pool3d")),
    "adaptive_max_pool1d": (2, ("torch", "adaptive_max_pool1d")),
    "adaptive_max_pool2d": (2, ("torch._C._nn", "adaptive_max_pool2d")),
    "adaptive_max_pool3d": (2, ("torch._C._nn", "adaptive_max_pool3d")),
}


@functools.lru_cache(maxsize=None)
def _custom_ops() -> dict[str, Callable]:
    """The ``onnxpoolfix::<op>`` custom ops (registered once per process)."""
    import torch

    ops = {}
    for name, (outputs, _) in _OPS.items():
        aten = getattr(torch.ops.aten, name).default

        def eager(x, output_size, aten=aten):
            out = aten(x, list(output_size))
            return out.clone() if isinstance(out, torch.Tensor) else tuple(o.clone() for o in out)

        def fake(x, output_size, outputs=outputs, k=int(name[-2])):
            shape = list(x.shape[: x.dim() - k]) + list(output_size)
            y = x.new_empty(shape)
            return y if outputs == 1 else (y, x.new_empty(shape, dtype=torch.int64))

        schema = "(Tensor x, SymInt[] output_size) -> " + ("Tensor" if outputs == 1 else "(Tensor, Tensor)")
        op = torch.library.custom_op(f"onnxpoolfix::{name}", eager, mutates_args=(), schema=schema)
        op.register_fake(fake)
        ops[name] = op
    return ops


@contextlib.contextmanager
def symbolic_pool_sizes() -> Iterator[None]:
    """While active, the ``int[]``-sized adaptive pools given a ``SymInt`` output size call the custom ops."""
    import torch

    ops = _custom_ops()
    saved = []
    try:
        for name, (outputs, (module_name, attr)) in _OPS.items():
            module = importlib.import_module(module_name)
            original = getattr(module, attr)

            def routed(x, output_size, *rest, original=original, op=ops[name], **kw):
                sizes = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size]
                if rest or kw or not any(isinstance(s, torch.SymInt) for s in sizes):
                    return original(x, output_size, *rest, **kw)
                return op(x, sizes)

            saved.append((module, attr, original))
            setattr(module, attr, routed)
        yield
    finally:
        for module, attr, original in reversed(saved):
            setattr(module, attr, original)


def symbolic_translations() -> dict:
    """``{torch.ops.onnxpoolfix.<op>.default: translation}``, each written as the aten op it stands for."""
    import torch

    _custom_ops()
    return {getattr(torch.ops.onnxpoolfix, name).default: aten_translation(name, outputs)
            for name, (outputs, _) in _OPS.items()}


def program_doubles(program) -> tuple[float, ...]:
    """Every Python float the exported program computes sizes with (the ``0.7692307692307692`` of
    ``TruncToInt(0.769230769230769*ToFloat(s0))`` for ``scale_factor=1/1.3``): the doubles torch held, which the
    file keeps only rounded to float32 (:func:`onnxpoolfix.graph.size_subgraph.torch_doubles`)."""
    import sympy
    import torch

    found: dict[float, None] = {}

    def walk(v) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, torch.Tensor):
            walk(list(v.shape))
        elif isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            found.update(dict.fromkeys(float(f) for f in v.node.expr.atoms(sympy.Float)))
        elif isinstance(v, float):
            found[v] = None

    ep = getattr(program, "exported_program", None)
    for node in ep.graph.nodes if ep is not None else ():
        walk(node.meta.get("val"))
        walk(list(node.args) + list(node.kwargs.values()))
    return tuple(found)


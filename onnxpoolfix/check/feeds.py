"""The check's inputs: which graph inputs are symbolic, the sizes their declared dims allow (names tied, multiples
of a declared step), and random feeds at concrete shapes."""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import CheckTooLargeError, ShapeError
from ..graph.shapes import type_dims
from ..words import CHECK_SHAPES_FORM, NO_CHECK


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    init = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def symbolic_inputs(model: onnx.ModelProto) -> dict[str, tuple]:
    """Graph inputs with a symbolic or unknown dim, and their declared shapes."""
    declared = {vi.name: type_dims(vi.type)[1] for vi in graph_inputs(model)}
    return {name: dims for name, dims in declared.items() if dims is None or any(not isinstance(d, int) for d in dims)}


def random_feed(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], rng: np.random.Generator) -> dict:
    feed = {}
    try:
        for vi in graph_inputs(model):
            elem, dims = type_dims(vi.type)
            shape = tuple(shapes[vi.name]) if vi.name in shapes else tuple(dims or ())
            if any(not isinstance(d, int) for d in shape):
                raise ShapeError(f"input '{vi.name}' has symbolic dims {shape} and no concrete shape to check with",
                                 f"give every symbolic input's shape with {CHECK_SHAPES_FORM} (several inputs: in "
                                 f"one flag, separated by spaces), or skip the check with {NO_CHECK}")
            if elem == TensorProto.BFLOAT16:
                import ml_dtypes

                feed[vi.name] = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
                continue
            dt = onnx.helper.tensor_dtype_to_np_dtype(elem)
            if np.issubdtype(dt, np.floating):
                feed[vi.name] = rng.standard_normal(shape).astype(dt)
            elif dt == np.bool_:
                feed[vi.name] = rng.integers(0, 2, shape).astype(bool)
            else:
                feed[vi.name] = rng.integers(0, 4, shape).astype(dt)
    except (ValueError, MemoryError) as e:  # numpy: an input too large to make
        text = ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
        raise CheckTooLargeError(f"cannot make the check's random inputs at {text or 'the declared shapes'}: "
                                 f"{' '.join(str(e).split())[:120] or type(e).__name__}",
                                 f"check at smaller sizes with {CHECK_SHAPES_FORM}, or skip the check with "
                                 f"{NO_CHECK}") from None
    return feed


def tie_named(declared: Mapping[str, Sequence], shapes: dict[str, tuple[int, ...]],
              bound: Sequence[str] = ()) -> dict[str, tuple[int, ...]]:
    """``shapes`` with every named symbolic dim at one value: the one it takes in the ``bound`` inputs (the
    caller's, never changed), else where it first appears (inputs in declared order, axes in order). The file
    declares a name shared by two inputs, on whatever axes, as one length (x: [N, 3, H, W] beside
    y: [N, 3, W, H]), and onnxruntime plans its memory on that tie."""
    value: dict[str, int] = {}
    out = dict(shapes)
    for name in bound:
        for d, v in zip(declared.get(name) or (), out.get(name, ())):
            if isinstance(d, str) and v is not None:
                value.setdefault(d, v)
    for name, dims in declared.items():
        if name not in out or name in bound or dims is None:
            continue
        shape = list(out[name])
        for a, d in enumerate(dims):
            if isinstance(d, str) and a < len(shape) and shape[a] is not None:
                shape[a] = value.setdefault(d, shape[a])
        out[name] = tuple(shape)
    return out


def declared_step(free: Mapping[str, Sequence], spatial: Mapping[str, Sequence[int]]) -> int:
    """The multiple every symbolic spatial input dim is declared as (``32*h``: 32; the lcm over dims; 1 where
    a dim is a plain symbol): sizes that are not multiples of it are outside what the export accepts."""
    step = 1
    for name, axes in spatial.items():
        for a in axes:
            d = free[name][a]
            m = re.fullmatch(r"\s*(\d+)\s*\*\s*[A-Za-z_]\w*\s*|\s*[A-Za-z_]\w*\s*\*\s*(\d+)\s*", str(d))
            if m:
                step = math.lcm(step, int(m.group(1) or m.group(2)))
    return step

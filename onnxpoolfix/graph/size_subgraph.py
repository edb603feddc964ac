"""The graph's own computation of an output size (:class:`~onnxpoolfix.spec.RuntimeDim`), cut out as a model
of its own: from the pooled tensor's ``Shape`` to the size tensor (``Floor(Shape(x)[2] * 0.6)``, torch's
``x.shape[2] // 3 + 1``). Used to fold a computed size where the input's size is static, by the check to
aim at sizes where the output is smaller, equal or larger, and by the window proof to know which output
sizes occur."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import onnx
from onnx import helper

logger = logging.getLogger(__name__)


def size_subgraph(model: onnx.ModelProto, size_tensor: str, pooled: str, elem: int) -> onnx.ModelProto | None:
    """A model with input ``pooled`` (dtype ``elem``, any shape) and output ``size_tensor``, holding the nodes
    between them; None where the size reads anything but ``pooled``'s shape and constants."""
    producer = {o: nd for nd in model.graph.node for o in nd.output if o}
    inits = {t.name for t in model.graph.initializer}
    picked, pending, seen = {}, [size_tensor], set()
    while pending:
        t = pending.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        if t in inits:
            continue
        nd = producer.get(t)
        if nd is None or nd.domain not in ("", "ai.onnx") or len(seen) > 512:
            return None
        if nd.op_type == "Shape" and nd.input[0] != pooled:
            return None
        picked[id(nd)] = nd
        if nd.op_type != "Shape":
            pending.extend(nd.input)
    nodes = [nd for nd in model.graph.node if id(nd) in picked]
    graph = helper.make_graph(nodes, "size", [helper.make_tensor_value_info(pooled, elem, None)],
                              [helper.make_empty_tensor_value_info(size_tensor)],
                              initializer=[t for t in model.graph.initializer if t.name in seen])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub


def fold_static_sizes(model: onnx.ModelProto, specs: list) -> list:
    """``specs`` with each computed output size folded to its constant where the pooled input's size is
    static (a dynamic export bound with ``--input-shape``): the static lowerings then apply, as for a size the
    exporter folded itself. A size that also reads a symbolic (batch) dim, or that is 0, stays computed."""
    from dataclasses import replace

    import numpy as np
    from onnx.reference import ReferenceEvaluator

    from ..spec import RuntimeDim

    out = []
    for s in specs:
        if not s.runtime_sizes or not all(isinstance(d, int) for d in s.in_sizes):
            out.append(s)
            continue
        sizes = list(s.node.output_size)
        for tensor in {e.tensor for e in sizes if isinstance(e, RuntimeDim)}:
            sub = size_subgraph(model, tensor, s.node.input, s.dtype)
            values = []
            for lead in (1, 2):  # symbolic leading dims at two values: the size must not depend on them
                shape = [d if isinstance(d, int) else lead for d in s.input_shape]
                try:
                    x = np.zeros(shape, onnx.helper.tensor_dtype_to_np_dtype(s.dtype))
                    values.append(np.asarray(ReferenceEvaluator(sub).run(None, {s.node.input: x})[0]).reshape(-1))
                except Exception:  # noqa: BLE001 - no subgraph, or one the reference cannot run: stays computed
                    values = []
                    break
            if len(values) == 2 and np.array_equal(values[0], values[1]):
                sizes = [int(values[0][e.index]) if isinstance(e, RuntimeDim) and e.tensor == tensor
                         and values[0][e.index] >= 1 else e for e in sizes]
        if any(isinstance(e, RuntimeDim) for e in sizes):
            out.append(s)
            continue
        lead = len(s.input_shape) - s.k
        out.append(replace(s, node=replace(s.node, output_size=tuple(sizes)),
                           output_shape=tuple(s.output_shape[:lead]) + tuple(sizes)))
    return out


def sizes_at_lengths(sess, x: str, dtype, base: list[int], axis: int, index: int, lengths):
    """Entry ``index`` of the size a :func:`size_subgraph` session computes with its input ``x`` (numpy
    ``dtype``) of shape ``base`` whose ``axis`` takes each length in ``lengths``: ``(n, size)`` pairs, ``size``
    None where the subgraph fails at that length."""
    import numpy as np

    for n in lengths:
        shape = list(base)
        shape[axis] = n
        try:
            (value,) = sess.run(None, {x: np.zeros(shape, dtype)})
        except Exception:  # noqa: BLE001 - a length the size arithmetic refuses
            yield n, None
            continue
        yield n, int(np.asarray(value).reshape(-1)[index])


#: input lengths the float32 size arithmetic is compared with torch's double at in onnxruntime (a count, never
#: a time), and then, where :mod:`.size_vectors` takes the subgraph and agrees with onnxruntime there, in numpy
#: up to PRECISION_FAR: past any image's side (scale 0.94 first differs at 2150), short of where the common
#: scales first do (0.6 at 3,495,258, 1/3 at 12,582,914: every float scale does somewhere below 2**24)
PRECISION_N = 2048
PRECISION_FAR = 2 ** 16
_CHUNK = 2 ** 16
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


#: what a float32 constant of a size subgraph may have been in torch, which computes in double: decimals of up
#: to this many significant digits (0.09090909 is 1/11 rounded, not a literal), fractions p/q up to this
#: denominator, and the doubles this many units in the last place either side of one that only rounds its value
#: (counts, never times)
_SHORT_DIGITS = 6
_MAX_DENOMINATOR = 1000
_ULPS = 2


#: the doubles torch held, where the caller knows them (onnxpoolfix.export reads them from the exported
#: program): a float32 constant one of them rounds to is read as that double alone (:func:`torch_doubles`)
_KNOWN: ContextVar[tuple[float, ...]] = ContextVar("onnxpoolfix_torch_doubles", default=())


@contextmanager
def torch_doubles(values) -> Iterator[None]:
    """Read the size subgraphs' float constants inside the block as these doubles of torch's, where one rounds
    to the constant: what torch computed with is then known, not guessed (:func:`torch_readings`)."""
    token = _KNOWN.set(tuple(float(v) for v in values))
    try:
        yield
    finally:
        _KNOWN.reset(token)


def torch_readings(v: float) -> list[float]:
    """The doubles torch may have held where the file holds float32 ``v`` (an exporter rounded a Python float
    to float32): those of :func:`torch_doubles` that round to ``v``, where the caller knows them; else the
    shortest decimal of up to 6 significant digits and every fraction p/q (q <= 1000) that
    round to ``v``, e.g. 0.7 for 0.699999988, 3/11 = 0.2727272727272727 for 0.27272728; where there is none,
    ``v``'s shortest decimal and ``v`` itself. Every one of them must give the file's sizes.

    A value a double cannot hold (0.7, 10/13) is also read as the doubles up to 2 units in the last place either
    side of its nearest: a scale torch computed lands there (``1/1.3`` is 10/13's nearest double less one unit,
    ``0.3 * 3`` 0.9's), and where the two floor differently (at 39 x 10/13: 30 against 29) the file cannot say
    which torch holds. A value a double holds exactly (0.5, 0.75, 3/8) is read as itself alone."""
    import math
    from fractions import Fraction

    import numpy as np

    v32 = np.float32(v)
    if not np.isfinite(v32):
        return [float(v32)]
    known = [d for d in _KNOWN.get() if np.float32(d) == v32]
    if known:
        return list(dict.fromkeys(known))
    exact: list[Fraction] = []
    for digits in range(1, _SHORT_DIGITS + 1):
        short = f"{float(v32):.{digits}g}"
        if np.float32(float(short)) == v32:
            exact.append(Fraction(short))
            break
    for q in range(1, _MAX_DENOMINATOR + 1):
        p = round(float(v32) * q)
        if p and np.float32(p / q) == v32:
            exact.append(Fraction(p, q))
    if not exact:
        exact = [Fraction(str(v32)), Fraction(float(v32))]
    out: list[float] = []
    for e in dict.fromkeys(exact):
        near = float(e)
        out.append(near)
        if Fraction(near) != e:
            lo = hi = near
            for _ in range(_ULPS):
                lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
                out += [d for d in (lo, hi) if np.float32(d) == v32]
    return list(dict.fromkeys(out))


def in_double(sub: onnx.ModelProto) -> list[onnx.ModelProto]:
    """``sub`` (a :func:`size_subgraph`) with its floating-point arithmetic in float64, as torch computes a size
    from ``scale_factor`` (Python floats): each Cast to a float type casts to double, each float constant one of
    its :func:`torch_readings` (model ``i`` takes each constant's ``i``-th, or its last). Empty where it computes
    nothing in floating point."""
    import numpy as np
    from onnx import numpy_helper

    def widen(t: onnx.TensorProto, i: int) -> onnx.TensorProto | None:
        if t.data_type not in _FLOATS:
            return None
        a = numpy_helper.to_array(t).astype(np.float32)
        wide = [(r := torch_readings(v))[min(i, len(r) - 1)] for v in a.reshape(-1).tolist()]
        return numpy_helper.from_array(np.array(wide, np.float64).reshape(a.shape), t.name)

    def constants(m: onnx.ModelProto) -> list[float]:
        values = [v for t in m.graph.initializer if t.data_type in _FLOATS
                  for v in numpy_helper.to_array(t).reshape(-1).tolist()]
        for node in m.graph.node:
            for a in node.attribute:
                if node.op_type == "Constant" and a.name == "value" and a.t.data_type in _FLOATS:
                    values += numpy_helper.to_array(a.t).reshape(-1).tolist()
                elif node.op_type == "Constant" and a.name == "value_float":
                    values.append(a.f)
                elif node.op_type == "Constant" and a.name == "value_floats":
                    values += list(a.floats)
                elif node.op_type == "ConstantOfShape" and a.name == "value" and a.t.data_type in _FLOATS:
                    values += numpy_helper.to_array(a.t).reshape(-1).tolist()
        return values

    variants = max((len(torch_readings(v)) for v in constants(sub)), default=1)
    models = []
    for i in range(variants):
        out = onnx.ModelProto()
        out.CopyFrom(sub)
        changed = False
        for node in out.graph.node:
            for a in node.attribute:
                if node.op_type == "Cast" and a.name == "to" and a.i in _FLOATS:
                    a.i, changed = onnx.TensorProto.DOUBLE, True
                elif (node.op_type in ("Constant", "ConstantOfShape") and a.name == "value"
                      and (w := widen(a.t, i)) is not None):
                    a.t.CopyFrom(w)
                    changed = True
                elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                    values = [a.f] if a.name == "value_float" else list(a.floats)
                    wide = [(r := torch_readings(v))[min(i, len(r) - 1)] for v in values]
                    node.attribute.remove(a)
                    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(
                        np.array(wide[0] if a.name == "value_float" else wide, np.float64))))
                    changed = True
                    break
        for k, t in enumerate(out.graph.initializer):
            if (w := widen(t, i)) is not None:
                out.graph.initializer[k].CopyFrom(w)
                changed = True
        if not changed:
            return []
        models.append(out)
    return models


def size_precision_error(model: onnx.ModelProto, specs: list) -> None:
    """Raise :class:`~onnxpoolfix.errors.UnsupportedNodeError` where a computed output size (a
    :class:`~onnxpoolfix.spec.RuntimeDim`) comes out of the graph's float32 arithmetic other than torch's double
    arithmetic gives it, at some input length up to :data:`PRECISION_N` (the bound one where the input is
    bound). Both exporters write ``Cast(Shape(x)[2], float) * 0.7`` for ``scale_factor=0.7``, where torch
    computes ``floor(90 * 0.7) = 62`` in double and the file 63: the replaced pool would be exact at the
    file's size, and that size wrong at one n in ten. Every reading of its constants torch may have held
    (:func:`torch_readings`: 0.7, or 3/11 where the file holds 0.27272728) must agree with the file.
    (Up to :data:`PRECISION_FAR`.)"""
    from ..spec import RuntimeDim

    for s in specs:
        for tensor in dict.fromkeys(e.tensor for e in s.node.output_size if isinstance(e, RuntimeDim)):
            sub = size_subgraph(model, tensor, s.node.input, s.dtype)
            for wide in in_double(sub) if sub is not None else ():
                _compare_readings(s, tensor, sub, wide)


def _compare_readings(s, tensor: str, sub, wide) -> None:
    """Raise where the file's float32 size ``sub`` and one double reading ``wide`` of it differ at some length."""
    import numpy as np
    from onnx import numpy_helper

    from ..errors import UnsupportedNodeError
    from ..sessions import ort_session
    from ..spec import RuntimeDim

    try:
        file = ort_session(sub)
    except Exception:  # noqa: BLE001 - not a subgraph onnxruntime takes alone: nothing to compare
        return
    try:
        torch_like = ort_session(wide)
    except Exception as e:  # noqa: BLE001 - a reading not taken is no agreement
        raise UnsupportedNodeError(
            f"{s.node.label}: the exporter computes its output size '{tensor}' in float32, torch in double, and "
            f"the size subgraph does not run in double to compare ({' '.join(str(e).split())[:120]})",
            "give the pool an integer size (F.interpolate(size=...)), then export again") from None
    lead = s.ndim - s.k
    dt = np.float32 if s.dtype == onnx.TensorProto.BFLOAT16 else helper.tensor_dtype_to_np_dtype(s.dtype)
    for j, e in enumerate(s.node.output_size):
        if not isinstance(e, RuntimeDim) or e.tensor != tensor:
            continue
        n_in = s.in_sizes[j]
        lengths = [n_in] if isinstance(n_in, int) else range(1, PRECISION_N + 1)
        base = [d if isinstance(d, int) else 1 for d in s.input_shape[:lead]]
        base += [d if isinstance(d, int) else 7 for d in s.in_sizes]
        runs = [list(sizes_at_lengths(sess, s.node.input, dt, base, lead + j, e.index, lengths))
                for sess in (file, torch_like)]
        differ = [(n, a, b) for (n, a), (_, b) in zip(*runs) if a is not None and b is not None and a != b]
        last = lengths[-1]
        if not differ and not isinstance(n_in, int):
            differ, last = _differ_beyond(sub, wide, base, lead + j, e.index, runs)
        if differ:
            n, a, b = differ[0]
            more = f" and {len(differ) - 1} more up to {last}" if len(differ) > 1 else ""
            scales = sorted({v for t in wide.graph.initializer if t.data_type == onnx.TensorProto.DOUBLE
                             for v in numpy_helper.to_array(t).reshape(-1).tolist()}
                            | {v for nd in wide.graph.node for at in nd.attribute
                               if nd.op_type == "Constant" and at.name == "value"
                               and at.t.data_type == onnx.TensorProto.DOUBLE
                               for v in numpy_helper.to_array(at.t).reshape(-1).tolist()})
            raise UnsupportedNodeError(
                f"{s.node.label}: the exporter computes its output size '{tensor}' in float32, torch in "
                f"double, and they differ: at length {n} on axis {lead + j} the file's size is {a}, torch's {b} "
                f"(its scale read as {', '.join(map(repr, scales))}){more}",
                "give the pool an integer size (F.interpolate(size=...)) or a scale_factor that float32 and "
                "double both hold (0.5, 0.25, 0.75, 0.625, ...), then export again: the two then agree at every "
                "length. onnxpoolfix.export (dynamo) reads the double torch holds from the module, and refuses "
                "only where the file's float32 arithmetic differs from it")


def _differ_beyond(sub, wide, base: list[int], axis: int, index: int, near: list) -> tuple[list, int]:
    """The float32 (``sub``) and double (``wide``) readings compared past :data:`PRECISION_N` up to
    :data:`PRECISION_FAR`, in numpy: ``([(n, file's, torch's), ...], last length)``; nothing where numpy cannot
    take the subgraph or its reading of the lengths onnxruntime ran (``near``) is not onnxruntime's."""
    import numpy as np

    from .size_vectors import Unsupported, size_at_lengths

    try:
        with np.errstate(all="ignore"):
            first = np.arange(1, PRECISION_N + 1)
            for model, ran in zip((sub, wide), near):
                got = size_at_lengths(model, base, axis, index, first)
                if any(v is not None and v != int(g) for (_, v), g in zip(ran, got)):
                    return [], PRECISION_N
            found: list = []
            for lo in range(PRECISION_N + 1, PRECISION_FAR + 1, _CHUNK):
                ns = np.arange(lo, min(lo + _CHUNK, PRECISION_FAR + 1))
                a, b = (size_at_lengths(m, base, axis, index, ns) for m in (sub, wide))
                found += [(int(ns[i]), int(a[i]), int(b[i])) for i in np.nonzero(a != b)[0]]
            return found, PRECISION_FAR
    except Unsupported:
        return [], PRECISION_N
    except Exception:  # noqa: BLE001 - a use of an op the numpy reading gets wrong: onnxruntime's reading alone
        logger.debug("the numpy reading of a size subgraph failed", exc_info=True)
        return [], PRECISION_N

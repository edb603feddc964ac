"""Output sizes the exporter computes in float32 where torch computes them in double (``scale_factor`` under
dynamic sizes: ``Floor(Cast(Shape(x)[2], float) * 0.7)``, torch's ``floor(n * 0.7)`` in double): the doubles torch
may have held for each float32 constant (:func:`torch_readings`), the size subgraph read in double
(:func:`in_double`), and the comparison of the two at every length that matters (:func:`size_precision_error`).
Where they differ, or cannot be compared, the pool is refused."""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import UnsupportedNodeError
from ..sessions import ort_session
from ..spec import RuntimeDim
from . import arrange, nodes_deep
from .size_subgraph import fed_by_shape, size_subgraph, sizes_at, value_type
from .size_vectors import Unsupported, size_at_lengths

#: input lengths the float32 size arithmetic is compared with torch's double at in onnxruntime (a count, never
#: a time), and then in numpy (:mod:`.size_vectors`, which must read the first ones as onnxruntime does) up to
#: PRECISION_FAR, the longest pooled length the tool lowers (float32 counts no further); an average only while
#: its runtime pooling matrix (output x input length, int64) holds at most AVG_CELLS entries (2 TiB): OUT cannot
#: be run past that (0.6 first differs at 3,495,258 on a 1.3e12-entry matrix; 0.0636 at 66,761 on 2.8e8)
PRECISION_N = 2048
PRECISION_FAR = 2 ** 24
AVG_CELLS = 2 ** 38
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
    most = 1  # the most readings any constant has: one model per reading

    def reading(v: float, i: int) -> float:
        nonlocal most
        r = torch_readings(v)
        most = max(most, len(r))
        return r[min(i, len(r) - 1)]

    def widen(t: onnx.TensorProto, i: int) -> onnx.TensorProto | None:
        if t.data_type not in _FLOATS:
            return None
        a = numpy_helper.to_array(t).astype(np.float32)
        wide = [reading(v, i) for v in a.reshape(-1).tolist()]
        return numpy_helper.from_array(np.array(wide, np.float64).reshape(a.shape), t.name)

    models: list[onnx.ModelProto] = []
    while len(models) < most:  # (model 0 reads every constant: ``most`` is known after it)
        i = len(models)
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
                    wide = [reading(v, i) for v in values]
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
    for s in specs:
        for tensor in dict.fromkeys(e.tensor for e in s.node.output_size if isinstance(e, RuntimeDim)):
            indices = [e.index for e in s.node.output_size if isinstance(e, RuntimeDim) and e.tensor == tensor]
            sub = size_subgraph(model, tensor, s.node.input, s.dtype)
            dims = list(s.input_shape) if sub is not None else None
            if sub is None:  # the size reads another tensor's shape (the graph input's, a pool behind a conv)
                sub = size_subgraph(model, tensor, None, 0)
                dims = value_type(model, sub.graph.input[0].name)[1] if sub is not None else None
            if dims is None:
                if sub is not None or _computes_in_float(model, tensor):
                    raise _uncompared(s, tensor, "the size reads the shapes of several tensors, or of one whose "
                                      "rank the file does not declare")
                continue
            # every symbolic axis for every entry: an entry may read another axis than its own (x.size(3) for H)
            base = [d if isinstance(d, int) else 7 for d in dims]
            sweeps = [(a, i, None) for i in indices for a, d in enumerate(dims) if not isinstance(d, int)]
            sweeps = sweeps or [(0, i, [base[0]]) for i in indices if base]
            readings = in_double(sub)
            for wide in readings:
                try:
                    _compare_readings(s, tensor, sub, wide, base, sweeps)
                except UnsupportedNodeError as e:
                    if len(readings) == 1 and _KNOWN.get() and s.target == "onnxruntime":
                        compute_in_double(model, tensor, wide)  # the double torch held is known: computed so
                        break
                    if len(readings) > 1 and not _KNOWN.get():
                        e.hint_text += (". The file's constants read as several doubles: onnxpoolfix.export "
                                        "reads which one torch held from the module")
                    elif _KNOWN.get() and len(readings) == 1:
                        e.hint_text += ("; or export for target='onnxruntime', which computes the size in double "
                                        f"as torch does (the {s.target} target writes no float64 arithmetic)")
                    raise


def compute_in_double(model: onnx.ModelProto, tensor: str, wide: onnx.ModelProto) -> None:
    """Make ``model`` compute the size ``tensor`` as ``wide`` does (its size subgraph read in double with the
    doubles torch held, :func:`in_double`): ``wide``'s nodes go in under fresh names just before the node
    that made ``tensor``, which now comes out of them, and the float32 nodes only it read are dropped."""
    g = model.graph
    taken = {o for nd in g.node for o in nd.output} | {t.name for t in g.initializer} | {i.name for i in g.input}

    def fresh(name: str) -> str:
        new, k = f"{name}_f64", 0
        while new in taken:
            k += 1
            new = f"{name}_f64_{k}"
        taken.add(new)
        return new

    made = [o for nd in wide.graph.node for o in nd.output if o]
    widened = [t for t in wide.graph.initializer if t.data_type == onnx.TensorProto.DOUBLE]
    rename = {n: (n if n == tensor else fresh(n)) for n in made + [t.name for t in widened]}
    held = list(g.node)  # the wrappers held: each keeps its id while the field is rearranged
    at = next(k for k, nd in enumerate(held) if tensor in nd.output)
    held[at].output[list(held[at].output).index(tensor)] = fresh(tensor)
    chain = [nd for nd in held if set(nd.output) & set(made)] + [held[at]]
    for t in widened:
        copy = g.initializer.add()
        copy.CopyFrom(t)
        copy.name = rename[t.name]
    for nd in wide.graph.node:
        copy = g.node.add()
        copy.CopyFrom(nd)
        copy.input[:] = [rename.get(i, i) for i in nd.input]
        copy.output[:] = [rename.get(o, o) for o in nd.output]
        copy.name = fresh(nd.name) if nd.name else ""
    order = [*held[:at], *list(g.node)[len(held):], *held[at:]]
    dropped: set[str] = set()
    while True:  # the float32 nodes nothing reads any more
        read = {i for nd in nodes_deep(order) for i in nd.input} | {o.name for o in g.output}
        dead = {id(nd) for nd in chain if not any(o in read for o in nd.output if o)}
        if not dead:
            break
        dropped |= {o for nd in chain if id(nd) in dead for o in nd.output}
        chain = [nd for nd in chain if id(nd) not in dead]
        order = [nd for nd in order if id(nd) not in dead]
    arrange(g.node, order)
    arrange(g.value_info, [v for v in g.value_info if v.name not in dropped])
    read = {i for nd in nodes_deep(g.node) for i in nd.input}
    arrange(g.initializer, [t for t in g.initializer if t.name in read or t.name not in rename])


def _computes_in_float(model: onnx.ModelProto, tensor: str) -> bool:
    """Whether anything upstream of ``tensor`` (within 512 nodes) casts to or holds a floating-point value."""
    producer = {o: nd for nd in model.graph.node for o in nd.output if o}
    floats = {t.name for t in model.graph.initializer if t.data_type in _FLOATS}
    pending, seen = [tensor], set()
    while pending and len(seen) <= 512:
        t = pending.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        nd = producer.get(t)
        if t in floats or (nd is not None and any(
                (a.name == "to" and a.i in _FLOATS) or (a.name == "value" and a.t.data_type in _FLOATS)
                or a.name in ("value_float", "value_floats") for a in nd.attribute)):
            return True
        if nd is not None and nd.op_type != "Shape":
            pending.extend(nd.input)
    return bool(pending)


def _uncompared(s, tensor: str, why: str):
    return UnsupportedNodeError(
        f"{s.node.label}: the exporter computes its output size '{tensor}' in float32, torch in double, and "
        f"the two cannot be compared ({why})",
        "give the pool an integer size (F.interpolate(size=...)), then export again")


def _compare_readings(s, tensor: str, sub, wide, base: list[int], sweeps: list) -> None:
    """Raise where the file's float32 size ``sub`` and one double reading ``wide`` of it differ at some length:
    ``sweeps`` holds ``(axis, index, lengths)``, entry ``index`` of the size as the subgraph's input (shape
    ``base``) takes each of ``lengths`` on ``axis`` (None: every length, to :data:`PRECISION_FAR`)."""
    x = sub.graph.input[0].name
    try:
        file, torch_like = ort_session(fed_by_shape(sub)), ort_session(fed_by_shape(wide))
    except Exception as e:  # noqa: BLE001 - a reading not taken is no agreement
        raise _uncompared(s, tensor, f"the size subgraph does not run ({' '.join(str(e).split())[:120]})") from None
    for axis, index, lengths in sweeps:
        every = lengths is None
        lengths = range(1, PRECISION_N + 1) if every else lengths
        runs = [list(sizes_at(sess, base, axis, index, lengths)) for sess in (file, torch_like)]
        differ = [(n, a, b) for (n, a), (_, b) in zip(*runs) if a is not None and b is not None and a != b]
        last = lengths[-1]
        if not differ and every:
            try:
                differ, last = _differ_beyond(sub, wide, base, axis, index, runs, s.kind == "avg")
            except Exception as e:  # noqa: BLE001 - lengths past PRECISION_N not compared are not agreement
                raise _uncompared(s, tensor, f"past length {PRECISION_N}: {' '.join(str(e).split())[:80]}") from None
        if differ:
            n, a, b = differ[0]
            more = f" and {len(differ) - 1} more up to {last}" if len(differ) > 1 else ""
            of = "" if x == s.node.input else f" of '{x}'"
            at = f"length {n} on axis {axis}{of}" if every else f"input shape {'x'.join(map(str, base))}{of}"
            scales = sorted({v for t in wide.graph.initializer if t.data_type == onnx.TensorProto.DOUBLE
                             for v in numpy_helper.to_array(t).reshape(-1).tolist()}
                            | {v for nd in wide.graph.node for at in nd.attribute
                               if nd.op_type == "Constant" and at.name == "value"
                               and at.t.data_type == onnx.TensorProto.DOUBLE
                               for v in numpy_helper.to_array(at.t).reshape(-1).tolist()})
            raise UnsupportedNodeError(
                f"{s.node.label}: the exporter computes its output size '{tensor}' in float32, torch in "
                f"double, and they differ: at {at} the file's size is {a}, torch's {b} "
                f"(its scale read as {', '.join(map(repr, scales))}){more}",
                "give the pool an integer size (F.interpolate(size=...)) or a scale_factor that float32 and "
                "double both hold (0.5, 0.25, 0.75, 0.625, ...), then export again: the two then agree at every "
                "length")


def _differ_beyond(sub, wide, base: list[int], axis: int, index: int, near: list, avg: bool) -> tuple[list, int]:
    """The float32 (``sub``) and double (``wide``) readings compared past :data:`PRECISION_N` up to
    :data:`PRECISION_FAR`, in numpy: ``([(n, file's, torch's), ...], last length)``; for an average, only up to
    the length whose pooling matrix (the file's size x n, :mod:`~onnxpoolfix.lowering.dynamic`) passes
    :data:`AVG_CELLS`: OUT cannot be run past it. Raises :class:`~.size_vectors.Unsupported` where numpy cannot
    take the subgraph or reads the lengths onnxruntime ran (``near``) otherwise."""
    with np.errstate(all="ignore"):
        first = np.arange(1, PRECISION_N + 1)
        for model, ran in zip((sub, wide), near):
            got = size_at_lengths(model, base, axis, index, first)
            if any(v is not None and v != int(g) for (_, v), g in zip(ran, got)):
                raise Unsupported("a reading other than onnxruntime's")
        found: list = []
        for lo in range(PRECISION_N + 1, PRECISION_FAR + 1, _CHUNK):
            ns = np.arange(lo, min(lo + _CHUNK, PRECISION_FAR + 1))
            a, b = (size_at_lengths(m, base, axis, index, ns) for m in (sub, wide))
            runs = np.nonzero(a.astype(np.float64) * ns > AVG_CELLS)[0] if avg else ()
            end = int(runs[0]) if len(runs) else len(ns)
            found += [(int(ns[i]), int(a[i]), int(b[i])) for i in np.nonzero(a[:end] != b[:end])[0]]
            if end < len(ns):
                return found, int(ns[end]) - 1
        return found, PRECISION_FAR

"""The differential check: OUT against the ORIGINAL file, where the original is known right.

The node check (:mod:`.runner`) proves each replaced node against the reference of the tool's own reading of
the graph (an adaptive pool of this output size); a reading that is wrong passes it. A file the dynamo exporter
wrote is right at the size it was traced at (its frozen pools and decompositions compute torch's pooling
there), and a static file at its one size: there OUT must compute what the original computes, every graph
output, whatever the tool read. The rewrite leaves every node but the replaced ones as it was, so it is enough
that each tensor onnxpoolfix wrote anew, and that the model's own nodes read, equals the original's: each is
run on the cut of the graph computing it (:mod:`.cut`), not the whole model. A genuine ``F.avg_pool2d(f, 2)``
taken for an adaptive 4x4 pool of a 16x16 map differs at once.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import onnx

from ..errors import CheckFailedError, ShapeError
from ..graph import outer_reads
from ..graph.emit import EMITTED_BY
from ..graph.shapes import PoolSpec
from ..sessions import ort_session
from ..words import TRACED_SHAPES_FORM
from .cut import cut_bytes
from .feeds import random_feed, symbolic_inputs

__all__ = ["known_right_shapes", "input_signature", "as_given", "right_shapes", "redefined_by_plan", "redefined_in",
           "original_outputs", "compare_with_original", "half_type"]

#: output tolerance relative to the output's scale, per float dtype (sums in another order round otherwise)
_RELATIVE = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-4, np.dtype(np.float16): 1e-2}
_OTHER_FLOAT = 5e-2  # bfloat16


def known_right_shapes(model: onnx.ModelProto, traced_shapes: Mapping[str, Sequence[int]] | None) -> dict | None:
    """The input shapes where the original file is known right: its declared ones where every input is static,
    else the traced shapes where they bind every symbolic input; None where there is no such size."""
    symbolic = symbolic_inputs(model)
    if not symbolic:
        return {}
    if traced_shapes and all(name in traced_shapes for name in symbolic):
        return {name: list(traced_shapes[name]) for name in symbolic}
    return None


def input_signature(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Copies of the graph's inputs: the file's signature before a front end binds OUT's (``--input-shape``)."""
    return [copy.deepcopy(i) for i in model.graph.input]


@contextmanager
def as_given(model: onnx.ModelProto, signature: Sequence[onnx.ValueInfoProto]) -> Iterator[onnx.ModelProto]:
    """``model`` with its inputs as ``signature`` declares them for the block (the file as given, its sizes
    symbolic where a front end bound them: the original runs as torch wrote it), then as they were."""
    bound = input_signature(model)
    del model.graph.input[:]
    model.graph.input.extend(signature)
    try:
        yield model
    finally:
        del model.graph.input[:]
        model.graph.input.extend(bound)


def right_shapes(model: onnx.ModelProto, signature: Sequence[onnx.ValueInfoProto],
                 traced_shapes: Mapping[str, Sequence[int]] | None,
                 input_shapes: Mapping[str, Sequence[int]] | None) -> dict | None:
    """:func:`known_right_shapes` of the file as given (``signature``: its inputs before the front ends ran), at
    the traced size, else at the bound size (the dynamo front end proves its regions there); None where OUT, its
    inputs bound at another size than the traced one, does not run there."""
    bound = [i.SerializeToString() for i in model.graph.input] != [i.SerializeToString() for i in signature]
    if bound and traced_shapes and input_shapes and any(
            list(v) != list(input_shapes.get(k, v)) for k, v in traced_shapes.items()):
        return None
    with as_given(model, signature):
        return known_right_shapes(model, traced_shapes or input_shapes)


def redefined_by_plan(model: onnx.ModelProto, specs: Sequence[PoolSpec]) -> list[str]:
    """Before the rewrite: the tensors it may write anew, that is every output of the nodes planned to go
    (the replaced nodes and those whose places the lowering takes, :attr:`PoolNode.replaces`)."""
    names = [o for s in specs for o in (s.node.output, s.node.indices_output) if o]
    names += [o for s in specs for k in (s.node.index, *s.node.replaces) for o in model.graph.node[k].output if o]
    return list(dict.fromkeys(names))


def redefined_in(model: onnx.ModelProto) -> set[str]:
    """After the rewrite: the tensors onnxpoolfix's nodes write that the model's own nodes or its outputs read.
    Every other tensor the kept nodes read is computed as in the original, so where these equal the
    original's, every graph output does."""
    g = model.graph
    ours = [n for n in g.node if n.doc_string.startswith(EMITTED_BY)]
    written = {o for n in ours for o in n.output if o}
    read = {o.name for o in g.output}
    for n in g.node:
        if not n.doc_string.startswith(EMITTED_BY):
            read.update(n.input)
            read.update(outer_reads(n))
    return written & read


def original_outputs(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], names: Sequence[str], *,
                     seed: int, model_dir: str | None) -> tuple[dict, dict] | None:
    """(feed, values by name) of the tensors ``names`` of the original model at ``shapes`` on seeded random inputs
    (run on the cut of the graph computing them), or None where the original does not run in onnxruntime
    (leftovers of another domain, a node it cannot take): then nothing is known right."""
    if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        return None
    feed = random_feed(model, shapes, np.random.default_rng([seed, 32]))
    try:
        return feed, _run_cut(model, names, feed, model_dir)
    except Exception:  # noqa: BLE001 - the original not running here tells nothing about OUT
        return None


def _run_cut(model: onnx.ModelProto, names: Sequence[str], feed: dict, model_dir: str | None) -> dict:
    produced = {o for n in model.graph.node for o in n.output if o}
    names = [n for n in names if n in produced]
    session = ort_session(cut_bytes(model, [onnx.ValueInfoProto(name=n) for n in names]), model_dir)
    inputs = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(names, {k: v for k, v in feed.items() if k in inputs})))


def compare_with_original(model: onnx.ModelProto, feed: dict, want: dict, *, model_dir: str | None,
                          where: str, traced: bool, got: dict | None = None) -> None:
    """Run OUT on the original's feed and compare the tensors the rewrite wrote anew (:func:`redefined_in`) with
    the original's values of them; where one differs raise :class:`ShapeError` at a given traced size (``traced``:
    the size contradicts the graph, exit 4) and :class:`CheckFailedError` at the file's static size. ``where``:
    how the size is named ("the given traced size x:1,3,16,16", "its static size"). ``got``: OUT's values of them
    at ``feed`` where the check's own session fetched them already (:class:`.runner.ExtraRun`)."""
    redefined = redefined_in(model)
    if got is not None and half_type(model) is not None:
        # the node check's session fetched these from another graph (it also outputs the tensors it checks), and
        # where float16 values flow onnxruntime rounds them there otherwise than in the original's plain cut run:
        # up to half a float16 ulp apart, a right OUT refused as misread (review53); OUT's cut runs here the
        # way the original's does
        got = None
    unknown = sorted(redefined - set(want))
    if unknown:  # the original's value of a tensor onnxpoolfix wrote was not taken: nothing proves it
        raise CheckFailedError(f"the differential check has no original value of '{unknown[0]}', which OUT "
                               "computes anew", "this is a bug in onnxpoolfix: please report it with the model")
    if got is None or not redefined <= set(got):
        got = _run_cut(model, sorted(redefined), feed, model_dir)
    for name in sorted(redefined):
        g, w = got[name], want[name]
        if g.shape != w.shape:
            _differs(name, f"shape {g.shape} where the original's is {w.shape}", where, traced)
        if np.issubdtype(w.dtype, np.floating) or w.dtype.kind == "V":
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            scale = max(1.0, float(np.nanmax(np.abs(w64), initial=0.0)))
            bound = _RELATIVE.get(w.dtype, _OTHER_FLOAT) * scale
            same = (np.abs(g64 - w64) <= bound) | (np.isnan(g64) & np.isnan(w64)) | (g64 == w64)
            if not same.all():
                worst = float(np.nanmax(np.abs(g64 - w64)))
                _differs(name, f"values up to {worst:.3g} apart (allowed {bound:.3g})", where, traced)
        elif not np.array_equal(g, w):
            _differs(name, "different values", where, traced)


def half_type(model: onnx.ModelProto) -> str | None:
    """The narrowest float type the main graph computes in ("bfloat16", else "float16"): that of an input,
    output, initializer, declared value or a Cast's target; None where it holds neither."""
    g = model.graph
    types = {vi.type.tensor_type.elem_type for vi in [*g.input, *g.output, *g.value_info]}
    types |= {t.data_type for t in g.initializer}
    types |= {a.i for n in g.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"}
    half = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16
    return next((("bfloat16", "float16")[i] for i, t in enumerate(half) if t in types), None)


def _differs(name: str, what: str, where: str, traced: bool) -> None:
    message = f"OUT differs from the original file at {where}, where the original is right: tensor '{name}' has {what}"
    if traced:  # the given size contradicts the graph, or a pool was misread
        raise ShapeError(message, "give the size the model was exported at (the export call's example input) with "
                         f"{TRACED_SHAPES_FORM}; if it is that size, a pool was misread (please report it "
                         "with the file), and exporting through onnxpoolfix.export avoids the reading")
    raise CheckFailedError(message, "a frozen pool or region was read as something it is not; please report it with "
                           "the file. Exporting through onnxpoolfix.export makes every adaptive pool's output size "
                           "known")

"""The differential check: OUT against the ORIGINAL file, where the original is known right.

The node check (:mod:`.runner`) proves each replaced node against the reference of the tool's own reading of
the graph (an adaptive pool of this output size); a reading that is wrong passes it. A file the dynamo exporter
wrote is right at the size it was traced at (its frozen pools and decompositions compute torch's pooling
there), and a static file at its one size: there OUT must compute what the original computes, every graph
output, whatever the tool read. A genuine ``F.avg_pool2d(f, 2)`` taken for an adaptive 4x4 pool of a 16x16
map differs at once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ..errors import CheckFailedError, ShapeError
from .feeds import graph_inputs, random_feed, symbolic_inputs
from .runner import ort_session

__all__ = ["known_right_shapes", "original_outputs", "compare_with_original"]

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


def original_outputs(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], *, seed: int,
                     model_dir: str | None) -> tuple[dict, dict] | None:
    """(feed, outputs by name) of the original model at ``shapes`` on seeded random inputs, or None where the
    original does not run in onnxruntime (leftovers of another domain, a node it cannot take): then nothing
    is known right."""
    if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        return None
    feed = random_feed(model, shapes, np.random.default_rng([seed, 32]))
    try:
        session = ort_session(model, model_dir)
        names = [o.name for o in session.get_outputs()]
        return feed, dict(zip(names, session.run(None, feed)))
    except Exception:  # noqa: BLE001 - the original not running here tells nothing about OUT
        return None


def compare_with_original(model: onnx.ModelProto, feed: dict, want: dict, *, model_dir: str | None,
                          where: str) -> None:
    """Run OUT on the original's feed; where some output differs from the original's raise
    :class:`ShapeError` at a given traced size (the size contradicts the graph, exit 4) and
    :class:`CheckFailedError` at the file's static size. ``where``: how the size is named ("the traced size
    x:1,3,16,16", "its static size")."""
    session = ort_session(model, model_dir)
    names = [o.name for o in session.get_outputs()]
    feed = {vi.name: feed[vi.name] for vi in graph_inputs(model) if vi.name in feed}
    got = dict(zip(names, session.run(None, feed)))
    for name, w in want.items():
        if name not in got:
            continue
        g = got[name]
        if g.shape != w.shape:
            _differs(name, f"shape {g.shape} where the original's is {w.shape}", where)
        if np.issubdtype(w.dtype, np.floating) or w.dtype.kind == "V":
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            scale = max(1.0, float(np.nanmax(np.abs(w64), initial=0.0)))
            bound = _RELATIVE.get(w.dtype, _OTHER_FLOAT) * scale
            same = (np.abs(g64 - w64) <= bound) | (np.isnan(g64) & np.isnan(w64)) | (g64 == w64)
            if not same.all():
                worst = float(np.nanmax(np.abs(g64 - w64)))
                _differs(name, f"values up to {worst:.3g} apart (allowed {bound:.3g})", where)
        elif not np.array_equal(g, w):
            _differs(name, "different values", where)


def _differs(name: str, what: str, where: str) -> None:
    message = f"OUT differs from the original file at {where}, where the original is right: output '{name}' has {what}"
    if where.startswith("the traced size"):  # the given size contradicts the graph, or a pool was misread
        raise ShapeError(message, "give the size the model was exported at (the export call's example input) with "
                         "--traced-shape NAME:D0,D1,...; if it is that size, a pool was misread (please report it "
                         "with the file), and exporting through onnxpoolfix.export avoids the reading")
    raise CheckFailedError(message, "a frozen pool or region was read as something it is not; please report it with "
                           "the file. Exporting through onnxpoolfix.export makes every adaptive pool's output size "
                           "known")

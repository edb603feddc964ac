"""The input-size range torch.export proved a dynamo file's program for: its ``range_constraints``, which
the exporter keeps in the model's metadata (``{s53: VR[41, 256], s0: VR[4, 256]}``). A Python branch on a
size (``6 if x.shape[2] > 40 else 4``) narrows it silently under ``Dim.DYNAMIC``, and the file holds only the
branch taken: outside the range torch's model runs code the file does not hold, so nothing onnxpoolfix writes
can equal torch there (review56 F7). The symbols are torch's own, not the inputs' dim names: the note names
the ranges as the file writes them."""
from __future__ import annotations

import re

import onnx

from ...report import Note
from .search import evaluate

RANGE_KEY = "pkg.torch.export.ExportedProgram.range_constraints"
#: a key is a symbol or, for a derived Dim (``8*h``), an expression of one: ``{8*s39: VR[8, 512], s39: VR[1, 64]}``
_RANGE = re.compile(r"(?:^|[{,])\s*([^:,{}]+?):\s*VR\[(-?\w+),\s*(-?\w+)\]")
#: torch's own bounds of an unconstrained size (0 and 1 are specialised)
_FREE_LOW, _FREE_HIGH = ("0", "1", "2"), ("int_oo", "oo", "inf")


def narrowed_ranges(model: onnx.ModelProto) -> list[tuple[str, str, str]]:
    """(symbol, low, high) of every size symbol whose range is narrower than torch's unconstrained one."""
    text = next((p.value for p in [*model.metadata_props, *model.graph.metadata_props] if p.key == RANGE_KEY), "")
    return [(s, lo, hi) for s, lo, hi in _RANGE.findall(text) if lo not in _FREE_LOW or hi not in _FREE_HIGH]


def range_note(model: onnx.ModelProto) -> list[Note]:
    """A note naming the narrowed ranges, for a file whose pools onnxpoolfix replaces."""
    ranges = narrowed_ranges(model)
    if not ranges:
        return []
    text = ", ".join(f"{s} in [{lo}, {hi}]" for s, lo, hi in ranges)
    return [Note(f"torch.export proved this file's program only where its size symbols lie in {text} (the "
                        "file's range_constraints: the export's Dim bounds, narrowed by any Python branch on a size, "
                        "silently under Dim.DYNAMIC): OUT equals torch there; outside, torch's model may run code the "
                        "file does not hold", "traced-range", ranges=[list(r) for r in ranges])]


def outside_ranges(model: onnx.ModelProto, env) -> list[tuple[str, int, str, str]]:
    """(range key, its value, low, high) of each narrowed range that the symbols' values ``env`` (the inputs' dim
    names, bound) put outside it; a key naming a symbol ``env`` lacks (a named Dim's: torch's symbols are not the
    inputs' dim names then) says nothing."""
    out = []
    for key, lo, hi in narrowed_ranges(model):
        value = evaluate(key.strip(), env)
        if value is None:
            continue
        low = int(lo) if lo.lstrip("-").isdigit() else None
        high = int(hi) if hi.lstrip("-").isdigit() else None
        if (low is not None and value < low) or (high is not None and value > high):
            out.append((key.strip(), value, lo, hi))
    return out

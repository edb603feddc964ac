"""The input-size range torch.export proved a dynamo file's program for: its ``range_constraints``, which
the exporter keeps in the model's metadata (``{s53: VR[41, 256], s0: VR[4, 256]}``). A Python branch on a
size (``6 if x.shape[2] > 40 else 4``) narrows it silently under ``Dim.DYNAMIC``, and the file holds only the
branch taken: outside the range torch's model runs code the file does not hold, so nothing onnxpoolfix writes
can equal torch there (review56 F7). The symbols are torch's own, not the inputs' dim names: the note names
the ranges as the file writes them.

A named ``Dim("H")``, a derived ``8*h`` or a ``dynamic_axes`` name renames the input's dim (``H``, ``8*h``,
``height``), not the range key (``s53``, ``8*s39``; review70). The file keeps no table between the two; torch
writes the keys in the order of the user inputs' symbolic dims (``make_constraints``: each new dim expression as
met, the derived dims' roots after them; symbols of the program's own sizes last, ``_get_updated_range_constraints``),
which :func:`key_names` reads, keeping only a pairing that every dim torch did not rename and every derived dim's
form confirm. A narrowed key it cannot tie to the inputs' dims is one no binding can be checked against
(:func:`unchecked_ranges`)."""
from __future__ import annotations

import re

import onnx

from ...check.feeds import graph_inputs
from ...errors import UnsupportedNodeError
from ...graph.shapes import type_dims
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


def refuse_unshown_forms(model: onnx.ModelProto) -> None:
    """Refuse (exit 4) a file whose range keys hold an input dim in a form the file does not write
    (:func:`unshown_forms`), for a file whose pools onnxpoolfix replaces; read before any binding."""
    if unshown := unshown_forms(model):
        where = ", ".join(f"{dim} as {key}" for key, dim in unshown)
        raise UnsupportedNodeError(
            f"torch.export held this dynamo file's input dims in a form the file does not write ({where}, its "
            "range_constraints, the dim by the keys' order): the file takes every size there but is torch's program "
            "only at sizes of that form (torch 2.9 writes x[..., : W // 2 * 2] traced at an even W with no crop), so "
            "OUT would be wrong at the others", "export through onnxpoolfix.export", unshown=[list(u) for u in unshown])


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
    names, bound) put outside it, the key read in the inputs' dim names (:func:`key_names`); a key naming a symbol
    ``env`` lacks (an input left unbound, a symbol not tied to any input: :func:`unchecked_ranges`) says nothing."""
    out = []
    for key, lo, hi in ranges_as_named(model):
        value = evaluate(key, env)
        if value is None:
            continue
        low = int(lo) if lo.lstrip("-").isdigit() else None
        high = int(hi) if hi.lstrip("-").isdigit() else None
        if (low is not None and value < low) or (high is not None and value > high):
            out.append((key, value, lo, hi))
    return out


_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|\S")
_TORCH_SYMBOL = re.compile(r"[su]\d+")


def key_names(model: onnx.ModelProto) -> dict[str, str]:
    """torch's size symbol -> the graph inputs' dim name it is written as (``s53`` -> ``H``, ``s39`` -> ``h`` from
    ``8*s39`` written ``8*h``; a dim torch did not rename: itself), from the order torch writes the range keys in
    (module doc). Empty (keys read as written) where that order does not pair the keys with the inputs' dims: a
    dim written with torch's symbols that is not its key, a derived dim of another form, a scalar (SymInt) input."""
    text = next((p.value for p in [*model.metadata_props, *model.graph.metadata_props] if p.key == RANGE_KEY), "")
    keys = [k.strip() for k, _, _ in _RANGE.findall(text)]
    while keys and re.fullmatch(r"u\d+", keys[0]):  # inline constraints (unbacked sizes) come first
        keys.pop(0)
    if any(not (vi.type.HasField("tensor_type") and vi.type.tensor_type.shape.dim) for vi in graph_inputs(model)):
        return {}  # a SymInt input (or one of no known rank) holds a key the dims do not show
    dims = _input_dims(model)
    if len(keys) < len(dims):
        return {}
    names: dict[str, str] = {}
    for key, dim in zip(keys, dims):
        a, b = _TOKEN.findall(key), _TOKEN.findall(dim)
        if len(a) != len(b):
            return {}
        for x, y in zip(a, b):
            if _TORCH_SYMBOL.fullmatch(x):
                if names.setdefault(x, y) != y or (_TORCH_SYMBOL.fullmatch(y) and x != y) or not y.isidentifier():
                    return {}
            elif x != y:
                return {}
    return names if len(set(names.values())) == len(names) else {}


def _input_dims(model: onnx.ModelProto) -> list[str]:
    dims: list[str] = []
    for vi in graph_inputs(model):
        dims += [d for d in dict.fromkeys(type_dims(vi.type)[1] or ()) if isinstance(d, str) and d not in dims]
    return dims


def _form(text: str) -> str:
    return "".join("_" if t[0].isalpha() or t[0] == "_" else t for t in _TOKEN.findall(text))


def unshown_forms(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(range key, the input dim at its place in the keys' order) of each key that is an expression of torch's
    symbols (``2*s24``) whose form no input's dim is written in (``8*s39`` is shown by ``8*h``): torch.export held
    that dim so (torch 2.9.1 holds W as ``2*s24`` for ``x[..., : W // 2 * 2]`` traced at an even W, writes no crop
    and names the dim ``W``; review78), and the file, which takes every size, is its program only at those."""
    text = next((p.value for p in [*model.metadata_props, *model.graph.metadata_props] if p.key == RANGE_KEY), "")
    keys = [k.strip() for k, _, _ in _RANGE.findall(text) if not re.fullmatch(r"u\d+", k.strip())]
    dims = _input_dims(model)
    forms = {_form(d) for d in dims}
    return [(k, dims[i] if i < len(dims) else "?") for i, k in enumerate(keys)
            if not _TORCH_SYMBOL.fullmatch(k) and _form(k) not in forms]


def _renamed(key: str, names) -> str:
    return "".join(names.get(t, t) if _TORCH_SYMBOL.fullmatch(t) else t for t in _TOKEN.findall(key))


def ranges_as_named(model: onnx.ModelProto) -> list[tuple[str, str, str]]:
    """:func:`narrowed_ranges` with each key read in the inputs' dim names (:func:`key_names`; ``H in [17, 64]``
    for torch's ``s53``), what a message names."""
    names = key_names(model)
    return [(_renamed(key.strip(), names), lo, hi) for key, lo, hi in narrowed_ranges(model)]


def unchecked_ranges(model: onnx.ModelProto, env, free=frozenset()) -> list[tuple[str, str, str]]:
    """The narrowed ranges a binding (``env``) cannot be checked against: the key, read in the inputs' dim names,
    names a symbol tied to no input's dim (:func:`key_names`) or one that is neither bound nor ``free`` (the
    symbols of inputs left unbound, which stay symbolic), or is an expression :func:`evaluate` does not read."""
    return [(read, lo, hi) for read, lo, hi in ranges_as_named(model)
            if evaluate(read, env) is None and not {t for t in _TOKEN.findall(read) if t.isidentifier()} <= set(free)]

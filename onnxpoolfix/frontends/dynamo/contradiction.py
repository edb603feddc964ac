"""The refusal of a size the graph contradicts: a dynamo region that is not adaptive pooling at the bound (or given
traced) size, though it is at another (:func:`contradiction_error`, exit 4), and what its hint may point at: only
what would do. A size the region was proven at, only where it lies inside the range torch.export proved the file's
program for (:mod:`.ranges`; review65's 12x13 binding of a file narrowed to H >= 17 was pointed at 16x8, which is
refused in turn), else that range; the inputs the given sizes leave unbound where the region reads one of them
(review65 F4: ``x`` given alone, ``y``'s region was refused as contradicting a size nobody gave).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from ...check.feeds import symbolic_inputs
from ...errors import ShapeError
from ...words import INPUT_SHAPES, TRACED_SHAPES, TRACED_SHAPES_FORM, knob_of
from ..base import reach
from .dataflow import Candidate, DataflowGraph
from .proof import Proof
from .ranges import narrowed_ranges, outside_ranges, ranges_as_named
from .search import declared_dims, evaluate, symbol_binding

__all__ = ["contradiction_error", "contradiction_hint", "unbound_inputs"]


def contradiction_error(model: onnx.ModelProto, g: DataflowGraph, against: Sequence[tuple[Candidate, Proof]],
                        given: Mapping[str, Sequence[int]] | None, *, traced: bool, alone: bool) -> ShapeError:
    """The refusal of ``given`` (``traced``: the given traced size, else ``--input-shape``'s) where the regions
    ``against`` are right only elsewhere; ``alone``: the first of them is the graph's only pool (a size found for
    it is the graph's)."""
    c, p = against[0]
    flag = TRACED_SHAPES if traced else INPUT_SHAPES
    what = f"the {'given traced size' if traced else f'size {INPUT_SHAPES} gives'}"
    regions = ", ".join(repr(r.result) for r, _ in against)
    unbound = unbound_inputs(model, g, c, given)
    if unbound:  # nobody gave it a size to contradict: the binding is partial
        names = ", ".join(unbound)
        return ShapeError(
            f"{what} leaves {names} unbound, which the dynamo region '{c.result}' pools (its window arithmetic reads "
            f"{'their' if len(unbound) > 1 else 'its'} size): the region cannot be proven at a size given in part",
            f"give the size{'s' if len(unbound) > 1 else ''} of {names} with {flag} too (every input whose size "
            f"a pooled region reads), or give no {flag}" + ("" if traced else " for a symbolic OUT exact at every "
                                                             "size"),
            regions=[r.result for r, _ in against], unbound=unbound, argument=knob_of(flag))
    pooled, right_at = _inside(model, p, given)
    said = f"'{c.result}' equals it at {'x'.join(map(str, pooled or p.contradicts))}"
    pointed = (("sizes such as " + " ".join(f"{k}:{','.join(map(str, v))}" for k, v in right_at.items()))
               if right_at else f"a pooled size like {'x'.join(map(str, pooled))} for '{c.pooled}'" if pooled else None)
    hint = contradiction_hint(pointed, None if alone else c.result, bound=not traced)
    if pooled is None:  # every size it was proven at lies outside the proved range: none to give
        said += ", a size outside the range torch.export proved the file's program for"
        ranges = ", ".join(f"{s} in [{lo}, {hi}]" for s, lo, hi in ranges_as_named(model))
        hint = (f"no size the region was found right at lies inside the range torch.export proved this file's "
                f"program for ({ranges}): keep inside it (the export call's example input is); " + hint)
    return ShapeError(
        f"{what} contradicts the graph: {len(against)} dynamo region(s) ({regions}) differ from adaptive pooling "
        f"there, though {said}", hint,
        regions=[r.result for r, _ in against], pooled=list(pooled) if pooled else None, right_at=right_at)


def unbound_inputs(model: onnx.ModelProto, g: DataflowGraph, c: Candidate,
                   given: Mapping[str, Sequence[int]] | None) -> list[str]:
    """The graph inputs of symbolic size that ``given`` names none of and that the region ``c`` reads (its pooled
    tensor's and its window arithmetic's ancestry): where a binding gives some inputs, these the region needs too.
    Empty where nothing is given."""
    if not given:
        return []
    free = set(symbolic_inputs(model)) - set(given)
    seen = reach([c.pooled, *(x for i in c.region for x in g.nodes[i].input if x)],
                 lambda t: (x for x in g.nodes[g.producer[t]].input if x) if t in g.producer else ())
    return sorted(free & seen)


def _inside(model: onnx.ModelProto, p: Proof, given) -> tuple[tuple[int, ...] | None, dict | None]:
    """A pooled size the region was proven at other than the bound one, and the inputs' shapes there (None where
    some symbol is unknown), the first lying inside the file's proved ranges; (None, None) where every one lies
    outside. A size whose inputs' shapes are unknown is named only where the file narrows no range."""
    fixed = symbol_binding(declared_dims(model), given or {}) or {}
    narrowed = bool(narrowed_ranges(model))
    for xs in dict.fromkeys([p.contradicts, *p.proofs]):
        if xs is None or xs == p.bound_at:
            continue
        env = p.proof_envs.get(xs)
        full = {**fixed, **env} if env else None
        if full is not None and outside_ranges(model, full):
            continue
        right_at = input_shapes_at(model, full) if full else None
        if right_at is None and narrowed:
            continue  # cannot tell whether it lies inside
        return xs, right_at
    return None, None


def input_shapes_at(model: onnx.ModelProto, env) -> dict[str, list[int]] | None:
    """The symbolic graph inputs' shapes at a binding of their symbols (the hint's ``x:1,3,12,14``); None where
    some symbol is unbound."""
    inputs = {i.name for i in model.graph.input}
    shapes = {name: [evaluate(d, env) for d in dims] for name, dims in declared_dims(model).items()
              if name in inputs and any(isinstance(d, str) for d in dims)}
    return shapes if shapes and not any(None in s for s in shapes.values()) else None


def contradiction_hint(pointed: str | None, region: str | None = None, *, bound: bool = False) -> str:
    """What to do when the graph contradicts a bound or traced size (``pointed``: a size it is right at; with
    ``region``, a size only that region was found right at: the graph's other pools were not tried there).
    ``bound``: the size came from ``--input-shape`` alone, which binds OUT there (review66: the hint named
    ``--traced-shape``, which given beside another ``--input-shape`` is refused)."""
    if pointed and region:
        pointed = (f"region '{region}' is right at {pointed} (its traced branches; the graph's other pools may take "
                   "other branches there: not a size to give as it is), not at the given one; ")
    elif pointed:
        pointed = f"the graph is right at {pointed} (the traced size's branches), not at the given one; "
    if bound:
        return ((pointed or "") + f"bind a size the file is right at with {INPUT_SHAPES}, or give no {INPUT_SHAPES} "
                "for a symbolic OUT exact at every size (a converter that needs static windows binds it then: "
                "docs/targets.md, \"A dynamo file for pnnx and onnx2tf\")")
    return ((pointed or "")
            + f"give the size the model was exported at (the export call's example input) with {TRACED_SHAPES_FORM}, "
            "or export through onnxpoolfix.export")

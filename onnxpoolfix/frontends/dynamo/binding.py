"""``--input-shape`` on a dynamo file: OUT bound at that size, as the ATen front end binds a leftover's
(:func:`~onnxpoolfix.frontends.aten.bind_in_out`; docs/dynamo-files.md, "``--input-shape`` binds OUT", says what
is refused and why). The regions are proven at the bound size (it is the traced size to them). Where some region
pools a symbolic axis, its spec gets the pooled tensor's sizes there (the file's declared dim expressions evaluated
at the binding, else the shape the proof ran it at where the binding sizes every symbolic input as the proof did)
and OUT's inputs are bound: the planner then picks a static lowering (no window arithmetic at run time, which
converters such as pnnx and onnx2tf cannot take), exact at the one size OUT accepts.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import onnx

from ...check.feeds import symbolic_inputs
from ...errors import ArgumentError, ShapeError
from ...graph.shapes import output_shape
from ...spec import PoolSpec
from ...words import INPUT_SHAPES, TRACED_SHAPES
from ..aten import bind_in_out, kept_note
from ..base import FrontEndResult
from .ranges import RANGE_KEY, outside_ranges, refuse_unshown_forms, unchecked_ranges
from .search import MAX_SYMBOL, declared_dims, dim_image, evaluate, first_undeclared, symbol_binding, symbols

__all__ = ["bind_dynamo_out", "refuse_undeclared_sizes"]


def bind_dynamo_out(model: onnx.ModelProto, result: FrontEndResult, input_shapes: Mapping[str, Sequence[int]] | None,
                    traced_shapes: Mapping[str, Sequence[int]] | None) -> None:
    """Bind ``input_shapes`` in ``model`` (in place) where some spec of ``result`` pools a symbolic axis that the
    binding sizes, its specs made static there and a note added; nothing where no spec needs it."""
    if result.specs:  # review78: a dim torch held as 2*s24 that the file writes W (read before any binding)
        refuse_unshown_forms(model)
    if not input_shapes or all(s.static for s in result.specs):
        return
    env = symbol_binding(declared_dims(model), input_shapes) or {}
    # the shape a region was proven at is the binding's only where the proof ran at it on every symbolic input
    # (review66: a --traced-shape of x with --input-shape y:.. proved x's pool at the traced size, which OUT, x
    # left symbolic, would then hold at every size of x)
    proof = traced_shapes or input_shapes  # the binding the regions were proven at
    alike = all(n in input_shapes and n in proof and list(input_shapes[n]) == list(proof[n])
                for n in symbolic_inputs(model))
    proven = {r.result: r.proven_at for r in result.regions} if alike else {}
    specs = [_at(s, env, proven.get(s.node.output)) for s in result.specs]
    if not any(s.static and not old.static for s, old in zip(specs, result.specs)):
        return  # no pooled size known at the binding: OUT stays symbolic, its lowerings exact at every size
    other = {name: list(dims) for name, dims in (traced_shapes or {}).items()
             if name in input_shapes and list(dims) != list(input_shapes[name])}
    if other:
        bound = " ".join(f"{k}:{','.join(map(str, input_shapes[k]))}" for k in other)
        traced = " ".join(f"{k}:{','.join(map(str, v))}" for k, v in other.items())
        raise ArgumentError(
            f"{INPUT_SHAPES} {bound} would bind this dynamo file's OUT at a size other than its {TRACED_SHAPES} "
            f"{traced}: the file is known right only at its traced size, where the bound OUT does not run, so "
            "nothing would check it",
            f"give {INPUT_SHAPES} alone (its regions are proven at that size and OUT compared with the file there), "
            f"the same size to both, or no {INPUT_SHAPES} for a symbolic OUT exact at every size",
            argument="input_shapes", value={k: list(v) for k, v in input_shapes.items()})
    if outside := outside_ranges(model, env):  # OUT would run only where the file is not torch's program (review65)
        where = ", ".join(f"{k} = {v} (proved for [{lo}, {hi}])" for k, v, lo, hi in outside)
        raise ShapeError(
            f"{INPUT_SHAPES} binds this dynamo file's OUT where torch.export did not prove its program: {where} (the "
            "file's range_constraints: the export's Dim bounds, narrowed by any Python branch on a size): torch's "
            "model may run code the file does not hold there, and OUT would accept that size alone",
            "give a size inside the range (the export call's example input is), or no "
            f"{INPUT_SHAPES} for a symbolic OUT", outside=[list(o) for o in outside])
    free = {s for n, dims in declared_dims(model).items() if n in symbolic_inputs(model) and n not in input_shapes
            for d in dims if isinstance(d, str) for s in symbols(d) or ()}
    if unchecked := unchecked_ranges(model, env, free):  # review70: a named Dim's range read as torch's symbol
        where = ", ".join(f"{k} in [{lo}, {hi}]" for k, lo, hi in unchecked)
        raise ShapeError(
            f"{INPUT_SHAPES} binds this dynamo file's OUT, but the file's range_constraints narrow sizes that cannot "
            f"be read at the binding ({where}: a symbol no input dim names, or an expression not evaluated): torch's "
            "model may run code the file does not hold there, and OUT would accept that size alone",
            f"give no {INPUT_SHAPES} for a symbolic OUT", ranges=[list(u) for u in unchecked])
    result.specs[:] = specs
    bind_in_out(model, input_shapes)
    result.notes.append(kept_note())


def _at(spec: PoolSpec, env: Mapping[str, int], proven: Sequence[int] | None) -> PoolSpec:
    """``spec`` with its input's dims at the binding ``env`` (a dim the expressions do not give: the shape the
    region was proven at, where that is the binding's), or ``spec`` itself where a pooled size stays unknown."""
    if spec.static:
        return spec
    dims = [evaluate(d, env) if isinstance(d, str) else d for d in spec.input_shape]
    if proven is not None and len(proven) == len(dims) and all(isinstance(p, int) for p in proven):
        dims = [p if d is None else d for d, p in zip(dims, proven)]
    dims = [d if d is not None else old for d, old in zip(dims, spec.input_shape)]
    if not all(isinstance(d, int) for d in dims[len(dims) - spec.k:]):
        return spec
    shape = tuple(dims)
    return replace(spec, input_shape=shape, output_shape=output_shape(spec.node, shape))


def refuse_undeclared_sizes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    """An ArgumentError (exit 2) where ``input_shapes`` gives a dynamo file's input dim a size its declared
    expression cannot take (``8*h`` bound to 33: torch.export traced the program for multiples of 8 alone), or one
    symbol two sizes (review65: refused as a contradiction of the graph, exit 4, naming no multiple)."""
    if not input_shapes or not any(p.key == RANGE_KEY for p in [*model.metadata_props, *model.graph.metadata_props]):
        return
    if (found := first_undeclared(declared_dims(model), input_shapes)) is None:
        return
    name, axis, d, v, symbol, other = found
    takes = sorted(dim_image(d, symbol, MAX_SYMBOL))
    near = [n for n in takes if n < v][-1:] + [n for n in takes if n > v][:1]
    raise ArgumentError(
        f"{INPUT_SHAPES} {name}: dim {axis} is {v}, but the file declares it {d}, "
        + (f"which no {symbol} in 1..{MAX_SYMBOL} makes {v} (torch.export traced the program for those "
           "sizes alone)" if other is None else
           f"and {symbol} is {other[0]} from {other[1]} dim {other[2]}"),
        f"give a size {d} takes" + (f" (near {v}: {' or '.join(map(str, near))})" if near and other is None
                                    else f" with {symbol} = {other[0]}" if other is not None else ""),
        argument="input_shapes", input=name, axis=axis, value=v, declared=d)

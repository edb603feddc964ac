"""Sizes where torch.export's guards fail: the branches the trace took hold only where its guards do
(``if x.shape[3] == 41: ...`` traced at 67 leaves ``L['x'].size()[3] != 41``), which no range says, and the
exported file (either exporter's: both trace one branch) holds the one branch at every size. The comparison
with torch runs at those sizes too (:func:`guard_points`), so a file that differs there is refused.

A guard is torch's own Python expression over the inputs' sizes (``ExportedProgram._guards_code``); it is
evaluated with each symbolic dim at each length up to :data:`SCAN` and at each integer the guard names
(+-2, up to :data:`NAMED_MAX`), the other dims at the example's values. Counts, never times. Where torch
keeps no guards (another version) or a guard reads more than sizes, nothing is added.

Sizes torch computes in double from a float (``F.interpolate(x, scale_factor=0.7)``: ``trunc(0.7 * H)``)
are another such place: the file computes them in float32 (onnxruntime's Resize: 63 rows at H = 90, torch
62), and only some lengths round otherwise. :func:`float_points` finds the lengths where the double product
lies within float32's rounding of an integer, so the comparison runs there too."""
from __future__ import annotations

import inspect
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .declared import declared_symbols, export_guards, finite_int, user_placeholders

logger = logging.getLogger("onnxpoolfix")

#: each symbolic dim is tried at every length up to this, and at the integers a guard names (+-2)
SCAN = 512
#: failing lengths compared per guard and symbol, and in all per symbol
PER_GUARD, PER_SYMBOL = 2, 16
#: an integer a guard names is tried (+-2) up to this length: torch 2.9 guards ``size()[2] <= 2147483647``
NAMED_MAX = 1 << 14
#: a double product this close to an integer (relative) may round to it, or past it, in float32
_NEAR = 2.0 ** -20
_TO_INT = {"TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt", "floor", "ceiling"}


@dataclass(frozen=True)
class SizePoint:
    """Why the comparison runs at a size: ``kind`` "guard" (``text``, torch.export's guard, is false there) or
    "float" (``text``, a size torch computes in double from a float, may round otherwise in float32)."""

    kind: str
    text: str


class _Sized:
    """A tensor as a guard reads it: ``size()`` (and ``size(k)``, ``shape``, ``dim()``) only."""

    def __init__(self, shape: list[int]):
        self.shape = shape

    def size(self, k: int | None = None):
        return self.shape if k is None else self.shape[k]

    def dim(self) -> int:
        return len(self.shape)


def guard_points(torch, module, args: tuple, kwargs: dict, program, model, export_kwargs: Mapping, dynamo: bool
                 ) -> dict[str, list[tuple[int, str]]]:
    """``{symbol: [(length, guard), ...]}``: lengths inside each dim's declared range where a guard of
    ``program`` (the ONNXProgram, or torch.export's probe for the TorchScript file ``model``) that holds at the
    example is false; the symbol as the comparison names it (torch's for a dynamo export, the file's dim name
    for a TorchScript one)."""
    from torch.utils._pytree import tree_flatten, tree_map

    ep = getattr(program, "exported_program", None)
    codes = list(getattr(ep, "_guards_code", None) or ())
    if not codes and dynamo and export_kwargs.get("dynamic_shapes") is not None:
        codes = export_guards(torch, module, args, kwargs, export_kwargs["dynamic_shapes"])
    if ep is None:
        return {}
    declared = declared_symbols(torch, module, args, kwargs, program, model, export_kwargs)
    dims = {vi.name: vi.type.tensor_type.shape.dim for vi in model.graph.input}
    names = {s: dims[n][a].dim_param for s, (n, a, _) in declared.items()
             if a < len(dims.get(n, ())) and dims[n][a].dim_param}
    wanted = {s: w for s, (_, _, w) in declared.items()}
    try:
        shapes = [list(p.meta["val"].shape) for p in user_placeholders(torch, ep)]
        leaves = [t for t in tree_flatten((tuple(args), dict(kwargs)))[0] if isinstance(t, torch.Tensor)]
        if len(leaves) != len(shapes):
            return {}
        index = {id(t): i for i, t in enumerate(leaves)}
        bound = inspect.signature(getattr(module, "forward", module)).bind(*args, **kwargs)
        slots = [_Sized([]) for _ in shapes]
        scope = {"L": {k: tree_map(lambda v: slots[index[id(v)]] if isinstance(v, torch.Tensor) else v, v)
                       for k, v in bound.arguments.items()}}
        symbols = {str(s): s for shape in shapes for d in shape if isinstance(d, torch.SymInt)
                   for s in d.node.expr.free_symbols}
        example = {s: _hint(torch, shapes, s) for s in symbols}
        if dynamo:  # the comparison sizes torch's symbols, those only inside a dim's expression (2*s0) too
            names = dict(zip(symbols, symbols))
        compiled = [(code, compile(code, "<guard>", "eval")) for code in codes]
    except Exception:  # noqa: BLE001 - inputs torch's guards cannot be read against: nothing added
        logger.debug("cannot read torch.export's guards", exc_info=True)
        return {}

    def holds(guard, values: dict[str, int]) -> bool | None:
        for slot, shape in zip(slots, shapes):
            slot.shape = [int(d) if not isinstance(d, torch.SymInt) else _value(d, symbols, values) for d in shape]
        try:
            return bool(eval(guard, {"__builtins__": {}}, scope))  # noqa: S307 - torch's own size expressions
        except Exception:  # noqa: BLE001 - a guard on more than sizes (strides, values): not read
            return None

    live = [(code, g) for code, g in compiled if holds(g, example)]
    floats = _float_sizes(torch, ep)
    out: dict[str, list[tuple[int, SizePoint]]] = {}
    for name, sym in sorted(symbols.items()):
        if name not in names:
            continue
        lo, hi = wanted.get(name, (1, None))  # and inside the range the export holds (a narrowed one apart)
        held = next((vr for k, vr in ep.range_constraints.items() if str(k) == name), None)
        if held is not None:
            lo, top = max(lo, finite_int(held.lower) or 0), finite_int(held.upper)
            hi = top if hi is None else hi if top is None else min(hi, top)
        found: list[tuple[int, SizePoint]] = []

        def inside(extra=()) -> list[int]:
            return sorted(n for n in set(range(1, SCAN + 1)) | set(extra)  # noqa: B023 - used at once
                          if n >= max(lo, 1) and (hi is None or n <= hi) and n != example[name])

        for code, g in live:
            near = {int(c) + k for c in re.findall(r"(?<![\w.\]])\d+(?![\w.\[])", code) for k in range(-2, 3)
                    if int(c) <= NAMED_MAX}  # not torch 2.9's size()[2] <= 2147483647: no tensor to run at
            fails = [n for n in inside(near) if holds(g, {**example, name: n}) is False][:PER_GUARD]
            found += [(n, SizePoint("guard", code)) for n in fails if n not in {m for m, _ in found}]
        for arg, text in floats:
            if sym in arg.free_symbols:
                rank = {n: _rounds_apart(arg, {**example, name: n}, symbols) for n in inside()}
                fails = [n for n in rank if rank[n] == 2][:PER_GUARD] + [n for n in rank if rank[n] == 1][:1]
                found += [(n, SizePoint("float", text)) for n in fails if n not in {m for m, _ in found}]
        if found:
            out[names[name]] = sorted(found, key=lambda p: p[0])[:PER_SYMBOL]
    return out


def _float_sizes(torch, ep) -> list[tuple[Any, str]]:
    """The float products behind the sizes of ``ep``'s tensors (the argument of each ``TruncToInt(...)``
    and the like that holds a float constant), each with the size expression it is read from."""
    found: dict[Any, str] = {}
    for node in ep.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else [vals]:
            dims = list(v.shape) if isinstance(v, torch.Tensor) else [v] if isinstance(v, torch.SymInt) else []
            for expr in [d.node.expr for d in dims if isinstance(d, torch.SymInt)]:
                for call in expr.find(lambda a: type(a).__name__ in _TO_INT):
                    if any(a.is_Float for a in call.args[0].atoms()):
                        found.setdefault(call.args[0], str(expr))
    return list(found.items())


def _rounds_apart(arg, values: Mapping[str, int], symbols: Mapping[str, Any]) -> int:
    """2 where ``arg`` at ``values`` computed in float32 (its floats and the product rounded to float32, as
    onnxruntime's Resize does) floors to another integer than in double; 1 where the double lies within
    float32's rounding of an integer (another float32 computation may); 0 elsewhere."""
    at = {symbols[k]: v for k, v in values.items() if k in symbols}
    try:
        x = float(arg.xreplace(at))
        narrow = {a: type(a)(float(np.float32(float(a)))) for a in arg.atoms() if a.is_Float}
        x32 = float(np.float32(float(arg.xreplace({**at, **narrow}))))
    except (TypeError, ValueError):
        return 0
    if np.floor(x32) != np.floor(x):
        return 2
    return int(abs(x - round(x)) <= abs(x) * _NEAR and x != round(x))


def _value(d, symbols: Mapping[str, Any], values: Mapping[str, int]) -> int:
    expr = d.node.expr
    if expr.is_Symbol:
        return values[str(expr)]
    return int(expr.subs({symbols[k]: v for k, v in values.items() if k in symbols}))


def _hint(torch, shapes, name: str) -> int:
    """The example's value of torch's symbol ``name``: the hint of a dim that is that symbol alone, else (a
    symbol only inside expressions, ``2*s0``) the value torch's shape environment holds for it."""
    dims = [d for shape in shapes for d in shape if isinstance(d, torch.SymInt)]
    for d in dims:
        if str(d.node.expr) == name:
            return int(d.node.hint)
    for d in dims:
        env = d.node.shape_env
        held = getattr(env, "backed_var_to_val", None) or getattr(env, "var_to_val", {})
        for sym, value in held.items():
            if str(sym) == name:
                return int(value)
    raise LookupError(name)

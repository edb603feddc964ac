"""The sizes outside what torch.export holds for a dim the caller declared dynamic: past a narrowed range's ends,
off a form (``2*s``), or with two unified dims apart. Whether torch runs the module there decides whether the
export is refused (:func:`runs_outside`), or the file is compared with torch there instead
(:func:`compare_forms_instead` for a dynamo file's forms, :func:`compared_instead` for a TorchScript file, whose
dims are the tracer's). Counts of sizes, never times."""
from __future__ import annotations

import logging
from itertools import islice
from typing import Sequence

from .declared import DeclaredDims, apart_form
from .sizes import TorchRunner
from .specialised import Specialised

logger = logging.getLogger(__name__)


#: how far past a moved end torch is tried: the first sizes one by one, then doubling
_OUTSIDE_STEPS = 4
_OUTSIDE_DOUBLINGS = 5


def outside_sizes(narrowed: Specialised) -> list[int]:
    """The sizes the caller's range holds and torch's narrowed one leaves out that :func:`runs_outside` tries
    for dims torch unified (a count, never a time): the first few past each moved end, then doubling away from
    it (with the odd size after each), and the declared end itself."""
    (lo, hi), (lo2, hi2) = narrowed.ranges
    out: list[int] = []
    if hi2 is not None and (hi is None or hi2 < hi):
        far = [hi2 * 2 ** k + j for k in range(1, _OUTSIDE_DOUBLINGS + 1) for j in (0, 1)]
        out += [v for v in [hi2 + j for j in range(1, _OUTSIDE_STEPS + 1)] + far + [hi or 0]
                if v > hi2 and (hi is None or v <= hi)]
    floor = max(lo, 2)
    if lo2 > floor:
        out += [v for v in [lo2 - j for j in range(1, _OUTSIDE_STEPS + 1)] + [(floor + lo2) // 2, floor]
                if floor <= v < lo2]
    return list(dict.fromkeys(out))


#: a gap (the sizes the caller's range holds and torch's narrowed one leaves out) of at most this many sizes is
#: tried size by size: torch failing at each shows the file loses nothing there; failing at a sample shows nothing
_WHOLE_GAP = 64


def whole_gap(narrowed: Specialised) -> list[int] | None:
    """Every size (from 2: torch's own floor) the caller's range holds and torch's narrowed one leaves out, where
    there are at most ``_WHOLE_GAP``; None where more (an unbounded range)."""
    (lo, hi), (lo2, hi2) = narrowed.ranges
    below = list(range(max(lo, 2), lo2))
    if hi2 is None or (hi is not None and hi <= hi2):
        above = []
    elif hi is None or hi - hi2 > _WHOLE_GAP:
        return None
    else:
        above = list(range(hi2 + 1, hi + 1))
    return below + above if len(below) + len(above) <= _WHOLE_GAP else None


def runs_outside(torch, module, args: tuple, kwargs: dict, model_inputs: Sequence, declared: DeclaredDims | None,
                 narrowed: Specialised, seed: int = 0) -> bool:
    """Whether the file, made for torch's narrowed range, may not be the module at a size the caller's range
    holds: True where torch runs at one of them, and where that cannot be ruled out (a gap of more than
    ``_WHOLE_GAP`` sizes: a branch that runs only at H % 7 == 0 fails at every sample); False where torch fails
    at each size of the whole gap (a range narrowed to what the module can take). Dims torch unified
    (``narrowed.same_as``) are run apart instead, at :func:`outside_sizes` around the example or the whole
    range: True where torch runs there."""
    gap = whole_gap(narrowed)
    # a form (2*s) leaves out sizes without end, a run of which no sample rules out (review16: W % 7 == 0 as well),
    # and may tie the dim to another input's (s + 1): refused whatever torch does at the sizes tried
    if declared is None or not narrowed.symbol or narrowed.form or (gap is None and not narrowed.same_as):
        return True
    try:
        if narrowed.same_as:
            key = ([vi.name for vi in model_inputs].index(narrowed.input), narrowed.axis)
            declared = declared.apart([key], narrowed.symbol)
        runner = TorchRunner(torch, module, args, kwargs, model_inputs, seed, declared)
        tries = outside_sizes(narrowed) if gap is None else gap
        return any(runner.run(runner.inputs({narrowed.symbol: v})) is not None for v in tries)
    except Exception:  # noqa: BLE001 - inputs torch's helpers do not map: say it, as if it ran
        logger.debug("cannot try the module outside the narrowed range", exc_info=True)
        return True


#: off-form sizes where torch runs that the comparison takes per form (a count)
PER_FORM = 4


def compare_forms_instead(torch, module, args: tuple, kwargs: dict, model_inputs: Sequence,
                          declared: DeclaredDims | None, found: Sequence[Specialised], seed: int = 0
                          ) -> tuple[list[Specialised], DeclaredDims | None, dict[str, list[int]]]:
    """A dynamo file whose dim torch holds as a form (``2*s24``) takes every size: where torch runs the module
    off the form (tried at :func:`outside_sizes`, a count), the comparison with torch runs the file there too,
    the dim given a symbol of its own (torch 2.9's squeezenet: ``8*s`` from a ceil_mode pool's guard, exact at
    every size); a form where torch runs at none of those sizes, or that ties the dim to another's (``s + 1``),
    stays found (refused). Returns the rest, the declared dims, and symbol -> sizes for the comparison."""
    rest, outside = [], {}
    for sp in found:
        tries = off_form_sizes(sp) if sp.form and declared else []
        try:
            apart = apart_form(declared, sp.form, sp.symbol, sp.ranges[0]) if tries else declared
            runner = TorchRunner(torch, module, args, kwargs, model_inputs, seed, apart)
            # the first PER_FORM where torch runs
            runs = list(islice((v for v in tries if runner.run(runner.inputs({sp.symbol: v})) is not None), PER_FORM))
        except Exception:  # noqa: BLE001 - inputs torch's helpers do not map: refused, as found
            logger.debug("cannot try the module off the form", exc_info=True)
            runs = []
        if not runs:
            rest.append(sp)
            continue
        declared, outside[sp.symbol] = apart, runs
    return rest, declared, outside


def off_form_sizes(sp: Specialised) -> list[int]:
    """:func:`outside_sizes` of a form (``2*s24``) that the form does not take."""
    return [v for v in outside_sizes(sp) if not _of_form(sp.form, v)]


def _of_form(form: str, v: int) -> bool:
    """``v`` is ``form`` (torch's expression, ``2*s24``) at some positive integer value of its one symbol."""
    import sympy

    expr = sympy.sympify(form)
    if len(expr.free_symbols) != 1:
        return False
    (s,) = expr.free_symbols
    return any(r.is_integer and r >= 1 for r in sympy.solve(sympy.Eq(expr, v), s))


def compared_instead(narrowed: Sequence[Specialised], model_inputs, verify: bool = True
                     ) -> tuple[list[Specialised], dict[str, list[int]]]:
    """For a TorchScript file, which keeps to no torch.export range (its dims are the tracer's, whatever guards
    torch.export adds on its own probe): the narrowed dims whose whole gap is known are compared with torch
    there instead of refused (the file's dim name -> the gap's sizes), the rest returned as they are, each
    narrowed one saying why it was not compared (``Specialised.unchecked``: not the file's range, but not
    checked either)."""
    dims = {vi.name: vi.type.tensor_type.shape.dim for vi in model_inputs}
    rest, outside = [], {}
    for sp in narrowed:
        gap = whole_gap(sp) if sp.value is None and not sp.same_as else None
        name = dims[sp.input][sp.axis].dim_param if sp.input in dims and sp.axis < len(dims[sp.input]) else ""
        if sp.form and name and verify:  # the probe's 2*s: the tracer's file is compared at the other sizes
            gap = off_form_sizes(sp)
        if gap and name and verify:
            outside[name] = sorted(set(outside.get(name, [])) | set(gap))
            continue
        if sp.value is None and not sp.same_as:
            sp.unchecked = ("verify=False compares nothing with torch" if gap and name else
                            "the sizes it leaves out are more than onnxpoolfix compares one by one "
                            f"({_WHOLE_GAP})" if gap is None else "its input cannot be fed at those sizes alone")
        rest.append(sp)
    return rest, outside

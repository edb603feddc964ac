"""What the caller declared about the input dims, and what torch.export made of it.

* :class:`DeclaredDims` (from the ``ExportedProgram`` behind a dynamo export): every symbolic input dim as
  torch's expression in its free symbols (``s0``, ``2*s0``, ``32*s1``, ``s0 + 3``: ``Dim`` expressions,
  a symbol shared between inputs), the symbols' example values, and every range constraint. The sizes the
  comparison with torch runs at (:mod:`.sizes`) are chosen over these symbols, so they keep to ``W = 2H``
  or to multiples of 32 instead of treating each dim as free with step 1.
* :func:`specialised_dims`: the dims the caller declared dynamic in ``dynamic_shapes`` (a ``Dim``,
  ``Dim.DYNAMIC``, a name) that came out static, narrowed, or one with a dim declared apart: torch.onnx.export
  retries a refused spec with torch's suggested fix (the dim pinned to the example's size) without a word.

torch is imported by the caller; nothing here imports it at import time.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping

from ..check.feeds import graph_inputs
from .specialised import Specialised
from .symbolic_sizes import symbolic_pool_sizes

logger = logging.getLogger(__name__)


@dataclass
class DeclaredDims:
    """The symbolic input dims of an export, over torch's free symbols.

    ``exprs``: (flat tensor input index, axis) -> sympy expression; ``example``: free symbol -> its value
    at the example inputs; ``ranges``: free symbol -> (min, max or None); ``constraints``: every
    (expression, min, max or None) torch.export holds (derived dims' own ranges among them).
    """

    exprs: dict[tuple[int, int], Any] = field(default_factory=dict)
    example: dict[str, int] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    constraints: list[tuple[Any, int, int | None]] = field(default_factory=list)

    @property
    def related(self) -> bool:
        """Some dim is an expression (``2*h``, ``32*h``, ``h + 1``), not a free symbol of its own."""
        return any(not getattr(e, "is_Symbol", False) for e in self.exprs.values())

    def size(self, key: tuple[int, int], values: Mapping[str, int]) -> int:
        expr = self.exprs[key]
        return int(expr.xreplace({s: values.get(str(s), self.example[str(s)]) for s in expr.free_symbols}))

    def allows(self, values: Mapping[str, int]) -> bool:
        """Every declared range holds at these symbol values (a derived dim's range included)."""
        if not all(within(v, self.ranges.get(name, (1, None))) for name, v in values.items()):
            return False
        for expr, lo, hi in self.constraints:
            try:
                v = int(expr.xreplace({s: values.get(str(s), self.example.get(str(s), 1))
                                       for s in expr.free_symbols}))
            except (TypeError, ValueError):
                continue
            if v < lo or (hi is not None and v > hi):
                return False
        return True

    def apart(self, keys: list[tuple[int, int]], name: str, lo_hi: tuple[int, int | None] | None = None
              ) -> "DeclaredDims":
        """The same dims with those at ``keys`` given a symbol of their own, ``name`` (its example value the
        first's, its range ``lo_hi``, else the first's): two dims torch unified, run at different sizes."""
        import sympy

        lo_hi = self.ranges.get(str(self.exprs[keys[0]]), (1, None)) if lo_hi is None else lo_hi
        return dataclasses.replace(self, exprs={**self.exprs, **dict.fromkeys(keys, sympy.Symbol(name))},
                                   example={**self.example, name: self.size(keys[0], {}) if keys else 1},
                                   ranges={**self.ranges, name: lo_hi})


def within(v: int, lo_hi: tuple[int, int | None]) -> bool:
    """``v`` inside the range (min, max; max None: unbounded), sizes starting at 1 whatever the min."""
    lo, hi = lo_hi
    return max(lo, 1) <= v and (hi is None or v <= hi)


def apart_form(declared: DeclaredDims, form: str, name: str, lo_hi: tuple[int, int | None]) -> DeclaredDims:
    """``declared`` with every dim torch holds as ``form`` (``2*s24``: one Dim shared by two inputs is two such
    dims) given the symbol ``name`` of its own, over ``lo_hi`` (the caller's range): sizes off the form."""
    return declared.apart([k for k, e in declared.exprs.items() if str(e) == form], name, lo_hi)


def finite_int(bound) -> int | None:
    """A range bound as an int, None when it is infinite (torch's int_oo, sympy's oo)."""
    try:
        value = int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return value if abs(value) < 2**62 else None


def user_placeholders(torch, ep) -> list:
    """The ExportedProgram's user-input tensor placeholders, in the flat order of the inputs."""
    user = set(ep.graph_signature.user_inputs)
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user
            and isinstance(n.meta.get("val"), torch.Tensor)]


def declared_dims(torch, program) -> DeclaredDims | None:
    """:class:`DeclaredDims` of a dynamo export (``torch.onnx.export``'s ONNXProgram, or an ExportedProgram);
    None when torch does not say (the TorchScript path, an unknown torch version)."""
    ep = getattr(program, "exported_program", program)
    if ep is None or not hasattr(ep, "range_constraints"):
        return None
    try:
        out = DeclaredDims()
        for expr, vr in ep.range_constraints.items():
            lo, hi = max(finite_int(vr.lower) or 1, 1), finite_int(vr.upper)
            if getattr(expr, "is_Symbol", False):
                out.ranges[str(expr)] = (lo, hi)
            else:
                out.constraints.append((expr, lo, hi))
        for i, node in enumerate(user_placeholders(torch, ep)):
            for axis, d in enumerate(node.meta["val"].shape):
                if isinstance(d, int) or not hasattr(d, "node"):
                    continue
                expr = d.node.expr
                out.exprs[(i, axis)] = expr
                env = getattr(d.node, "shape_env", None)
                known = getattr(env, "backed_var_to_val", None) or getattr(env, "var_to_val", None) or {}
                for s in expr.free_symbols:
                    if s in known:
                        out.example.setdefault(str(s), int(known[s]))
                    elif getattr(expr, "is_Symbol", False):
                        out.example.setdefault(str(s), int(d.node.hint))
        if any(str(s) not in out.example for e in out.exprs.values() for s in e.free_symbols):
            return None  # a symbol whose example value torch did not record: the dims stay free
        return out
    except Exception:  # noqa: BLE001 - another torch's internals: compare with each dim free, as before
        logger.debug("cannot read the declared dims from the export", exc_info=True)
        return None


def _label(torch, d) -> str | None:
    """How a dynamic_shapes entry declares a dim dynamic (None: it does not)."""
    Dim = torch.export.Dim
    if isinstance(d, str):
        return repr(d)
    if isinstance(d, Dim):  # a named Dim or a derived one (2*h); Dim.STATIC is no Dim instance
        return getattr(d, "__name__", "a Dim")
    return next((f"Dim.{hint}" for hint in ("DYNAMIC", "AUTO") if d is getattr(Dim, hint, object())), None)


def _declared_range(torch, d) -> tuple[int, int | None] | None:
    """The (min, max) a dynamic dim is declared over (max None: unbounded): a named ``Dim``'s own, every size
    for Dim.DYNAMIC, Dim.AUTO or a name; None for a derived dim (its root's range holds it)."""
    if isinstance(d, str) or not isinstance(d, torch.export.Dim):
        return (0, None) if _label(torch, d) is not None else None
    if not hasattr(d, "min") or hasattr(d, "root"):
        return None
    return max(finite_int(d.min) or 0, 0), finite_int(d.max)


def _declared_positions(torch, module, args: tuple, kwargs: dict, dynamic_shapes
                        ) -> dict[tuple[int, int], tuple[str, tuple | None]]:
    """(flat tensor input index, axis) -> (label, declared range or None) of every dim ``dynamic_shapes``
    declares dynamic."""
    from torch.export.dynamic_shapes import _combine_args, _tree_map_with_path

    combined = _combine_args(module, args, kwargs)
    if isinstance(dynamic_shapes, (tuple, list)):
        combined = type(dynamic_shapes)(combined.values())
    out: dict[tuple[int, int], str] = {}
    count = [0]

    def visit(_path, t, spec):
        if not isinstance(t, torch.Tensor):
            return None
        i = count[0]
        count[0] += 1
        axes = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (tuple, list)) else ()
        for axis, d in axes:
            label = _label(torch, d)
            if label is not None:
                out[(i, int(axis))] = (label, _declared_range(torch, d))
        return None

    _tree_map_with_path(visit, combined, dynamic_shapes, tree_name="inputs")
    return out


def _torch_export(torch, module, args: tuple, kwargs: dict, dynamic_shapes) -> tuple[Any, list[str]]:
    """torch.export of ``module`` under ``dynamic_shapes``: (the ExportedProgram, []), or (None, the lines of
    torch's refusal, spaces collapsed), which torch.onnx.export retries past with torch's suggested fix and
    swallows."""
    try:
        return torch.export.export(module, args, kwargs=kwargs or None, dynamic_shapes=dynamic_shapes,
                                   strict=False), []
    except Exception as e:  # noqa: BLE001 - the refusal is what we are after
        return None, [" ".join(line.split()) for line in str(e).splitlines()]


def export_guards(torch, module, args: tuple, kwargs: dict, dynamic_shapes) -> list[str]:
    """torch.export's guards of ``module`` under ``dynamic_shapes`` (``ExportedProgram._guards_code``, which
    torch.onnx.export's program no longer holds); where torch refuses the declared sizes, the guards it says
    some of them break (``Not all values of W ... satisfy the generated guard L['x'].size()[3] != 41``)."""
    ep, refusal = _torch_export(torch, module, args, kwargs, dynamic_shapes)
    if ep is not None:
        return list(getattr(ep, "_guards_code", None) or ())
    found = (re.search(r"satisfy the generated guard (.+?)\.?$", line) for line in refusal)
    return list(dict.fromkeys(m.group(1) for m in found if m))


def _reason(lines: list[str], label: str) -> str:
    name = label.strip("'")
    hit = [line for line in lines if re.search(rf"\b{re.escape(name)}\b", line)]
    return (hit or [""])[0].split(". ")[0][:300]  # its first sentence: what was pinned, to what


def _exported_range(ep, d) -> tuple[int, int | None] | None:
    """The range the export holds for a dim that is one symbol of its own (None otherwise)."""
    expr = getattr(getattr(d, "node", None), "expr", None)
    if not getattr(expr, "is_Symbol", False) or expr not in ep.range_constraints:
        return None
    vr = ep.range_constraints[expr]
    return finite_int(vr.lower) or 0, finite_int(vr.upper)


def _narrower(got: tuple[int, int | None], wanted: tuple[int, int | None]) -> bool:
    """The exported range leaves out sizes the declared one holds (torch's own floor of 2 for a dynamic dim,
    where 0 and 1 are specialised, is no narrowing of the caller's)."""
    (lo, hi), (wlo, whi) = got, wanted
    return lo > max(wlo, 2) or (hi is not None and (whi is None or hi < whi))


def _caller_dims(torch, module, args: tuple, kwargs: dict, program, model, spec) -> list[tuple]:
    """Each dim ``spec`` (dynamic_shapes) declares dynamic, as the export holds it: (the file's input name,
    axis, how it was declared, the declared range or None, torch's size: an int where it is static, else its
    SymInt). Empty where torch's own helpers do not map the spec to the inputs."""
    inputs = graph_inputs(model)
    ep = getattr(program, "exported_program", None)
    if spec is None or ep is None:
        return []
    try:
        declared = _declared_positions(torch, module, args, kwargs, spec)
        placeholders = user_placeholders(torch, ep)
    except Exception:  # noqa: BLE001 - a structure torch's own helpers do not map: nothing to say
        logger.debug("cannot map dynamic_shapes to the inputs", exc_info=True)
        return []
    if len(placeholders) != len(inputs):
        return []
    return [(inputs[i].name, axis, label, wanted,
             placeholders[i].meta["val"].shape[axis] if axis < placeholders[i].meta["val"].dim() else None)
            for (i, axis), (label, wanted) in sorted(declared.items()) if i < len(placeholders)]


def specialised_dims(torch, module, args: tuple, kwargs: dict, program, model, export_kwargs: Mapping
                     ) -> list[Specialised]:
    """The dims ``dynamic_shapes`` (of ``export_kwargs``) declares dynamic that the export ``program`` (the
    dynamo exporter's ONNXProgram), and so the file ``model``, has static, or over a narrower range than
    declared (a Dim.DYNAMIC, Dim.AUTO or name declares every size). A Dim.AUTO torch made static is no
    finding: the file then takes that size alone. (``dynamic_axes``, which torch turns into Dim.DYNAMIC, is
    refused by torch itself where it specialises: not silent.)"""
    spec = export_kwargs.get("dynamic_shapes")
    ep = getattr(program, "exported_program", None)
    found: list[Specialised] = []
    seen: dict[Any, tuple[str, int, str]] = {}  # torch's symbol -> the first dim declared as it
    for name, axis, label, wanted, d in _caller_dims(torch, module, args, kwargs, program, model, spec):
        if isinstance(d, int):
            if label != "Dim.AUTO":
                found.append(Specialised(name, axis, label, d))
            continue
        if wanted is not None and (got := _exported_range(ep, d)) is not None and _narrower(got, wanted):
            found.append(Specialised(name, axis, label, None, ranges=(wanted, got), symbol=str(d.node.expr)))
        expr = getattr(getattr(d, "node", None), "expr", None)
        if wanted is not None and expr is not None and not getattr(expr, "is_Symbol", False):
            hint = int(d.node.hint)  # a Dim of its own that torch holds as 2*s: the file takes odd sizes too
            found.append(Specialised(name, axis, label, None, ranges=(wanted, (hint, hint)), form=str(expr),
                                     symbol=f"{name}[{axis}]"))
        if wanted is None or not getattr(expr, "is_Symbol", False):
            continue
        first = seen.setdefault(expr, (name, axis, label))  # declared apart: other names, or two anonymous ones
        if first[:2] != (name, axis) and (first[2] != label or label in ("Dim.DYNAMIC", "Dim.AUTO")):
            found.append(Specialised(name, axis, label, None, ranges=(wanted, (int(d.node.hint),) * 2),
                                     symbol=f"{expr}@{name}[{axis}]", same_as=f"dim {first[1]} of input '{first[0]}'"))
    if found:
        # torch's own words refusing the spec: the lines that say what was specialised
        lines = [line.lstrip("- ") for line in _torch_export(torch, module, args, kwargs, spec)[1]]
        lines = [line for line in lines if "specializ" in line or "generated guard" in line]
        for s in found:
            s.reason = _reason(lines, s.declared)
    return found


def declared_symbols(torch, module, args: tuple, kwargs: dict, program, model, export_kwargs: Mapping
                     ) -> dict[str, tuple[str, int, tuple]]:
    """torch's symbol -> (the file's input, axis, declared range) of each dim declared dynamic that the
    export holds as one symbol of its own (the first dim declared as it)."""
    out: dict[str, tuple[str, int, tuple]] = {}
    for name, axis, _, wanted, d in _caller_dims(torch, module, args, kwargs, program, model,
                                                 export_kwargs.get("dynamic_shapes")):
        expr = getattr(getattr(d, "node", None), "expr", None)
        if wanted is not None and getattr(expr, "is_Symbol", False):
            out.setdefault(str(expr), (name, axis, wanted))
    return out


def symbols_declared_at_one(torch, module, args: tuple, kwargs: dict, program, model, export_kwargs: Mapping
                            ) -> list[str]:
    """torch's symbols of the dims declared down to 1 (or 0): torch traces a dynamic dim as other than 1 (a
    branch on ``H == 1`` is decided as not taken, with or without a guard saying so, and its range may start at
    2), while the file takes 1 too, so the comparison with torch runs there as well."""
    return [s for s, (_, _, wanted) in declared_symbols(torch, module, args, kwargs, program, model,
                                                          export_kwargs).items() if wanted[0] <= 1]


def dynamic_axes_spec(torch, args: tuple, kwargs: dict, model_inputs) -> Any:
    """``dynamic_shapes`` saying what ``dynamic_axes`` does (every size of each dim, each its own): Dim.DYNAMIC
    at each symbolic dim of the file's inputs ``model_inputs`` (0 and 1 at the example aside, which torch pins);
    None where the example's tensors are not the file's inputs."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, tree = tree_flatten(tuple(args))
    if kwargs or sum(isinstance(t, torch.Tensor) for t in leaves) != len(model_inputs):
        return None
    files = iter(model_inputs)
    return tree_unflatten([{a: torch.export.Dim.DYNAMIC for a, d in enumerate(next(files).type.tensor_type.shape.dim)
                            if not d.HasField("dim_value") and a < t.dim() and t.shape[a] > 1} or None
                           if isinstance(t, torch.Tensor) else None for t in leaves], tree)


def dynamic_axes_probe(torch, module, args: tuple, spec) -> Any:
    """For the TorchScript exporter, torch.export of ``module`` at :func:`dynamic_axes_spec`'s ``spec``, whose
    guards say where the branches the trace took hold (as an ONNXProgram holds it, for :func:`specialised_dims`);
    None where torch.export cannot take it."""
    try:  # pool sizes computed from symbolic ones kept symbolic, as the TorchScript file computes them
        with symbolic_pool_sizes():
            return SimpleNamespace(exported_program=torch.export.export(module, tuple(args), dynamic_shapes=spec,
                                                                        strict=False))
    except Exception:  # noqa: BLE001 - a module torch.export cannot trace this way: nothing more to check
        logger.debug("cannot export the module with dynamic_axes' dims to read its guards", exc_info=True)
        return None

"""What the caller declared about the input dims, and what torch.export made of it.

* :class:`DeclaredDims` (from the ``ExportedProgram`` behind a dynamo export): every symbolic input dim as
  torch's expression in its free symbols (``s0``, ``2*s0``, ``32*s1``, ``s0 + 3``: ``Dim`` expressions,
  a symbol shared between inputs), the symbols' example values, and every range constraint. The sizes the
  comparison with torch runs at (:mod:`.sizes`) are chosen over these symbols, so they keep to ``W = 2H``
  or to multiples of 32 instead of treating each dim as free with step 1.
* :func:`specialised_dims`: the dims the caller declared dynamic (a ``Dim``, ``Dim.DYNAMIC``, a name in
  ``dynamic_shapes`` or ``dynamic_axes``) that came out static: torch.onnx.export retries a refused spec
  with torch's suggested fix (the dim pinned to the example's size) without a word.

torch is imported by the caller; nothing here imports it at import time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

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
        for name, v in values.items():
            lo, hi = self.ranges.get(name, (1, None))
            if v < max(lo, 1) or (hi is not None and v > hi):
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


def _finite_int(bound) -> int | None:
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
            lo, hi = max(_finite_int(vr.lower) or 1, 1), _finite_int(vr.upper)
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

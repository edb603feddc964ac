"""Choosing the lowering for each node: every exact candidate, its estimated cost, the cheapest wins.

The estimates come from lowering/cost.py (one place, fitted to measurements; ``--costs FILE`` may name
constants measured on this machine by ``onnxpoolfix calibrate``, and each plan's ``why`` then says so;
``--tune`` times the exact candidates instead: plan/tuning.py). Which is the options' cost model
(:class:`~onnxpoolfix.lowering.calibration.CostModel`), in use for the planning under way. ``strategy`` forces
one lowering by name (for comparisons and benchmarks); it must still be exact for the node, or the planner
refuses with the lowering's own reason.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ArgumentError, UnsupportedNodeError
from ..graph.shapes import PoolSpec
from ..lowering import BY_NAME, LOWERINGS, Lowering
from ..lowering.base import NO_NCNN_LAYER, AxisWindows
from ..lowering.calibration import active as cost_model
from ..reason import opset_needed
from ..report import dim_label, time_label
from ..words import BIND_INPUT_SIZES, DROP_STRATEGY, FORCED_BY_STRATEGY
from . import tuning

AUTO = "auto"
STRATEGIES = (AUTO,) + tuple(BY_NAME)


@dataclass(frozen=True)
class Candidate:
    name: str
    cost: float | None  # estimated seconds; None when not applicable
    reason: str | None  # why it does not apply (None when it does)


@dataclass(frozen=True)
class Plan:
    spec: PoolSpec
    lowering: Lowering
    candidates: tuple[Candidate, ...]
    why: str


def candidates(spec: PoolSpec) -> tuple[Candidate, ...]:
    out = []
    for lw in LOWERINGS:
        reason = lw.check(spec)
        out.append(Candidate(lw.name, None if reason else lw.cost(spec), reason))
    return tuple(out)


def check_strategy(strategy) -> None:
    """The one check of a strategy name (``patch``, ``inspect_model`` and :func:`plan` call it): an
    :class:`~onnxpoolfix.errors.ArgumentError` (a ValueError; exit 2) for a name that is no strategy."""
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ArgumentError(f"strategy must be one of {STRATEGIES}, not {strategy!r}",
                            f"choose one of: {', '.join(STRATEGIES)}", argument="strategy", value=strategy,
                            choices=list(STRATEGIES))


def plan(spec: PoolSpec, strategy: str = AUTO) -> Plan:
    check_strategy(strategy)
    cands = candidates(spec)
    if strategy != AUTO:
        chosen = next(c for c in cands if c.name == strategy)
        if chosen.reason:
            raise UnsupportedNodeError(f"strategy '{strategy}' does not apply to {spec.node.label}: {chosen.reason}",
                                       f"{DROP_STRATEGY} to let the planner choose", opset=opset_needed(chosen.reason),
                                       node=spec.node.name, reasons={strategy: str(chosen.reason)})
        return Plan(spec, BY_NAME[strategy], cands, FORCED_BY_STRATEGY)
    # the portable target: first the forms ncnn (through pnnx) has a layer for every op of, where one applies
    lacking = {c.name: spec.target == "portable" and bool(NO_NCNN_LAYER.intersection(BY_NAME[c.name].ops(spec)))
               for c in cands if c.reason is None}
    ok = sorted((c for c in cands if c.reason is None), key=lambda c: (lacking[c.name], c.cost))
    if not ok:
        if not spec.static:
            # every static lowering says the same thing; only the dynamic ones' reasons are news
            symbolic = [f"{dim_label(n)}->{dim_label(m)}" if n != m else f"{dim_label(n)} (kept)"
                        for n, m in zip(spec.in_sizes, spec.out_sizes)
                        if not (isinstance(n, int) and isinstance(m, int))]
            dynamic = [c for c in cands if BY_NAME[c.name].dynamic]
            dyn = "; ".join(f"{c.name}: {c.reason}" for c in dynamic)
            opset = min((n for n in map(opset_needed, (c.reason for c in dynamic)) if n is not None and n > spec.opset),
                        default=None)
            raise UnsupportedNodeError(
                f"no exact lowering applies to {spec.node.label}: pooled axes {', '.join(symbolic)} are "
                f"symbolic" + (f" ({dyn})" if dyn else ""),
                # a newer opset keeps the sizes symbolic: the caller's hint names it before binding them
                None if opset else f"{BIND_INPUT_SIZES}; a static lowering then applies at that size",
                opset=opset, node=spec.node.name, reasons={c.name: str(c.reason) for c in dynamic})
        reasons = "; ".join(f"{c.name}: {c.reason}" for c in cands)
        raise UnsupportedNodeError(f"no exact lowering applies to {spec.node.label} ({reasons})", node=spec.node.name,
                                   reasons={c.name: str(c.reason) for c in cands},
                                   opset=opset_that_would_do(spec, cands))
    best, model = ok[0], cost_model()
    if len(ok) == 1:
        why = "the only lowering that applies"
    elif model.tune and tuning.tunable(spec):
        measured = tuning.measure(spec, [BY_NAME[c.name] for c in ok], model.tune_threads)
        ranked = sorted(ok, key=lambda c: (lacking[c.name], measured[c.name]))
        best, runner = ranked[0], ranked[1]
        why = f"tuned: measured {time_label(measured[best.name])} vs {runner.name} {time_label(measured[runner.name])}"
    else:
        runner = ok[1]
        why = f"est. {time_label(best.cost)} vs {runner.name} {time_label(runner.cost)}"
    if len(ok) > 1 and lacking[runner.name] and not lacking[best.name]:
        why += ", whose ops ncnn lacks"
    source = model.label
    return Plan(spec, BY_NAME[best.name], cands, f"{describe_axes(spec)}; {why}" + (f" ({source})" if source else ""))


def plan_or_none(spec: PoolSpec) -> Plan | None:
    """The planner's choice, or None where no exact lowering applies (for nodes that may stay as they are)."""
    try:
        return plan(spec)
    except UnsupportedNodeError:
        return None


def describe_axes(spec: PoolSpec) -> str:
    """Per pooled axis: ``15->7 uniform k3 s2``, ``9->7 non-uniform``, ``H->7 symbolic``."""
    return ", ".join(AxisWindows(a, n, m).describe() if isinstance(n, int) and isinstance(m, int)
                     else f"{dim_label(n)}->{dim_label(m)} symbolic"
                     for a, n, m in zip(spec.axes, spec.in_sizes, spec.out_sizes))


def opset_that_would_do(spec: PoolSpec, cands: tuple[Candidate, ...]) -> int | None:
    """The smallest opset a reason names at which some lowering applies to ``spec``, tried (a reason's
    "needs opset 8" does not say that another reason, the max NaN guard's, is met there), or None."""
    pending = {n for n in map(opset_needed, (c.reason for c in cands)) if n is not None and n > spec.opset}
    tried: set[int] = set()
    while pending and len(tried) < _OPSET_TRIES:
        n = min(pending)
        tried.add(n)
        at = candidates(replace(spec, opset=n))
        if any(c.reason is None for c in at):
            return n
        pending = (pending | {m for m in map(opset_needed, (c.reason for c in at)) if m is not None and m > n}) - tried
    return None


_OPSET_TRIES = 8  # opsets tried for a hint (each a pass over the candidates; reasons name at most a few)

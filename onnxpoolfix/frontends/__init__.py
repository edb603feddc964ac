"""Front ends: each turns a graph into the same spec records (:class:`~onnxpoolfix.spec.PoolSpec`) at one
seam, :data:`FRONTENDS`, which the planner (:func:`onnxpoolfix.plan.model.plan_model`) runs in order.

- :mod:`.aten`: PyTorch's leftover ``org.pytorch.aten`` adaptive pooling nodes (found by :mod:`.leftovers`);
- :mod:`.exporter_repair`: the exporter's own pooling nodes that cannot run as written (an unbatched
  input's kernel rank, float64 pools onnxruntime has no kernel for), always; repaired, never kept;
- :mod:`.dynamo` (a folder): the decompositions the dynamo exporter wrote instead (regions cut by
  :mod:`.dynamo.dataflow`, each proven numerically by :mod:`.dynamo.proof`); their other nodes go in the apply step
  (``FrontEndResult.regions`` -> ``Found.regions`` -> :mod:`onnxpoolfix.rewrite.regions`), and what
  was suspected and left is ``FrontEndResult.suspects`` (the report and ``inspect`` list them);
- :mod:`.exporter_pools`: the exporter's own GlobalAveragePool/AveragePool nodes with adaptive windows
  (only with ``optimize_exporter_pools``; not the ones repaired).

Before them, :func:`.functions.inline_functions_holding_leftovers` inlines the model-local functions that
hide leftovers. A new front end is its own module and one more :class:`~.base.FrontEnd` here: what the
planner may do with its nodes (lower, keep, repair, leave suspects) is said by that entry and its results
(:mod:`.base`), so nothing else names it.

Leftovers inside If/Loop/Scan bodies (:mod:`.bodies`, with ``PlanOptions.patch_bodies``) are not a front
end's specs: each belongs to a body (a path, not a top-level node index), so ``plan_model`` plans them
apart (``ModelPlan.in_bodies``: one by one, no pyramids), after the front ends, with the top-level
leftovers' output types seeded (a body may pool one); the ATen front end types the bodies first (a
top-level leftover may pool an If's untyped result).
"""
from __future__ import annotations

from .aten import leftover_specs
from .base import FrontEnd, FrontEndResult, PlanOptions
from .dynamo import dynamo_specs
from .exporter_pools import exporter_pool_specs, keeps_its_op
from .exporter_repair import broken_exporter_pool_specs

FRONTENDS: tuple[FrontEnd, ...] = (
    FrontEnd("aten", leftover_specs),
    FrontEnd("exporter_repair", broken_exporter_pool_specs, optional=True),
    FrontEnd("dynamo", dynamo_specs),
    FrontEnd("exporter_pools", exporter_pool_specs, optional=True, keeps=keeps_its_op),
)

__all__ = ["FRONTENDS", "FrontEnd", "FrontEndResult", "PlanOptions"]

"""Front ends: each turns a graph into the same spec records (:class:`~onnxpoolfix.spec.PoolSpec`) at one
seam, :data:`FRONTENDS`, which :func:`onnxpoolfix.plan.model.plan_model` runs in order (ARCHITECTURE.md lists
them; "Adding a front end" says how: its own module, one :class:`~.base.FrontEnd` here, nothing else)."""
from __future__ import annotations

from .aten import leftover_specs
from .base import FrontEnd, FrontEndResult, PlanOptions
from .bodies import body_leftover_specs
from .dynamo import dynamo_specs
from .exporter_pools import exporter_pool_specs, keeps_its_op
from .exporter_repair import broken_exporter_pool_specs

FRONTENDS: tuple[FrontEnd, ...] = (
    FrontEnd("aten", leftover_specs),
    FrontEnd("exporter_repair", broken_exporter_pool_specs, optional=True),
    FrontEnd("dynamo", dynamo_specs),
    FrontEnd("exporter_pools", exporter_pool_specs, optional=True, keeps=keeps_its_op),
    FrontEnd("bodies", body_leftover_specs),
)

__all__ = ["FRONTENDS", "FrontEnd", "FrontEndResult", "PlanOptions"]

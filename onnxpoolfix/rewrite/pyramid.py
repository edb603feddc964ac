"""The pyramid group's emission (the plan is :mod:`onnxpoolfix.plan.pyramid`'s): the stacked MatMuls shared by
the levels that read one tensor, one Slice per such level, and each other level's own lowering, written from
its pooled source where it has one."""
from __future__ import annotations

from ..graph.emit import Emitter, op_types
from ..lowering.avg_non_finite import guarded
from ..lowering.steps import emit_chain
from ..plan.pyramid import GroupPlan, stacked_steps

__all__ = ["build_group"]


def build_group(g: GroupPlan, taken: set[str], opset: int, constant_nodes: bool) -> tuple[list, list, list[list[str]]]:
    """Emit the group: returns (nodes, initializers, op types per level in ``g.levels`` order)."""
    nodes, inits, ops = [], [], []
    x = g.levels[0].spec.node.input
    stacked_levels = [lv for lv in g.levels if lv.shared is not None]
    stacked, stacked_ops = None, []
    if stacked_levels:
        first = stacked_levels[0].spec
        em = Emitter(f"{first.node.name}/stacked", taken, opset, constant_nodes=constant_nodes,
                     target=first.target)
        steps = guarded(stacked_steps([lv.spec for lv in stacked_levels]), "avg", first.target, opset)
        stacked = emit_chain(em, steps, x, first.input_shape, first.dtype)
        nodes += em.nodes
        inits += em.initializers
        stacked_ops = op_types(em.nodes)
    for lv in g.levels:
        s = lv.spec
        em = Emitter(s.node.name, taken, opset, constant_nodes=constant_nodes, target=s.target)
        if lv.source is not None:
            lv.sub.lowering.build(em, lv.sub.spec, g.levels[lv.source].spec.node.output, s.node.output)
        elif lv.shared is not None:
            ends = [o + m for o, m in zip(lv.shared, s.out_sizes)]
            _slice(em, stacked, list(lv.shared), ends, list(s.axes), s.node.output)
        else:
            lv.plan.lowering.build(em, s, x, s.node.output)
        nodes += em.nodes
        inits += em.initializers
        # the stacked MatMuls are listed with the first level that reads them
        ops.append((stacked_ops if stacked_levels and lv is stacked_levels[0] else []) + op_types(em.nodes))
    return nodes, inits, ops


def _slice(em: Emitter, x: str, starts, ends, axes, out: str) -> str:
    if em.opset >= 10:
        return em.op("Slice", [x, em.ints("starts", starts), em.ints("ends", ends), em.ints("axes", axes)], out=out)
    return em.op("Slice", [x], out=out, starts=starts, ends=ends, axes=axes)

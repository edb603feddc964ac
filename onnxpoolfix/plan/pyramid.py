"""Several pools of one tensor (PSPNet's pyramid, 1x1/2x2/3x3/6x6 of one feature map): read the input once.

Planned per node, a pyramid reads its (large) input once per level. A group is every planned node with
the same input tensor, kind, dtype and static input shape; for a group of two or more:

1. **Nesting.** Levels go finest first. A level is computed from an already computed finer level when,
   on every pooled axis, its windows are unions of runs of the finer level's windows
   (:func:`windows.nests`: for averages the runs are disjoint windows of one length, so a mean of means
   is the mean; max needs only the union). It then pools the finer level's small output, ``fine -> m``,
   with whatever lowering the planner picks for that. PSP on 60x60: 6x6 from the input (AveragePool k10),
   3x3, 2x2 and 1x1 from the 6x6.
2. **Stacked MatMuls** (averages in float32/float64). The levels still read from the input, if two or
   more, are pooled together: along each pooled axis one MatMul against every level's pooling matrix
   stacked (``x @ [P_1^T | P_2^T | ...]`` on the last axis, then ``[P_1; P_2; ...] @ .`` on the others),
   which computes every level's windows crossed with every other level's (small: sum(m) per axis); each
   level then Slices its own block. PSP on 64x64 (overlapping windows, no nesting for averages): one
   64x64 @ 64x16 pass over the input (12 columns padded to 16), then a [12, 64] @ [64, 16] per plane.

The group plan replaces the members' own plans only when its estimated cost (lowering/cost.py) is lower.
Every member still writes its original output tensor, and the onnxruntime check compares each member
with the adaptive pooling reference of the group's input, as for any node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Sequence

import numpy as np

from .. import windows as W
from ..graph.shapes import PoolSpec
from ..lowering.avg_non_finite import unguardable
from ..lowering.base import compute_dtype, itemsize
from ..lowering.steps import MatMulStep, Step, reshape_keep, run_cost
from ..report import time_label
from .planner import Plan, plan_or_none

NAME = "pyramid"

#: A group plan is used when its estimated cost is below the separate plans' times this (tests raise it to
#: exercise grouping on small inputs).
GROUP_GAIN = 1.0


@dataclass(frozen=True)
class Level:
    """One member of a group: how its output is computed."""

    plan: Plan  # the member's own plan (its spec is the member's)
    source: int | None  # index of the finer level it pools, or None (the input / the stacked MatMuls)
    shared: tuple[int, ...] | None  # its block's offset on each pooled axis of the stacked MatMuls' output
    sub: Plan | None  # the plan for pooling its source (a finer level's output)

    @property
    def spec(self) -> PoolSpec:
        return self.plan.spec


@dataclass(frozen=True)
class GroupPlan:
    levels: tuple[Level, ...]  # finest first: a level's source precedes it
    stacked: bool  # some levels are computed by the stacked MatMuls
    cost: float
    separate_cost: float

    @property
    def index(self) -> int:
        """Where the group's nodes go: the earliest member's position (the input exists there)."""
        return min(lv.spec.node.index for lv in self.levels)

    def why(self, level: Level) -> str:
        n = len(self.levels)
        if level.source is not None:
            src = self.levels[level.source].spec
            how = f"from the {'x'.join(map(str, src.out_sizes))} level ('{src.node.name}')"
        elif level.shared is not None:
            how = "from the input through the stacked MatMuls shared with the other levels"
        else:
            how = "from the input"
        tail = f", then {level.sub.lowering.name}" if level.sub is not None else ""
        return (f"one of {n} pools of '{level.spec.node.input}' read once: {how}{tail} "
                f"(est. {time_label(self.cost)} for the group vs {time_label(self.separate_cost)} separately)")


def _cost(p: Plan) -> float:
    return p.lowering.cost(p.spec)


def _groupable(p: Plan) -> bool:
    s = p.spec
    if not s.static or s.node.indices_output or not all(isinstance(d, int) for d in s.input_shape):
        return False
    # two stages round twice: only where the dtype is also the compute dtype (max is exact anyway)
    return s.kind == "max" or compute_dtype(s) == s.dtype


def _sub_spec(member: PoolSpec, input_shape: tuple, what: str) -> PoolSpec:
    """The member's pooling applied to a smaller input (a finer level's output, or its slice)."""
    node = replace(member.node, index=-1, name=f"{member.node.name}/{what}", indices_output=None,
                   unused_outputs=(), size_input=None, output_size=tuple(member.out_sizes))
    return PoolSpec(node, tuple(input_shape), member.output_shape, member.dtype, member.opset, member.target)


def plan_groups(plans: Sequence[Plan]) -> tuple[list[GroupPlan], list[Plan]]:
    """Group plans that pool one tensor; returns the groups worth it and the plans left as they were."""
    buckets: dict[tuple, list[Plan]] = {}
    for p in plans:
        if _groupable(p):
            s = p.spec
            buckets.setdefault((s.node.input, s.kind, s.dtype, s.input_shape, s.k), []).append(p)
    groups, grouped = [], set()
    for members in buckets.values():
        if len(members) < 2:
            continue
        g = _plan_group(members)
        if g is not None and g.cost < g.separate_cost * GROUP_GAIN:
            groups.append(g)
            grouped.update(id(p) for p in members)
    return groups, [p for p in plans if id(p) not in grouped]


def _plan_group(members: list[Plan]) -> GroupPlan | None:
    members = sorted(members, key=lambda p: (-prod(p.spec.out_sizes), p.spec.node.index))
    spec0 = members[0].spec
    average = spec0.kind == "avg"
    size = itemsize(compute_dtype(spec0))
    separate = sum(_cost(p) for p in members)
    levels: list[Level] = []
    cost = 0.0
    for i, p in enumerate(members):
        s = p.spec
        best: tuple[float, int, Plan] | None = None
        for j in range(i):
            f = members[j].spec
            if all(W.nests(n, mf, mc, average=average) for n, mf, mc in zip(s.in_sizes, f.out_sizes, s.out_sizes)):
                sub = plan_or_none(_sub_spec(s, f.output_shape, "from_" + "x".join(map(str, f.out_sizes))))
                if sub is not None and (best is None or _cost(sub) < best[0]):
                    best = (_cost(sub), j, sub)
        if best is not None and best[0] < _cost(p) * GROUP_GAIN:
            levels.append(Level(p, best[1], None, best[2]))
            cost += best[0]
        else:
            levels.append(Level(p, None, None, None))
    direct = [i for i, lv in enumerate(levels) if lv.source is None]
    stackable = (average and len(direct) >= 2
                 and unguardable(["MatMul"], "avg", spec0.target, spec0.opset) is None)
    stacked_cost = _stacked_cost([members[i].spec for i in direct], size) if stackable else float("inf")
    direct_cost = sum(_cost(members[i]) for i in direct)
    use_stacked = stacked_cost < direct_cost * GROUP_GAIN
    cost += stacked_cost if use_stacked else direct_cost
    offsets = [0] * spec0.k
    for i in direct if use_stacked else ():  # each direct level's block of the stacked MatMuls' output
        levels[i] = replace(levels[i], shared=tuple(offsets))
        offsets = [o + m for o, m in zip(offsets, members[i].spec.out_sizes)]
    if all(lv.source is None and lv.shared is None for lv in levels):
        return None  # nothing shared: the members' own plans are the group's
    return GroupPlan(tuple(levels), use_stacked, cost, separate)


def shared_width(width: int) -> int:
    """Columns of the last axis' stacked matrix: zero-padded to a multiple of 16 above 8. MLAS computes
    16-wide column strips and handles a ragged remainder slowly ([1,512,64,64] @ [64, N]: N=16 501 us,
    N=12 623 us, N=9 893 us, N<=8 ~520 us)."""
    return width if width <= 8 else -(-width // 16) * 16


@dataclass(frozen=True)
class StackedMatMulStep(Step):
    """Average along ``axis`` for several output sizes at once: the pooling matrices ``n -> m`` for each
    ``m`` in ``sizes``, stacked (the last axis: side by side, zero-padded to :func:`shared_width`)."""

    axis: int
    n: int
    sizes: tuple[int, ...]
    last_axis: int  # the tensor's last axis

    @property
    def width(self) -> int:
        total = sum(self.sizes)
        return shared_width(total) if self.axis == self.last_axis else total

    def out_shape(self, shape):
        out = list(shape)
        out[self.axis] = self.width
        return tuple(out)

    def cost(self, shape, itemsize):
        return MatMulStep(self.axis, self.n, 16 if self.width > 8 else self.width)._cost(shape, itemsize, 1)

    def matrix(self) -> np.ndarray:
        """Every level's pooling matrix, stacked and padded with zero rows to ``width`` (float64)."""
        rows = np.concatenate([W.pooling_matrix(self.n, m, dtype=np.float64) for m in self.sizes], axis=0)
        return np.pad(rows, ((0, self.width - rows.shape[0]), (0, 0)))

    def emit(self, em, x, shape, elem):
        p = self.matrix()
        pos = len(shape) - 1 - self.axis
        if pos == 0:
            return em.op("MatMul", [x, em.weights("pool_matrices_t", p.T, elem)], hint="stacked_matmul")
        if pos == 1:
            return em.op("MatMul", [em.weights("pool_matrices", p, elem), x], hint="stacked_matmul")
        flat = reshape_keep(em, x, self.axis, [self.n, -1])
        y = em.op("MatMul", [em.weights("pool_matrices", p, elem), flat], hint="stacked_matmul")
        return reshape_keep(em, y, self.axis, [self.width] + list(shape[self.axis + 1:]))

    ops = ("MatMul", "Reshape")


def stacked_steps(specs: Sequence[PoolSpec]) -> list[StackedMatMulStep]:
    """One stacked MatMul per pooled axis, the last axis first (x @ P^T: one big GEMM over the input)."""
    s0 = specs[0]
    last = s0.ndim - 1
    return [StackedMatMulStep(a, n, tuple(s.output_shape[a] for s in specs), last)
            for a, n in reversed(list(zip(s0.axes, s0.in_sizes)))]


def _stacked_cost(specs: Sequence[PoolSpec], size: int) -> float:
    cost = run_cost(stacked_steps(specs), specs[0].input_shape, size)
    return cost + len(specs) * 2e-6  # a Slice per level, on a small tensor

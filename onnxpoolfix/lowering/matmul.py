"""Averages on any windows as MatMuls with constant pooling matrices, one pooled axis at a time.

``avg = P @ x`` along each axis, ``P[i, j] = 1/len_i`` on window i. Separable, so the axes can go in any
order; the order with the lowest estimated cost is used (the last axis as one big GEMM usually first in
2D; shrinking axes before growing ones).
"""
from __future__ import annotations

from itertools import permutations

from .base import Lowering, axis_windows, compute_dtype, itemsize
from .steps import MatMulStep, run_cost


def cheapest_order(spec, steps_for_axis, axes):
    """The permutation of ``axes`` whose steps cost least on the node's input; ``steps_for_axis(a)`` gives
    one axis' steps."""
    best, best_cost = None, float("inf")
    size = itemsize(compute_dtype(spec))
    for order in permutations(axes):
        steps = [s for a in order for s in steps_for_axis(a)]
        c = run_cost(steps, spec.input_shape, size)
        if c < best_cost:
            best, best_cost = steps, c
    return best or []


class SeparableMatMulLowering(Lowering):
    name = "matmul"
    summary = "one MatMul per changed axis against its constant pooling matrix"
    kinds = frozenset({"avg"})
    refuses_copies = True

    def _steps(self, spec):
        changed = [a for a in axis_windows(spec) if not a.keep]
        return cheapest_order(spec, lambda a: [MatMulStep(a.axis, a.n, a.m)], changed)

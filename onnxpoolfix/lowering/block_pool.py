"""One changed axis whose windows are uniform within each period: reshape into periods, one pooling op.

With ``g = gcd(n, m) > 1`` the windows repeat every ``p = n/g`` inputs and ``q = m/g`` outputs and none
crosses a period (see MatMulStep's block form). When ``p -> q`` is uniform (kernel k, stride s), reshaping
the axis to ``[g, p]`` and folding ``g`` (with every dim between the batch and the axis) into channels
gives ``[N, C*...*g, p, tail...]``, where one AveragePool/MaxPool with kernel k, stride s is exact. 1000 ->
30 is 10 periods of 100 -> 3 = k34 s33, while the whole axis is not uniform (starts 0, 33, 66, 100, 133:
no single stride), so ``pool`` does not apply.

Measured on [16,256,1000] -> 30 (15.6 MB, 2 threads): AveragePool on [16, 2560, 100] 1862 us, the
block-diagonal MatMul 2664 us, torch's kernel 2170 us, a ReduceSum over the input 1770 us. Bit-exact for
averages too: each window is summed in order, like torch's kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod

from .. import windows as W
from . import cost as C
from .base import Lowering, axis_windows
from .steps import OneAxisStep, PoolStep, numel

NODE_RESHAPE = 2  # the reshapes around the pool


def block_uniform(n: int, m: int) -> tuple[int, W.Uniform] | None:
    """``(g, uniform)`` when ``n -> m`` is g > 1 periods of a uniform ``n/g -> m/g``, else None."""
    g = gcd(n, m)
    if g <= 1 or m >= n:
        return None
    u = W.uniform_windows(n // g, m // g)
    return (g, u) if u is not None else None


@dataclass(frozen=True)
class BlockPoolStep(OneAxisStep):
    op_type: str  # AveragePool | MaxPool

    def _folded(self, shape):
        g, _ = block_uniform(self.n, self.m)
        return (shape[0], numel(shape[1:self.axis]) * g, self.n // g) + tuple(shape[self.axis + 1:])

    def _pool(self) -> PoolStep:
        _, u = block_uniform(self.n, self.m)
        return PoolStep(self.op_type, 2, ((2, u),))

    def cost(self, shape, itemsize):
        folded = self._folded(shape)
        return self._pool().cost(folded, itemsize) + NODE_RESHAPE * C.NODE

    def emit(self, em, x, shape, elem):
        g, _ = block_uniform(self.n, self.m)
        tail = [int(d) for d in shape[self.axis + 1:]]
        # the middle spelled out where it is static, not -1: a copied 0 (a batch of 0) leaves -1 undetermined
        middle = [d if isinstance(d, int) else -1 for d in shape[1:self.axis]]
        periods = g * prod(middle) if all(isinstance(d, int) for d in shape[1:self.axis]) else -1
        folded = em.op("Reshape", [x, em.ints("periods", [0, periods, self.n // g] + tail)])
        pooled = self._pool().emit(em, folded, self._folded(shape), elem)
        return em.op("Reshape", [pooled, em.ints("shape", [0] + middle + [self.m] + tail)])

    @property
    def ops(self):
        return ("Reshape", self.op_type)


class BlockPoolLowering(Lowering):
    name = "block_pool"
    summary = "one changed axis, uniform within each gcd period: Reshape into periods + one AveragePool/MaxPool"
    refuses_copies = True

    def _check(self, spec):
        changed = [a for a in axis_windows(spec) if not a.keep]
        if len(changed) != 1:
            return "needs exactly one changed axis"
        a = changed[0]
        if block_uniform(a.n, a.m) is None:
            g = gcd(a.n, a.m)
            if g <= 1 or a.m >= a.n:
                return f"axis {a.describe()} has no repeating period (gcd {g})" if g <= 1 else \
                    f"axis {a.describe()} does not shrink"
            return f"axis {a.describe()}: the period {a.n // g}->{a.m // g} is not uniform"
        if sum(not isinstance(d, int) for d in spec.input_shape[1:a.axis]) > 1:
            return "more than one symbolic dim between the batch and the pooled axis"
        if len(spec.input_shape) - a.axis > 3:
            return "more than 2 axes after the pooled one (pooling ops have at most 3 spatial axes)"
        return None

    def _steps(self, spec):
        a = next(a for a in axis_windows(spec) if not a.keep)
        return [BlockPoolStep(a.axis, a.n, a.m, "AveragePool" if spec.kind == "avg" else "MaxPool")]


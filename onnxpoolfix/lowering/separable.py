"""A static 3-D pool as two 2-D ones (the portable target's 3-D window slices; ncnn, issue 33).

A box window's mean is the mean over D of its H/W means, and its max the max over D of its H/W maxima (the
windows of each axis depend on that axis alone), so ``[N, C, D, H, W] -> [N, C, D', H', W']`` is::

    Reshape [N, C*D, H, W] -> the H/W windows (``plane``) -> Reshape [N, C, D, H'*W']
    -> the D windows along axis 2 (``depth``) -> Reshape [N, C, D', H', W']

each part the 2-D window slices (:class:`~.window_slices.WindowSlicesStep`), or for an integer upsample's copy a
4-D Resize (:mod:`.resize`). Why: ncnn's Mat holds at most 4 dims without the batch, and pnnx drops the batch only
where a Reshape keeps it 1 before a pooling op it knows; the Slices of the 5-D tensor fail to load (review77;
docs/targets.md, "What the project runs itself"). The Reshapes move no data; no weights, no multiplication.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import cost as C
from .base import specialized
from .steps import Step, chain_shape, emit_chain, run_cost


@dataclass(frozen=True)
class SeparableStep(Step):
    """``plane`` pools axes 2 and 3 of ``[N, C*D, H, W]``, ``depth`` axis 2 of ``[N, C, D, H'*W']``."""

    plane: tuple[Step, ...]
    depth: tuple[Step, ...]
    #: its pooling ops run on 4-D tensors whatever the input's rank (no 3-D pooling op: MNN, TFLite)
    plane_pools = True

    def _shapes(self, shape):
        n, c, d, h, w = shape
        plane_in = (n, c * d if isinstance(c, int) else None, h, w)
        h2, w2 = chain_shape(self.plane, plane_in)[2:]
        depth_in = (n, c, d, h2 * w2)
        d2 = chain_shape(self.depth, depth_in)[2]
        return plane_in, depth_in, (n, c, d2, h2, w2)

    def out_shape(self, shape):
        return self._shapes(shape)[2]

    def cost(self, shape, itemsize):
        plane_in, depth_in, _ = self._shapes(shape)
        return 3 * C.NODE + run_cost(self.plane, plane_in, itemsize) + run_cost(self.depth, depth_in, itemsize)

    def at(self, shape, itemsize, opset):
        plane_in, depth_in, _ = self._shapes(shape)
        return SeparableStep(tuple(specialized(self.plane, plane_in, itemsize, opset)),
                             tuple(specialized(self.depth, depth_in, itemsize, opset)))

    def mean_twin(self):
        plane, depth = tuple(s.mean_twin() for s in self.plane), tuple(s.mean_twin() for s in self.depth)
        return None if None in plane + depth else SeparableStep(plane, depth)

    def emit(self, em, x, shape, elem):
        plane_in, depth_in, out = self._shapes(shape)
        # the batch written as the number it is where static: pnnx carries the batch across a Reshape whose
        # shape holds 1 there (0, a copied dim, would stop it); symbolic leading dims are copied (0) or inferred
        lead = shape[0] if isinstance(shape[0], int) else 0

        def reshape(y, dims):
            return em.op("Reshape", [y, em.ints("shape", [lead, *dims])])

        y = reshape(x, [plane_in[1] if isinstance(plane_in[1], int) else -1, *plane_in[2:]])
        y = emit_chain(em, self.plane, y, plane_in, elem)
        y = reshape(y, [shape[1] if isinstance(shape[1], int) else -1, *depth_in[2:]])
        y = emit_chain(em, self.depth, y, depth_in, elem)
        return reshape(y, [shape[1] if isinstance(shape[1], int) else -1, *out[2:]])

    @property
    def ops(self):
        return ("Reshape",) + tuple(dict.fromkeys(op for s in self.plane + self.depth for op in s.ops))

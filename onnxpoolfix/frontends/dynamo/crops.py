"""Ops of the model's own inside a dataflow region (:mod:`.dataflow`'s ``find_candidate``): a crop, a scale, a
Gather by a vector of indices that reads the tensor a region would pool. Such a region is never taken (the op may be
the identity at every size a proof tries: review40 F2, F3); the region starting past the op is the reading. Where
every region past such ops selects no windows at all (PSP's 1x1 bin after a crop, ``F.adaptive_avg_pool2d(f[:, :,
:h], 1)``: a ReduceMean of the crop), the end is no decomposition: a mean of whole axes, right as written (review40
F6), as it is without the crop.
"""
from __future__ import annotations

from collections.abc import Mapping

__all__ = ["models_own", "past_selects_nothing"]

#: what torch's decomposition does with the tensor it pools (measured over the suite's exports, torch 2.9-2.14)
_DECOMPOSITION_READS = frozenset({"Transpose", "Reshape", "Shape", "Size", "Unsqueeze", "Squeeze", "Cast",
                                  "Identity", "Flatten", "Gather", "GatherND", "GatherElements"})


def models_own(g, pooled: str, region, info) -> tuple[str, str] | None:
    """(what it is, the tensor it writes) of the op of the model's own in ``region`` that reads its ``pooled``
    tensor, or None: anything torch's decomposition never applies to it, and a Gather by a vector of indices of it
    or of its Transpose (a crop, ``x[..., idx]``: review40 F3), where the decomposition gathers windows by tables
    of two or more dims."""
    near = {pooled}  # the pooled tensor, and it moved (the exporter transposes an indexed axis first)
    for i in sorted(region):
        n = g.nodes[i]
        if pooled in n.input and n.op_type not in _DECOMPOSITION_READS:
            return n.op_type, n.output[0]
        if n.op_type in ("Gather", "GatherND") and n.input[0] in near:
            index = info.get(n.input[1], (0, None))[1]  # a vector; GatherND's: a column of single positions
            if index is not None and (len(index) <= 1 if n.op_type == "Gather" else tuple(index[1:]) == (1,)):
                return f"{n.op_type} by a vector of indices", n.output[0]
        if n.op_type in ("Transpose", "Cast", "Identity") and n.input[0] in near:
            near.update(n.output)
    return None


def past_selects_nothing(past: Mapping[str, str], nothing: set[str], pooled: str) -> bool:
    """Whether the region from ``pooled``, past each op of the model's own in turn (``past``: a region's pooled
    tensor -> what its own op writes), is one that selects no windows (``nothing``: those regions' pooled tensors).
    A region past the op that does select windows, or none there (the op's result does not reach every data path
    into the end), is False: that region decides, or the pool is refused."""
    seen = set()
    while pooled in past and pooled not in seen:
        seen.add(pooled)
        pooled = past[pooled]
    return pooled in nothing

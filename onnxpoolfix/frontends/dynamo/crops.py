"""Ops of the model's own inside a dataflow region (:mod:`.dataflow`'s ``find_candidate``): a crop, a scale, a
Gather by a vector of indices that reads the tensor a region would pool. Such a region is never taken (the op may be
the identity at every size a proof tries: review40 F2, F3); the region starting past the op is the reading. Where
every region past such ops selects no windows at all (PSP's 1x1 bin after a crop, ``F.adaptive_avg_pool2d(f[:, :,
:h], 1)``: a ReduceMean of the crop), the end is no decomposition: a mean of whole axes, right as written (review40
F6), as it is without the crop. A crop the line writes that the graph does not hold is refused
(:func:`dropped_crop`).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from .metadata import parse_line, source_line

__all__ = ["DROPPED_CROP", "dropped_crop", "models_own", "past_selects_nothing"]

DROPPED_CROP = ("its source line pools a crop of spatial axes that the graph does not hold: torch's exporter left "
                "it out where it is the identity at the traced size (torch 2.9), so the region reads the uncropped "
                "tensor, right only where the crop is the identity")
_POOLING = re.compile(r"(^self\.\w+$)|adaptive|pool|interpolate", re.IGNORECASE)

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


def dropped_crop(g, end: int) -> bool:
    """Whether the line of the region ending at ``end`` hands a pooling call (torch's, or a submodule's) a crop of
    an axis past N and C (``F.adaptive_avg_pool2d(x[..., :40], (3, 5))``) while no Slice of data on that line is
    in the graph: torch 2.9 writes none where the crop is the identity at the traced size, and drops the guard
    that says so (review51: exit 0, OUT 0.17 off at widths past 40). A line it cannot parse says nothing."""
    line = source_line(g.nodes[end])
    parsed = parse_line(line.text) if line is not None else None  # the line as the metadata reads it (cached)
    crops = [n for n in ast.walk(parsed[0]) if isinstance(n, ast.Call) and n.args and _crops_space(n.args[0])
             and _POOLING.search(ast.unparse(n.func))] if parsed is not None else []
    return bool(crops) and not any(n.op_type == "Slice" and n.input[0] not in g.size_only
                                   and getattr(source_line(n), "text", None) == line.text for n in g.nodes)


def _crops_space(x) -> bool:
    """``x[..., :40]``, ``x[:, :, :h]``: a subscript bounding an axis after the first two (all after ``...``)."""
    if not isinstance(x, ast.Subscript):
        return False
    items = list(x.slice.elts) if isinstance(x.slice, ast.Tuple) else [x.slice]
    dots = [i for i, e in enumerate(items) if isinstance(e, ast.Constant) and e.value is Ellipsis]
    spatial = items[dots[0] + 1:] if dots else items[2:]
    return any(isinstance(e, ast.Slice) and (e.lower or e.upper or e.step) for e in spatial)

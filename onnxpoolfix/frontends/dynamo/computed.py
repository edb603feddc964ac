"""Output sizes a pool's source line computes from the input (``x.shape[3] // 4``, an area resize by
scale_factor): torch fixes them where it traced, so a size read off the graph there is that size's only
(:mod:`.reduces` has the whole story)."""
from __future__ import annotations

from collections.abc import Sequence

import onnx

from .call_args import COMPUTED, OwnLength
from .metadata import module_pool, source_line

__all__ = ["COMPUTES_SIZE", "computed_axes"]

COMPUTES_SIZE = ("its source line takes the output size from the input (computes it, or writes None: it follows the "
                 "input), and torch fixed it at the traced size (1 there, or a size torch specialized): other sizes "
                 "pool to other sizes")


def computed_axes(nodes: Sequence[onnx.NodeProto], k: int) -> set[int]:
    """The pooled axes (0..k-1, of the last k) whose output size an adaptive call on the nodes' source lines takes
    from the input: a computed entry of its size (one entry for every axis where it writes one) or a written
    ``None`` (the axis follows the input: a static size there is its traced length, review44 F3), or every axis
    for an area resize by scale_factor."""
    out: set[int] = set()
    for node in {_trace(n): n for n in nodes}.values():  # one node per stack trace
        module = module_pool(node)
        if module is not None and module[1]:  # an adaptive module's: its own size, fixed when it was built
            continue
        line = source_line(node)
        for call in line.calls if line else ():
            if not call.adaptive:
                continue
            if call.scales:
                return set(range(k))
            size = tuple(call.size or ())
            if len(size) == 1:
                size *= k
            out.update(k - len(size) + a for a, m in enumerate(size)
                       if (m is COMPUTED or m is None or isinstance(m, OwnLength)) and k - len(size) + a >= 0)
    return out


def _trace(node: onnx.NodeProto) -> tuple:
    return tuple((p.key, p.value) for p in node.metadata_props if p.key.endswith(("stack_trace", "name_scopes")))

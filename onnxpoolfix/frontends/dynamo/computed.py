"""Output sizes a pool's source line computes from the input (``x.shape[3] // 4``, an area resize by
scale_factor): torch fixes them where it traced, so a size read off the graph there is that size's only
(:mod:`.reduces` has the whole story)."""
from __future__ import annotations

from collections.abc import Sequence

import onnx

from .call_args import COMPUTED, OwnLength
from .metadata import has_metadata, module_pool, source_line, submodules

__all__ = ["COMPUTES_SIZE", "HIDDEN_SIZE", "computed_axes", "hides_a_size", "region_hides_a_size"]

COMPUTES_SIZE = ("its source line takes the output size from the input or does not show it (computes it, writes None: "
                 "it follows the input, or names a variable bound elsewhere: a loop written on the line before), and "
                 "torch fixed it at the traced size (1 there, or a size torch specialized): other sizes may pool to "
                 "other sizes (a loop over fixed sizes on the call's own line is read)")

HIDDEN_SIZE = ("its source line calls something that may hold a pool (a helper function or method, a lambda), "
               "which the stack trace does not enter: its pool to 1 there (a size 1 the graph fixes on a symbolic "
               "axis) may be an adaptive pool whose output size, computed from the input, was 1 at the traced size")


def computed_axes(nodes: Sequence[onnx.NodeProto], k: int, kind: str | None = None,
                  made: Sequence | None = None) -> set[int]:
    """The pooled axes (0..k-1, of the last k) whose output size an adaptive call on the nodes' source lines takes
    from the input: a computed entry of its size (one entry for every axis where it writes one) or a written
    ``None`` (the axis follows the input: a static size there is its traced length, review44 F3), or every axis
    for an area resize by scale_factor. ``kind`` ("avg", "max"): only calls that pool so (a ReduceMax is no
    average's: ``F.adaptive_avg_pool2d(x, (None, 2)); F.adaptive_max_pool2d(x, 1)`` on one line). ``made``: the
    region's output length per pooled axis (an int where static): a call writing a literal size that differs
    from it on some axis made another region. torch shares the nodes reading a tensor's shape between the calls
    pooling it, and they keep the first call's line: ``a = pool(x, (3, None))`` before ``b = pool(x, (5, 6))``
    read b's W as computed (refused, exit 4); so did ``pool(pool(x, (6, 6)), (5, None))`` for the inner pool."""
    out: set[int] = set()
    traces = {tuple((p.key, p.value) for p in n.metadata_props if p.key.endswith(("stack_trace", "name_scopes"))): n
              for n in nodes}
    for node in traces.values():  # one node per stack trace
        module = module_pool(node)
        if module is not None and module[1]:  # an adaptive module's: its own size, fixed when it was built
            continue
        line = source_line(node)
        for call in line.calls if line else ():
            if not call.adaptive or kind not in (None, call.kind):
                continue
            if call.scales:
                return set(range(k))
            size = tuple(call.size or ())
            if len(size) == 1:
                size *= k
            if made is not None and call.rank in (None, k) and len(size) == k and any(
                    type(m) is int and type(n) is int and m != n for m, n in zip(size, made)):
                continue
            out.update(k - len(size) + a for a, m in enumerate(size)
                       if (m is COMPUTED or m is None or isinstance(m, OwnLength)) and k - len(size) + a >= 0)
    return out


def hides_a_size(node: onnx.NodeProto, modules: dict[tuple[str, ...], frozenset[str]] | None) -> bool:
    """Whether the node, of no pooling module, sits on a line that hides the call making it (a helper function or
    method, a lambda: ``return pool_w(x)``; the stack trace keeps the caller's line only): the size it pools to may
    be computed from the input there, fixed by torch where it was 1 (review45), even where it is handed the
    module's own size (the helper may do anything with it).
    ``modules``: the graph's :func:`.metadata.submodules` (a submodule's call hides nothing)."""
    if module_pool(node) is not None:
        return False
    line = source_line(node, modules)
    return line is not None and line.opaque


def region_hides_a_size(nodes: Sequence[onnx.NodeProto], region) -> bool:
    """Whether the region's nodes with a stack trace all sit on a line that hides the call making them
    (:func:`hides_a_size`; review45: ``return pool_h(x)`` pooling to ``(t.shape[2] // 8, 5)``)."""
    traced = [nodes[i] for i in region if has_metadata(nodes[i])]
    modules = submodules(nodes)
    return bool(traced) and all(hides_a_size(n, modules) for n in traced)

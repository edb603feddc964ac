"""Model-local functions (``export_modules_as_functions``) that hold leftovers, or compute a leftover's output
size, are inlined before any front end runs: a leftover inside a function body cannot be replaced per call
site, and a size computed inside one (torch's ``Shape`` of a module's output, without constant folding) is
not read through the call."""
from __future__ import annotations

import logging

import onnx

from .base import reach
from .leftovers import is_pool_leftover

logger = logging.getLogger(__name__)


def inline_functions_holding_leftovers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Inline those functions (the module doc says why; a size: the ``(1, None)`` of a pool after a Conv2d
    module, with constant folding off, review22 case 514) with onnx's own inliner, each round those the last
    one brought to the top level. Returns the model and the inlined functions' names."""
    holders: list[str] = []
    for _ in range(len(model.functions) + 1):  # each round inlines at least one function: a count bounds it
        local = {(f.domain, f.name) for f in model.functions}
        held = _holding(model) | _sizing(model.graph, local)
        if not held:
            break
        from onnx import inliner

        holders += [f.name for f in model.functions if (f.domain, f.name) in held]
        logger.debug("inlining local functions %s", sorted(held))
        model = inliner.inline_selected_functions(model, sorted(held))
    return model, holders


def _holding(model: onnx.ModelProto) -> set[tuple[str, str]]:
    """The functions whose body holds a leftover, or calls one that does (nested modules: Outer calls Block
    calls the pool): all of them are inlined, down to the top-level graph."""
    held = {(f.domain, f.name) for f in model.functions if any(is_pool_leftover(n) for n in f.node)}
    while True:
        more = {(f.domain, f.name) for f in model.functions
                if any((n.domain, n.op_type) in held for n in f.node)} - held
        if not more:
            return held
        held |= more


def _sizing(graph: onnx.GraphProto, local: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The local functions called at the top level whose outputs a leftover's size inputs are computed from:
    the walk goes up from each size input through its producers, stopping at a function call (inlined) and at
    a ``Shape`` (only the shape of what it reads matters, which inference gives through a call)."""
    producer = {o: n for n in graph.node for o in n.output if o}

    def step(name: str) -> list[str]:
        node = producer.get(name)
        stop = node is None or (node.domain, node.op_type) in local or node.op_type == "Shape"
        return [] if stop else [i for i in node.input if i]

    seen = reach([name for n in graph.node if is_pool_leftover(n) for name in n.input[1:] if name], step)
    return {(n.domain, n.op_type) for n in (producer.get(name) for name in seen) if n is not None
            and (n.domain, n.op_type) in local}

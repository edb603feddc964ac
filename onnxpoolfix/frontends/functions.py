"""Model-local functions that hold leftovers (``export_modules_as_functions``) are inlined before any
front end runs: a leftover inside a function body cannot be replaced per call site."""
from __future__ import annotations

import logging

import onnx

from .leftovers import is_pool_leftover

logger = logging.getLogger(__name__)


def inline_functions_holding_leftovers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Exports with ``export_modules_as_functions`` hide leftovers inside model-local functions, where
    nothing can replace them per call site: inline those functions first (onnx's own inliner)."""
    # a function holds a leftover if its body has one or calls a function that holds one (nested modules:
    # Outer calls Block calls the pool): all of them are inlined, down to the top-level graph
    held = {(f.domain, f.name) for f in model.functions if any(is_pool_leftover(n) for n in f.node)}
    while True:
        more = {(f.domain, f.name) for f in model.functions
                if any((n.domain, n.op_type) in held for n in f.node)} - held
        if not more:
            break
        held |= more
    if not held:
        return model, []
    from onnx import inliner

    holders = [f.name for f in model.functions if (f.domain, f.name) in held]
    logger.debug("inlining local functions %s", holders)
    return inliner.inline_selected_functions(model, sorted(held)), holders

"""The one input check of every entry point: the ONNX checker on the model as the patch will see it. The
checker itself, without copying weights, is :mod:`onnxpoolfix.io.checker`'s; what a real export needs before
the checker takes it (the exporter's pools repaired, torch's untyped body outputs typed, functions that hide
leftovers inlined) is the front ends' knowledge, so the retries live here, above io/."""
from __future__ import annotations

import logging

from onnx import ModelProto

from ..errors import InvalidModelError
from ..graph.shapes import drop_standard_declarations, infer, light_copy, make_value_info
from ..io.checker import POOL_SHAPE_ERROR, UNTYPED_VALUE_INFO, check_model_light
from ..io.tensors import PathLike
from .bodies import typed_copy
from .exporter_repair import as_repaired
from .functions import inline_functions_holding_leftovers

logger = logging.getLogger(__name__)

_STALE_DECLARATION = "Inferred shape and existing shape differ"


def _undeclared(model: ModelProto) -> ModelProto:
    """A light copy of ``model`` without the declared shapes of standard ops' outputs (value_info dropped, graph
    outputs' shapes as inferred), as :func:`onnxpoolfix.graph.shapes.infer` reads every model."""
    light = light_copy(model)
    g = light.graph
    standard = drop_standard_declarations(g)
    inferred = infer(light)
    for i, vi in enumerate(g.output):
        elem, dims = inferred.get(vi.name, (0, None))
        if vi.name in standard and elem and dims is not None:
            g.output[i].CopyFrom(make_value_info(vi.name, elem, dims))
    return light

__all__ = ["check_input_model"]


def _known_opset(model: ModelProto, path: PathLike | None) -> None:
    """Refuse a default-domain opset newer than the installed onnx knows (the checker lets it through, and
    onnxruntime then fails to load OUT with a message cut before its point): what its operators mean there,
    and so what an exact replacement is, is unknown."""
    from onnx.defs import onnx_opset_version

    declared = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if declared > onnx_opset_version():
        raise InvalidModelError(
            f"{path or 'model'}: declares opset {declared} of the default domain, newer than the installed onnx "
            f"knows (up to {onnx_opset_version()}): what its operators mean there is unknown",
            f"export at opset {onnx_opset_version()} or lower, or upgrade onnx and onnxruntime")


def check_input_model(model: ModelProto, path: PathLike | None = None) -> None:
    """``check_model`` for a model just loaded from ``path``, without copying or serialising its weights.
    The one input check of every entry point: the CLI (``path``: the file, named in the message), and
    :func:`onnxpoolfix.patch` / ``patch_model`` / ``inspect_model`` on a model in memory (``path`` None: named
    "model"; external weights are not read, their references stand in for them).

    Leftovers inside model-local functions (``export_modules_as_functions``) make the checker's inference of
    the function bodies fail (the aten node's output has no type, so the next op's input has none): when
    the checker refuses such a model, the model with those functions inlined, as the patch will do it,
    is checked instead.

    With external data, the file itself is checked by path (its weights stay on disk; only the graph is
    parsed). A self-contained model is checked as a *light* copy: every initializer over 1 KiB is replaced
    by an external-data stub (name, dims, dtype) pointing at an empty placeholder file in a private temporary
    folder, so a 500 MB model costs the checker a few KB. Not checked: that those initializers' bytes are
    as long as their dims say for tensors of 64 KiB and more (reading the length would copy the tensor):
    ``save_model`` stops with the same error when it writes one (exit 3, nothing written).
    """
    _known_opset(model, path)
    name = str(path) if path is not None else None  # how a retry on a copy in memory names the model
    try:
        check_model_light(model, path)
    except InvalidModelError as e:
        if _STALE_DECLARATION in str(e):
            # a shape torch declared for a standard op's output that its inputs contradict (a Squeeze after a
            # pool frozen at the traced size): stale, as every declaration is taken to be; judged without them
            check_model_light(_undeclared(model), None, name)
            return
        if POOL_SHAPE_ERROR.search(str(e)):
            # the exporter's pools the patch repairs (a kernel of the pooling rank on an unbatched input):
            # judged as repaired; the unrepairable ones (no size in the graph) stay refused
            view = as_repaired(model)
            if view is not None:
                check_model_light(view, None, name)
                return
        # torch leaves the outputs of leftovers in If/Loop bodies, and the bodies' own outputs, untyped: a
        # real export, judged with those types filled in as the patch will fill them
        typed = typed_copy(model)
        if typed is not None:
            try:
                check_model_light(typed, None, name)
            except InvalidModelError as e2:
                # torch leaves If outputs untyped where a branch reads a top-level leftover's result (its
                # type is ours to give): the patch types them; only that omission is let through here
                if not str(e2).endswith(UNTYPED_VALUE_INFO):
                    raise
                logger.debug("%s: untyped control-flow outputs left for the patch to type", path or "model")
            return
        inlined, holders = inline_functions_holding_leftovers(model)
        if not holders:
            raise
        check_model_light(inlined, None, name)

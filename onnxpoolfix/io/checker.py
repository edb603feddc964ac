"""The ONNX checker, run so that it never prints to stdout, never copies a large model's weights (a light
copy, or the file by path), and reports its first line as an ``InvalidModelError``."""
from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto

from ..errors import InvalidModelError
from ..graph.shapes import is_small_tensor, light_copy
from .tensors import PROTOBUF_LIMIT, PathLike, has_external_data, inline_nbytes
from .wire import GUESS_MIN, WireEmitter, raw_data_mismatch

logger = logging.getLogger(__name__)

def _run_checker(model_or_path) -> None:
    """``onnx.checker.check_model(..., full_check=True)`` with the C++ checker's own prints (e.g. "Warning:
    Model contains experimental ops: ATen", written straight to file descriptor 1) sent to the log instead:
    the tool's stdout is the report, and ``-q`` promises silence."""
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no usable fd 1: nothing to protect
        onnx.checker.check_model(model_or_path, full_check=True)
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            onnx.checker.check_model(model_or_path, full_check=True)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            said = sink.read().decode("utf-8", "replace").strip()
            if said:
                logger.debug("onnx checker: %s", said)


# what torch's TorchScript exporter writes for an adaptive pool of an unbatched input, (C, L) or (C, H, W):
# a pooling node of a rank ONNX pooling does not take (README, "The exporter's own pools")
_POOL_SHAPE_ERROR = re.compile(r"op_type:(AveragePool|MaxPool|GlobalAveragePool|GlobalMaxPool)\b.*"
                               r"(at least 3 dimensions|incorrect size|kernel)", re.S)


def _checker_error(name: str, full: str, kind: str) -> InvalidModelError:
    logger.debug("%s: checker says:\n%s", name, full)
    first = full.splitlines()[0] if full else kind
    if _POOL_SHAPE_ERROR.search(full):
        hint = ("torch's TorchScript exporter writes such a pool for an adaptive pool of an unbatched input "
                "((C, L), (C, H, W)) whose sizes the graph no longer holds; export with a batch dim "
                "(x.unsqueeze(0)) or with onnxpoolfix.export(..., dynamo=True)")
    else:
        hint = "the model is malformed; re-export it or fix the exporter"
    return InvalidModelError(f"{name}: fails the ONNX checker: {first}", hint)


def check_model(model: ModelProto, path: PathLike | None = None) -> None:
    """Run ``onnx.checker.check_model`` with ``full_check=True`` (so shape/type inference errors count too),
    raising ``InvalidModelError`` with the checker's first line.

    A model with external data or over 2 GiB cannot be checked in memory (the checker would resolve the
    data files against the current folder, or protobuf refuses the size), so it is checked from ``path``,
    the file it was saved to (e.g. the temporary file given to ``save_model``'s ``before_commit``).
    Small self-contained models are checked in memory and ``path`` only names them in messages.
    """
    name = str(path) if path is not None else "model"
    by_path = has_external_data(model) or WireEmitter({}).size(model) > PROTOBUF_LIMIT
    if by_path and path is None:
        raise ValueError("check_model: a model with external data or over 2 GiB must be checked by path")
    try:
        _run_checker(str(path) if by_path else model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise _checker_error(name, str(e).strip(), type(e).__name__) from None


_LIGHT_STUB_FILE = "onnxpoolfix-checker-stub.data"


def check_input_model(model: ModelProto, path: PathLike) -> None:
    """``check_model`` for a model just loaded from ``path``, without copying or serialising its weights.

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
    try:
        _check_input_model(model, path)
    except InvalidModelError:
        # not at the top: frontends/ imports check/ (the dynamo proof), which imports io/ (this package), and
        # a module-level import here would close that loop through the packages' __init__ modules
        from ..frontends.bodies import typed_copy
        from ..frontends.functions import inline_functions_holding_leftovers

        # torch leaves the outputs of leftovers in If/Loop bodies, and the bodies' own outputs, untyped: a
        # real export, judged with those types filled in as the patch will fill them
        typed = typed_copy(model)
        if typed is not None:
            _check_input_model(typed, path)
            return
        inlined, holders = inline_functions_holding_leftovers(model)
        if not holders:
            raise
        _check_input_model(inlined, path)


def _check_input_model(model: ModelProto, path: PathLike) -> None:
    name = str(path)
    if has_external_data(model):  # (load_model refuses files over 2 GiB, so the rest fit in memory)
        check_model(model, path)
        return
    # the light copy below hides the bytes of every initializer over 1 KiB from the checker; those under
    # GUESS_MIN are measured here (cheap), the larger ones when save_model writes them (it predicts their
    # size from dims x dtype and stops with this same error when the data disagrees)
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL and not is_small_tensor(t) and inline_nbytes(t) < GUESS_MIN:
            why = raw_data_mismatch(t)
            if why:
                raise InvalidModelError(f"{name}: {why}", "the model is malformed (truncated weights?); re-export it")
    light = light_copy(model, stub_location=_LIGHT_STUB_FILE)
    with tempfile.TemporaryDirectory(prefix=".onnxpoolfix-checker-") as tmp:
        (Path(tmp) / _LIGHT_STUB_FILE).touch()
        light_path = Path(tmp) / Path(name).name
        with open(light_path, "wb") as f:
            f.write(light.SerializeToString())
        try:
            _run_checker(str(light_path))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            full = str(e).strip().replace(str(light_path), name).replace(str(tmp), str(Path(name).parent))
            raise _checker_error(name, full, type(e).__name__) from None

"""The ONNX checker, run so that it never prints to stdout, never copies a large model's weights (a light
copy, or the file by path), and reports its first line as an ``InvalidModelError``."""
from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto

from ..errors import InvalidModelError
from ..graph import NEGATIVE_PERM_HINT
from ..graph.shapes import is_small_tensor, light_copy
from .tensors import PROTOBUF_LIMIT, PathLike, has_external_data, inline_nbytes
from .wire import GUESS_MIN, WireEmitter, raw_data_mismatch

logger = logging.getLogger(__name__)

def _run_checker(model_or_path) -> None:
    """``onnx.checker.check_model(..., full_check=True)`` with the C++ checker's own prints (e.g. "Warning:
    Model contains experimental ops: ATen", written straight to file descriptor 1) sent to the log instead:
    the tool's stdout is the report, and ``-q`` promises silence."""
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
POOL_SHAPE_ERROR = re.compile(r"op_type:(AveragePool|MaxPool|GlobalAveragePool|GlobalMaxPool)\b.*"
                               r"(at least 3 dimensions|incorrect size|kernel)", re.S)


UNTYPED_VALUE_INFO = "Field 'type' of 'value_info' is required but missing."

# what torch's TorchScript exporter writes for permute's and movedim's negative axes (graph.NEGATIVE_PERM_HINT)
NEGATIVE_PERM_ERROR = re.compile(r"op_type:Transpose\b.*Invalid attribute perm \{[^}]*-\d", re.S)


def _checker_error(name: str, full: str, kind: str) -> InvalidModelError:
    logger.debug("%s: checker says:\n%s", name, full)
    first = full.splitlines()[0] if full else kind
    if POOL_SHAPE_ERROR.search(full):
        hint = ("torch's TorchScript exporter writes such a pool for an adaptive pool of an unbatched input "
                "((C, L), (C, H, W)) whose sizes the graph no longer holds; export with a batch dim "
                "(x.unsqueeze(0)) or with onnxpoolfix.export(..., dynamo=True)")
    elif NEGATIVE_PERM_ERROR.search(full):
        hint = NEGATIVE_PERM_HINT
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


def check_model_light(model: ModelProto, path: PathLike | None, name: str | None = None) -> None:
    """``check_model`` for a model just loaded from ``path`` (None: in memory, named ``name`` or "model"),
    without copying or serialising its weights: by path where its weights are external, else on a light copy
    (:func:`onnxpoolfix.frontends.input_check.check_input_model` says how, and what it retries)."""
    name = name or (str(path) if path is not None else "model")
    if has_external_data(model) and path is not None:  # (load_model refuses files over 2 GiB, so the rest fit)
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
    for t in light.graph.initializer:  # a model in memory: its external weights' files are not ours to read
        if t.data_location == TensorProto.EXTERNAL:
            del t.external_data[:]
            entry = t.external_data.add()
            entry.key, entry.value = "location", _LIGHT_STUB_FILE
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

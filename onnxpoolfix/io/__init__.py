"""Reading and writing ONNX models without ever corrupting or half-writing one: the tool sits in deployment
pipelines, so this package is deliberately defensive. :mod:`.load` (every way a file is not a model: one
``InvalidModelError``; external weights stay on disk), :mod:`.checker` (the ONNX checker without copying weights),
:mod:`.save` and :mod:`.commit` (everything written into a private temporary folder, renamed into place at the very
end: any failure leaves no trace), :mod:`.outfile` (where a path really writes, OUT and ``--report`` alike),
:mod:`.wire` (the piece-by-piece serializer), :mod:`.tensors` (every tensor walked, external data streamed).
"""
from __future__ import annotations

from .checker import check_model
from .commit import preflight_output
from .load import SMALL_EXTERNAL_INLINE, load_model
from .outfile import preflight_report, resolve_output, same_file, write_report
from .save import EXTERNAL_DATA_THRESHOLD, save_model
from .tensors import PROTOBUF_LIMIT, PathLike, external_data_files, has_external_data
from .wire import serialize

__all__ = [
    "load_model", "save_model", "check_model", "preflight_output", "preflight_report",
    "write_report", "same_file", "resolve_output",
    "has_external_data", "external_data_files", "PROTOBUF_LIMIT", "EXTERNAL_DATA_THRESHOLD",
    "SMALL_EXTERNAL_INLINE", "PathLike", "serialize",
]

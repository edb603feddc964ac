"""Reading and writing ONNX models without ever corrupting or half-writing one.

The tool sits in deployment pipelines, so this package is deliberately defensive:

* :mod:`.load` (``load_model``) turns every way a file can fail to be an ONNX model into one
  ``InvalidModelError`` whose message names the file and the problem. By default it leaves external tensors
  as references, so the graph can be patched without reading gigabytes of weights.
* :mod:`.checker` (``check_model``, ``check_model_light``) runs the ONNX checker without copying weights.
* :mod:`.save` (``save_model``) chooses how the tensors are stored and writes everything into a private
  temporary folder inside OUT's folder; :mod:`.commit` renames the files into place at the very end. Any
  failure (including the caller's ``before_commit`` check) leaves no trace and a pre-existing OUT untouched.
  :mod:`.outfile` is the one rule for where a path really writes (through a symbolic link; into a FIFO or
  character device such as /dev/null; block devices and sockets refused), for OUT and ``--report`` alike.
* :mod:`.wire` serialises the model piece by piece (its docstring says why not ``onnx.save``), so saving
  needs about the model's own memory plus its largest tensor and never modifies the caller's ``ModelProto``;
  :mod:`.tensors` walks every tensor and streams external data.
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

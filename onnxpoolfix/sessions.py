"""The one place the package opens an onnxruntime session: the check and its proofs, the dynamo front end's
proof, the export's comparison with torch, the planner's tuning and the cost calibration all go through
:func:`ort_session`, and feed it through :func:`ort_value`. A leaf: onnxruntime is imported on first use, so
a run that never checks never loads it."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

__all__ = ["ort_session", "ort_value"]


def ort_session(model: onnx.ModelProto | str | bytes, model_dir: str | None = None, *, optimize: bool = True,
                threads: int | None = None, log_level: int = 4):
    """A CPU session on ``model`` (a proto, its bytes, or a file's path: onnxruntime reads it), not spinning.

    ``optimize=False``: onnxruntime's graph optimizations off (a graph run as written, where a fusion could hide
    what it computes). ``model_dir``: where external data resolves (the graph is passed as bytes, weights stay on
    disk, nothing is written next to IN). ``threads``: intra-op threads and one inter-op thread (timing runs),
    else onnxruntime's defaults without its memory arena. ``log_level`` 4, fatal only: stale declared output
    shapes of dynamic exports (warnings) are not our news, and a probe at a size the network cannot take logs an
    expected error; a failure that matters is raised with onnxruntime's message in it."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    else:  # a check's few runs: no arena kept past each run (10% of a small file's peak memory: issue 35)
        so.enable_cpu_mem_arena = False
        so.enable_mem_pattern = False
    so.log_severity_level = log_level
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if model_dir is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model_dir))
    source = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


def ort_value(x: np.ndarray):
    """``x`` as an onnxruntime input (bfloat16 through its raw bits: numpy has no bfloat16 of its own)."""
    import onnxruntime as ort

    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(x)

"""onnxpoolfix: replace PyTorch's leftover adaptive pooling nodes with exact, fast standard ONNX.

    import onnx, onnxpoolfix
    patched = onnxpoolfix.patch_model(onnx.load("in.onnx"))      # the argument is not modified
    result = onnxpoolfix.patch(onnx.load("in.onnx"))             # .model and .report
"""
from .api import PatchResult, patch, patch_model
from .errors import (
    ArgumentError,
    CheckFailedError,
    CheckTooLargeError,
    InvalidModelError,
    OutputError,
    PoolFixError,
    ShapeError,
    TensorRTRejectionError,
    TorchMismatchError,
    UnsupportedNodeError,
)
from .report import NodeReport, PatchReport
from .torch_export import export, translation_table  # torch is imported only when they are called
from .version import __version__

__all__ = [
    "patch", "patch_model", "export", "translation_table", "PatchResult", "PatchReport", "NodeReport",
    "PoolFixError", "ArgumentError", "InvalidModelError", "UnsupportedNodeError", "ShapeError", "CheckFailedError",
    "CheckTooLargeError", "OutputError", "TensorRTRejectionError", "TorchMismatchError",
    "__version__",
]

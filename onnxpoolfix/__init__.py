"""onnxpoolfix: replace PyTorch's leftover adaptive pooling nodes with exact, fast standard ONNX.

    import onnx, onnxpoolfix
    patched = onnxpoolfix.patch_model(onnx.load("in.onnx"))      # the argument is not modified
    result = onnxpoolfix.patch(onnx.load("in.onnx"))             # .model and .report
"""
from .api import PatchResult, patch, patch_model  # noqa: E402
from .errors import (  # noqa: E402
    CheckFailedError,
    CheckTooLargeError,
    InvalidModelError,
    OutputError,
    PoolFixError,
    ShapeError,
    UnsupportedNodeError,
)
from .export import export  # noqa: E402  (torch is imported only when export() is called)
from .report import NodeReport, PatchReport  # noqa: E402
from .version import __version__

__all__ = [
    "patch", "patch_model", "export", "PatchResult", "PatchReport", "NodeReport",
    "PoolFixError", "InvalidModelError", "UnsupportedNodeError", "ShapeError", "CheckFailedError", "CheckTooLargeError",
    "OutputError",
    "__version__",
]

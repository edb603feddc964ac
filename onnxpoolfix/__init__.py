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
    TorchMismatchError,
    UnsupportedNodeError,
)
from .report import NodeReport, PatchReport  # noqa: E402
from .torch_export import export, translation_table  # noqa: E402  (torch is imported only when called)
from .version import __version__

__all__ = [
    "patch", "patch_model", "export", "translation_table", "PatchResult", "PatchReport", "NodeReport",
    "PoolFixError", "InvalidModelError", "UnsupportedNodeError", "ShapeError", "CheckFailedError", "CheckTooLargeError",
    "OutputError", "TorchMismatchError",
    "__version__",
]

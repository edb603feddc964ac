"""onnxpoolfix: replace PyTorch's leftover adaptive pooling nodes with exact, fast standard ONNX.

    import onnx, onnxpoolfix
    patched = onnxpoolfix.patch_model(onnx.load("in.onnx"))      # the argument is not modified
    result = onnxpoolfix.patch(onnx.load("in.onnx"))             # .model and .report
"""
from importlib import import_module

from .version import __version__

# The package's names load on first use (PEP 562): `import onnxpoolfix` costs nothing until one is asked for,
# and the console script (onnxpoolfix.entry) can catch an interrupt during the heavy imports (onnxruntime,
# numpy, the lowerings) and exit 130 like any other interrupt.
_WHERE = {
    "patch": "api", "patch_model": "api", "PatchResult": "api",
    "NodeReport": "report", "PatchReport": "report",
    "export": "torch_export", "translation_table": "torch_export",  # torch is imported only when they are called
    **{name: "errors" for name in (
        "ArgumentError", "CheckFailedError", "CheckTooLargeError", "InvalidModelError", "OutputError",
        "PoolFixError", "ShapeError", "TensorRTRejectionError", "TorchMismatchError", "UnsupportedNodeError")},
}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "patch", "patch_model", "export", "translation_table", "PatchResult", "PatchReport", "NodeReport",
    "PoolFixError", "ArgumentError", "InvalidModelError", "UnsupportedNodeError", "ShapeError", "CheckFailedError",
    "CheckTooLargeError", "OutputError", "TensorRTRejectionError", "TorchMismatchError",
    "__version__",
]

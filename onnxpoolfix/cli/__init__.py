"""The command line: parse, call the library, print the report, map errors to exit codes.

    onnxpoolfix IN OUT [options]        patch IN, check it, write OUT atomically
    onnxpoolfix inspect IN [options]    what would be replaced, how, and what blocks it; writes nothing
    onnxpoolfix windows N M [N2 M2 ...] PyTorch's windows for N -> M per axis, and the popular recipes'

Exit codes: 0 success (also "nothing to patch"), 1 internal error (a bug: rerun with -v), 2 usage,
3 IN is not a readable valid ONNX model, 4 a node cannot be lowered exactly (unsupported variant,
unresolvable shape, too-old opset), 5 the onnxruntime check failed, 6 OUT cannot be written,
7 (inspect --target tensorrt) every node can be lowered, but TensorRT's parser would reject some node of the
patched graph, 8 too large to check (nothing was checked: --check-shape smaller sizes or --no-check),
130/143 interrupted (SIGINT/SIGTERM: OUT is the previous file or the complete new one).
"""
from __future__ import annotations

from . import calibrate_cmd, inspect_cmd, patch_cmd, windows_cmd  # noqa: F401  (each registers its command)
from .app import main
from .common import EXIT_CODES_EPILOG, Interrupted, parse_shapes
from .windows_cmd import parse_size_pairs

__all__ = ["main", "parse_shapes", "parse_size_pairs", "Interrupted", "EXIT_CODES_EPILOG"]

if __name__ == "__main__":  # pragma: no cover
    main()

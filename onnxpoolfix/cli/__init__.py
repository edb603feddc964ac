"""The command line: parse, call the library, print the report, map errors to exit codes.

    onnxpoolfix IN OUT [options]        patch IN, check it, write OUT atomically
    onnxpoolfix inspect IN [options]    what would be replaced, how, and what blocks it; writes nothing
    onnxpoolfix windows N M [N2 M2 ...] PyTorch's windows for N -> M per axis, and the popular recipes'

The flags ``patch`` and ``inspect`` share are option groups (:mod:`.args`, which says how a flag is added);
every failure goes through one wrapper (:func:`.guard.reported`); the exit codes are the one table of
:mod:`onnxpoolfix.errors` (``EXIT_CODES``), which ``--help`` prints.
"""
from __future__ import annotations

from . import calibrate_cmd, inspect_cmd, patch_cmd, windows_cmd  # noqa: F401  (each registers its command)
from .app import main
from .args import parse_shapes
from .guard import Interrupted
from .windows_cmd import parse_size_pairs

__all__ = ["main", "parse_shapes", "parse_size_pairs", "Interrupted"]

if __name__ == "__main__":  # pragma: no cover
    main()

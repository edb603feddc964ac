"""The command line: parse, call the library, print the report, map errors to exit codes.

    onnxpoolfix IN OUT [options]        patch IN, check it, write OUT atomically
    onnxpoolfix inspect IN [options]    what would be replaced, how, and what blocks it; writes nothing
    onnxpoolfix windows N M [N2 M2 ...] PyTorch's windows for N -> M per axis, and the popular recipes'

The flags ``patch`` and ``inspect`` share are option groups (:mod:`.args`, which says how a flag is added);
every failure goes through one wrapper (:func:`.guard.reported`); the exit codes are the one table of
:mod:`onnxpoolfix.errors` (``EXIT_CODES``), which ``--help`` prints.
"""
from __future__ import annotations

from .app import main
from .guard import Interrupted

__all__ = ["main", "parse_shapes", "Interrupted"]


def __getattr__(name: str):
    """``parse_shapes`` loads its commands' modules on first use (the commands themselves load when looked up:
    :data:`.app.COMMANDS`)."""
    if name == "parse_shapes":
        from .args import parse_shapes

        return parse_shapes
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Errors raised by onnxpoolfix.

Every error carries a one-line ``message`` (what is wrong) and an optional ``hint`` (what to do about it).
The CLI prints both and exits with the class's ``exit_code``; the library never prints.
"""
from __future__ import annotations


class PoolFixError(Exception):
    """Base class. ``str(err)`` is the one-line message; ``err.hint`` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # keep it one line, whatever the caller passed
        return " ".join(self.message.split())


class InvalidModelError(PoolFixError):
    """The input is not a readable, valid ONNX model (missing, empty, corrupt, fails the checker)."""

    exit_code = 3


class UnsupportedNodeError(PoolFixError):
    """A leftover pooling node cannot be lowered exactly (non-constant size, bad rank, too-old opset, ...)."""

    exit_code = 4


class ShapeError(PoolFixError):
    """A shape the lowering needs is unknown or inconsistent (e.g. a symbolic dim with no override)."""

    exit_code = 4


class CheckFailedError(PoolFixError):
    """The onnxruntime check found a replaced node whose output differs from the reference."""

    exit_code = 5

    def __init__(self, message: str, hint: str | None = None, report=None):
        super().__init__(message, hint)
        self.report = report


class CheckTooLargeError(PoolFixError):
    """The onnxruntime check cannot run at these sizes: a pooled tensor or the check's inputs are too large
    for memory. Nothing was checked (and nothing written); check at smaller sizes or skip the check."""

    exit_code = 8


class OutputError(PoolFixError):
    """The output could not be written (unwritable folder, OUT equal to IN without --in-place, ...)."""

    exit_code = 6


class TorchMismatchError(CheckFailedError):
    """``onnxpoolfix.export(verify=True)``: the exported file, run in onnxruntime, differs from the torch module
    (or fails where torch runs)."""

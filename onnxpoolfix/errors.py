"""Errors raised by onnxpoolfix.

Every error carries a one-line ``message`` (what is wrong) and an optional ``hint`` (what to do about it).
The CLI prints both and exits with the class's ``exit_code``; the library never prints.
"""
from __future__ import annotations

# How an error names what the caller can change: the CLI's flags and the Python API's arguments, phrase by
# phrase (the longer phrases first). An error speaks the API's words (it is raised through patch(),
# inspect_model(), export()); the CLI prints it in its own (cli_words). A message may be written in either.
_WORDS = (
    ("--check-shape NAME:D0,D1,... (several inputs: in one flag, separated by spaces)",
     "check_shapes=[{'NAME': [D0, D1, ...]}] (several inputs: in one mapping)"),
    ("--check-shape NAME:D0,D1,... (repeatable)", "check_shapes=[{'NAME': [D0, D1, ...]}, ...]"),
    ("--check-shape NAME:D0,D1,...", "check_shapes=[{'NAME': [D0, D1, ...]}]"),
    ("--input-shape NAME:D0,D1,... (API: input_shapes=...)", "input_shapes={'NAME': [D0, D1, ...]}"),
    ("--input-shape NAME:D0,D1,...", "input_shapes={'NAME': [D0, D1, ...]}"),
    ("--check-shape", "check_shapes"),
    ("--input-shape", "input_shapes"),
    ("--no-check", "check=False"),
    ("drop --strategy", "drop strategy= (or strategy='auto')"),
    ("--strategy", "strategy="),
    ("--target tensorrt", "target='tensorrt'"),
    ("--target onnxruntime", "target='onnxruntime'"),
    ("--in-place", "inplace=True"),
    ("--optimize-exporter-pools", "optimize_exporter_pools=True"),
    ("--keep-input-shapes", "keep_input_shapes=True"),
    ("(rerun with -v)", "(with logging at DEBUG level)"),
)


def api_words(text: str | None) -> str | None:
    """``text`` with the CLI's flags named as the Python API's arguments."""
    if text:
        for cli, api in _WORDS:
            text = text.replace(cli, api)
    return text


def cli_words(text: str | None) -> str | None:
    """``text`` with the API's arguments named as the CLI's flags (what the CLI prints)."""
    if text:
        for cli, api in _WORDS:
            text = text.replace(api, cli)
    return text


class PoolFixError(Exception):
    """Base class. ``str(err)`` is the one-line message; ``err.hint`` says what to do. Both name the Python
    API's arguments (``input_shapes=``, ``check=False``); the CLI prints them with its flags
    (:func:`cli_words`)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        message = api_words(message)
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def hint(self) -> str | None:
        return self._hint

    @hint.setter
    def hint(self, value: str | None) -> None:
        self._hint = api_words(value)

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

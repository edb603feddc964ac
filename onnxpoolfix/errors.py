"""Errors raised by onnxpoolfix, and the one table of the exit codes.

Every error carries a one-line ``message`` (what is wrong) and an optional ``hint`` (what to do about it).
The CLI prints both and exits with the class's ``exit_code``; the library never prints.

:data:`EXIT_CODES` is the only list of the exit codes: ``--help`` (:func:`exit_codes_epilog`), the
README's table (tests/test_readme.py compares the two) and ``inspect``'s verdict
(:attr:`onnxpoolfix.inspection.report.Inspection.exit_code`) read it. Each code a failure exits with has
one class here; a subclass (``ShapeError``, ``TorchMismatchError``) narrows what went wrong, not the code.
"""
from __future__ import annotations

from dataclasses import dataclass

from .words import API, render


class PoolFixError(Exception):
    """Base class. ``str(err)`` is the one-line message; ``err.hint`` says what to do. Both are written once,
    naming what the caller can change by reference (:mod:`onnxpoolfix.words`), and read in the words of
    ``err.audience``: the Python API's arguments (``input_shapes=``, ``check=False``) unless a caller that
    speaks other words (the CLI's flags, ``export``'s arguments) renders them itself (:meth:`render`)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, **data):
        super().__init__(render(message))
        self.text = message  # as written, references and all
        self.hint_text = hint
        self.audience = API
        self.data = data  # what code acts on (``opset``: the smallest opset that would do)

    @property
    def message(self) -> str:
        return render(self.text, self.audience)

    @property
    def hint(self) -> str | None:
        return render(self.hint_text, self.audience)

    @hint.setter
    def hint(self, value: str | None) -> None:
        self.hint_text = value

    def render(self, audience: str) -> tuple[str, str | None]:
        """(message on one line, hint) in ``audience``'s words."""
        return " ".join(render(self.text, audience).split()), render(self.hint_text, audience)

    def __str__(self) -> str:  # keep it one line, whatever the caller passed
        return " ".join(self.message.split())


class ArgumentError(PoolFixError, ValueError):
    """An argument does not fit: an ``--input-shape``/``--check-shape`` (API: ``input_shapes``,
    ``check_shapes``) naming no graph input, of the wrong rank or changing a fixed dim, or an unknown
    strategy or target. A usage error, as click's own (exit 2); a ``ValueError`` to Python callers."""

    exit_code = 2


class InvalidModelError(PoolFixError):
    """The input is not a readable, valid ONNX model (missing, empty, corrupt, fails the checker)."""

    exit_code = 3


class UnsupportedNodeError(PoolFixError):
    """A leftover pooling node cannot be lowered exactly (non-constant size, bad rank, too-old opset, ...)."""

    exit_code = 4


class ShapeError(UnsupportedNodeError):
    """A shape the lowering needs is unknown or inconsistent (e.g. a symbolic dim with no override)."""


class CheckFailedError(PoolFixError):
    """The onnxruntime check found a replaced node whose output differs from the reference."""

    exit_code = 5

    def __init__(self, message: str, hint: str | None = None, report=None, **data):
        super().__init__(message, hint, **data)
        self.report = report


class OutputError(PoolFixError):
    """The output could not be written (unwritable folder, OUT equal to IN without --in-place, ...)."""

    exit_code = 6


class TensorRTRejectionError(PoolFixError):
    """Every node can be lowered, but TensorRT's ONNX parser would reject some node of the patched graph
    (``inspect --target tensorrt``'s verdict: :attr:`Inspection.exit_code`; the patch itself only restricts
    its own nodes to what the parser accepts)."""

    exit_code = 7


class CheckTooLargeError(PoolFixError):
    """The onnxruntime check cannot run at these sizes: a pooled tensor or the check's inputs are too large
    for memory. Nothing was checked (and nothing written); check at smaller sizes or skip the check."""

    exit_code = 8


class TorchMismatchError(CheckFailedError):
    """``onnxpoolfix.export(verify=True)``: the exported file, run in onnxruntime, differs from the torch module
    (or fails where torch runs)."""


EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal's number
EXIT_SIGPIPE = 141  # as a Unix tool killed by SIGPIPE


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: the code(s), what they mean for ``onnxpoolfix IN OUT`` (``patch``) and for
    ``inspect`` (None: that command never exits with it), and the error class that exits with it."""

    codes: tuple[int, ...]
    patch: str | None
    inspect: str | None
    error: type[PoolFixError] | None = None

    @property
    def label(self) -> str:
        return "/".join(map(str, self.codes))


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode((EXIT_OK,), 'success (also "nothing to patch")',
             "a patch would succeed, its onnxruntime check aside (with --target tensorrt: and the patched model is "
             "TensorRT-clean)"),
    ExitCode((EXIT_INTERNAL,), *["internal error: a bug in onnxpoolfix (rerun with -v and report it)"] * 2),
    ExitCode((ArgumentError.exit_code,), "usage error: a bad option or argument (also an --input-shape or "
             "--check-shape that does not fit IN)", "usage error: a bad option or argument (also an --input-shape "
             "that does not fit IN)", ArgumentError),
    ExitCode((InvalidModelError.exit_code,), *["invalid input: IN is missing, unreadable, not ONNX, or fails the "
                                               "ONNX checker"] * 2, InvalidModelError),
    ExitCode((UnsupportedNodeError.exit_code,), "cannot lower a node exactly (unsupported variant, unresolvable "
             "shape, too-old opset)", "some node is blocked: a patch would fail (the reason is shown)",
             UnsupportedNodeError),
    ExitCode((CheckFailedError.exit_code,), "the onnxruntime check of the patched model failed (OUT is not "
             "written)", None, CheckFailedError),
    ExitCode((OutputError.exit_code,), "output error: OUT cannot be written (nothing is left behind)", None,
             OutputError),
    ExitCode((TensorRTRejectionError.exit_code,), None, "(--target tensorrt) every node can be lowered, but "
             "TensorRT's parser would reject some node", TensorRTRejectionError),
    ExitCode((CheckTooLargeError.exit_code,), "the check cannot run: a pooled tensor is too large to check (nothing "
             "checked or written; --check-shape or --no-check)", None, CheckTooLargeError),
    ExitCode((EXIT_SIGINT, EXIT_SIGTERM), "interrupted by SIGINT/SIGTERM (OUT is either the previous file or "
             "the complete new one)", "interrupted by SIGINT/SIGTERM"),
    ExitCode((EXIT_SIGPIPE,), "standard output's reader (`head`, a pager) closed it before the summary was "
             "printed: OUT is written in full (it is in place before the summary is printed)",
             "standard output's reader closed it before the whole report was printed"),
)


def exit_codes_epilog(command: str) -> str:
    """The exit codes as ``--help`` shows them below a command (``"patch"`` or ``"inspect"``); click keeps
    the lines as they are after ``\\b``."""
    rows = [(e.label, getattr(e, command)) for e in EXIT_CODES if getattr(e, command) is not None]
    width = max(len(label) for label, _ in rows)
    return "\b\nExit codes:\n" + "\n".join(f"  {label.ljust(width)}  {meaning}" for label, meaning in rows) + "\n"

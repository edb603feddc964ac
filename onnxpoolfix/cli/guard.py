"""The one place a failure becomes one line, a hint and an exit code (:func:`reported`), and SIGTERM made to
unwind like Ctrl-C. The codes are :data:`onnxpoolfix.errors.EXIT_CODES`'."""
from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

import click

from ..errors import EXIT_INTERNAL, EXIT_SIGPIPE, OutputError, PoolFixError
from ..words import CLI


class Interrupted(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every ``finally`` (the temporary output) runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def raise_interrupted(signum, _frame):
    raise Interrupted(signum)


def interrupted(signum: int) -> None:
    click.echo(f"onnxpoolfix: interrupted ({signal.Signals(signum).name})", err=True)
    click.echo("  hint: OUT is only ever replaced whole: it is the previous file (or absent) unless the run "
               "had already finished writing it", err=True)
    sys.exit(128 + signum)


@contextmanager
def stdout_reader_gone() -> Iterator[None]:
    """A reader that closed standard output (``| head``) ends the run as SIGPIPE ends a Unix tool: silently,
    exit 141 (click's own handling says 1, our "internal error"). Standard output then points at the null
    device, so that the interpreter's last flush does not raise again."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_SIGPIPE)


def machine_refused(err: Exception) -> str | None:
    """What the machine refused where that, not a bug, is the failure: a full disk or quota, a read-only file
    system, no temporary folder it can write to (Python's tempfile tries each and raises FileNotFoundError);
    None otherwise."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return os.strerror(err.errno)
    if isinstance(err, FileNotFoundError):
        import tempfile

        try:
            tempfile.gettempdir()
        except FileNotFoundError:
            return "no usable temporary folder"
    return None


def fail(err: Exception, verbose: bool) -> None:
    if verbose:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    refused = machine_refused(err)
    if refused is not None:  # the machine's, not a bug: said as an output error
        err = OutputError(f"{refused}: {' '.join(str(err).split())}",
                          "free disk space, or point TMPDIR at a folder with room")
    if isinstance(err, PoolFixError):  # said with the CLI's flags
        message, hint = err.render(CLI)
        click.echo(f"onnxpoolfix: error: {message}", err=True)
        if hint:
            click.echo(f"  hint: {hint}", err=True)
        sys.exit(err.exit_code)
    click.echo(f"onnxpoolfix: internal error: {type(err).__name__}: {' '.join(str(err).split())}", err=True)
    click.echo("  hint: this is a bug; rerun with -v and report the traceback", err=True)
    sys.exit(EXIT_INTERNAL)


@contextmanager
def reported(verbose: bool, before: Callable[[Exception], None] | None = None) -> Iterator[None]:
    """Run a command's work: click's own errors pass through (usage, exit 2); an interrupt exits 130/143; any
    other failure is one line and a hint on stderr (a traceback too with ``verbose``) and its class's exit
    code, 1 for what is not a PoolFixError (a bug). ``before(err)`` runs first (patch prints the report of
    a failed check)."""
    try:
        yield
    except click.ClickException:
        raise
    except (KeyboardInterrupt, Interrupted) as err:
        interrupted(getattr(err, "signum", signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
        if before is not None:
            before(err)
        fail(err, verbose)

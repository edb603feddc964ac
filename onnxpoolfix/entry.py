"""The console script's entry: imports nothing heavy itself, so that an interrupt while the command line's
modules load (onnxruntime, numpy, the lowerings: about a second) is the same one-line exit 130 as an
interrupt during the run, never a traceback. Ctrl-C then raises the CLI's own ``Interrupted``, as SIGTERM
does: click turns a KeyboardInterrupt that lands outside a command's body (while it parses the flags and runs
their callbacks) into "Aborted!" and exit 1, and no ``except Exception`` anywhere can take it for a failure."""
from __future__ import annotations

import signal
import sys


def main() -> None:
    try:
        from .cli import main as cli_main
        from .cli.guard import Interrupted, interrupted, raise_interrupted

        signal.signal(signal.SIGINT, raise_interrupted)
    except KeyboardInterrupt:
        sys.stderr.write("onnxpoolfix: interrupted (SIGINT) while starting; nothing was written\n")
        sys.exit(128 + signal.SIGINT)
    try:
        cli_main(prog_name="onnxpoolfix")
    except Interrupted as err:  # outside a command's body: its own handler (cli/guard.py) takes the rest
        interrupted(err.signum)
    finally:
        # the run has ended and said how: an interrupt now (while the interpreter shuts down, where Python
        # restores the default handler) would kill the process with SIGINT after a complete run
        signal.signal(signal.SIGINT, signal.SIG_IGN)

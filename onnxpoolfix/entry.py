"""The console script's entry: imports nothing heavy itself, so that an interrupt while the command line's
modules load (onnxruntime, numpy, the lowerings: about a second) is the same one-line exit 130 as an
interrupt during the run, never a traceback."""
from __future__ import annotations

import signal
import sys


def main() -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("onnxpoolfix: interrupted (SIGINT) while starting; nothing was written\n")
        sys.exit(128 + signal.SIGINT)
    cli_main(prog_name="onnxpoolfix")

"""The ``onnxpoolfix`` click group: ``onnxpoolfix IN OUT`` runs ``patch``, ``onnxpoolfix inspect IN``
runs ``inspect``, ``onnxpoolfix windows N M`` draws windows (the commands register themselves:
:mod:`.patch_cmd`, :mod:`.inspect_cmd`, :mod:`.windows_cmd`)."""
from __future__ import annotations

import contextlib
import importlib
import os
import signal

import click

from ..errors import exit_codes_epilog
from ..version import __version__
from .guard import raise_interrupted, stdout_reader_gone

#: each command's module, imported when the command is looked up (it registers itself on :data:`main`): a
#: command loads only its own stack, and ``--version`` none (the lowerings, onnx and numpy take about a second)
COMMANDS = {"patch": ".patch_cmd", "inspect": ".inspect_cmd", "windows": ".windows_cmd",
            "calibrate": ".calibrate_cmd"}


class _PatchByDefault(click.Group):
    """``onnxpoolfix IN OUT`` runs ``patch``; ``onnxpoolfix inspect IN`` runs ``inspect``."""

    def list_commands(self, ctx):
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx, name):
        if name in COMMANDS and name not in self.commands:
            importlib.import_module(COMMANDS[name], __package__)
        return super().get_command(ctx, name)

    def make_context(self, *args, **kwargs):  # --help and --version print while the flags are parsed
        with stdout_reader_gone():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with stdout_reader_gone():
            return super().invoke(ctx)

    def parse_args(self, ctx, args):
        args = list(args)
        names = set(self.list_commands(ctx))
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            # options before the command (`onnxpoolfix -q inspect IN`): the command goes first, else the
            # patch below would read 'inspect' as IN and IN as OUT (a file of that name stays a path)
            named = next((i for i, a in enumerate(args) if a in names and not os.path.exists(a)), None)
            if named is not None:
                args = [args[named]] + args[:named] + args[named + 1:]
        if args and args[0] not in names and args[0] not in ("--help", "-h", "--version"):
            args = ["patch"] + args
        return super().parse_args(ctx, args)


@click.group(cls=_PatchByDefault, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=exit_codes_epilog("patch"))
@click.version_option(__version__, prog_name="onnxpoolfix")
def main():
    """Replace PyTorch's leftover adaptive pooling nodes (org.pytorch.aten) with exact standard ONNX.

    \b
      onnxpoolfix IN.onnx OUT.onnx         patch, check in onnxruntime, write OUT
      onnxpoolfix inspect IN.onnx          show what would be done, write nothing
      onnxpoolfix windows N M              show PyTorch's windows for N -> M, and the recipes'
    """
    # SIGTERM unwinds like Ctrl-C, so the temporary output is removed (not possible off the main thread)
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, raise_interrupted)

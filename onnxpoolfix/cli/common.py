"""What every command shares: the exit codes, ``NAME:D0,D1,...`` parsing, the common options, and the one
place a failure becomes one line, a hint and an exit code."""
from __future__ import annotations

import signal
import sys
import traceback

import click

from ..api import MAX_DIM
from ..errors import PoolFixError
from ..plan.planner import STRATEGIES

EXIT_INTERNAL = 1

# shown by --help of the group and of `patch` (the module docstring says the same)
EXIT_CODES_EPILOG = """\b
Exit codes:
  0  success (also "nothing to patch")
  1  internal error: a bug in onnxpoolfix (rerun with -v and report it)
  2  usage error (bad option or argument)
  3  invalid input: IN is missing, unreadable, not ONNX, or fails the ONNX checker
  4  cannot lower a node exactly (unsupported variant, unresolvable shape, too-old opset)
  5  the onnxruntime check of the patched model failed (OUT is not written)
  6  output error: OUT cannot be written (nothing is left behind)
  8  the check cannot run: a pooled tensor is too large to check (nothing was checked or written)
  7  (inspect --target tensorrt) TensorRT's parser would reject some node of the patched graph
  130/143  interrupted by SIGINT/SIGTERM (OUT is either the previous file or the complete new one)
"""


def parse_shapes(values: tuple[str, ...], flag: str) -> dict[str, list[int]]:
    """``NAME:D0,D1,...`` entries (repeatable, or several in one value separated by spaces)."""
    shapes: dict[str, list[int]] = {}
    for value in values:
        for item in value.split():
            name, sep, dims = item.rpartition(":")
            if not sep or not name or not dims:
                raise click.BadParameter(f"'{item}' is not NAME:D0,D1,... (e.g. x:1,3,224,224)", param_hint=flag)
            try:
                parsed = [int(d) for d in dims.split(",")]
            except ValueError:
                raise click.BadParameter(f"'{item}': dims must be integers", param_hint=flag) from None
            if any(d < 1 for d in parsed):
                raise click.BadParameter(f"'{item}': dims must be >= 1", param_hint=flag)
            if any(d > MAX_DIM for d in parsed):
                raise click.BadParameter(f"'{item}': dims must be <= {MAX_DIM}", param_hint=flag)
            shapes[name] = parsed
    return shapes


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


def fail(err: Exception, verbose: bool) -> None:
    if verbose:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    if isinstance(err, PoolFixError):
        click.echo(f"onnxpoolfix: error: {err}", err=True)
        if err.hint:
            click.echo(f"  hint: {err.hint}", err=True)
        sys.exit(err.exit_code)
    click.echo(f"onnxpoolfix: internal error: {type(err).__name__}: {' '.join(str(err).split())}", err=True)
    click.echo("  hint: this is a bug; rerun with -v and report the traceback", err=True)
    sys.exit(EXIT_INTERNAL)


COMMON_OPTIONS = [
    click.option("--target", type=click.Choice(["onnxruntime", "tensorrt"]), default="onnxruntime", show_default=True,
                 help="Restrict the emitted ops to what this runtime accepts."),
    click.option("--strategy", type=click.Choice(STRATEGIES), default="auto", show_default=True,
                 help="Force one lowering for every node (for comparisons); 'auto' picks the cheapest exact one."),
    click.option("--input-shape", "input_shape", multiple=True, metavar="NAME:D0,D1,...",
                 help="Bind an input's shape (repeatable; or several, space-separated, in one value)."),
    click.option("--traced-shape", "traced_shape", multiple=True, metavar="NAME:D0,D1,...",
                 help="The input shape a dynamo export was traced at (the export call's example input): proves its "
                      "decomposed pools there; binds nothing (OUT keeps its symbolic dims)."),
    click.option("--allow-partial", is_flag=True,
                 help="Write the fix even where a dynamo region stays frozen at the traced size (OUT then right "
                      "only where the report's 'partial' says); refused by default."),
    click.option("-v", "--verbose", is_flag=True, help="Log what happens and show tracebacks."),
]


def with_common(f):
    for opt in reversed(COMMON_OPTIONS):
        f = opt(f)
    return f

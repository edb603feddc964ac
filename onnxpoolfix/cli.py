"""The command line: parse, call the library, print the report, map errors to exit codes.

    onnxpoolfix IN OUT [options]        patch IN, check it, write OUT atomically
    onnxpoolfix inspect IN [options]    what would be replaced, how, and what blocks it; writes nothing

Exit codes: 0 success (also "nothing to patch"), 1 internal error (a bug: rerun with -v), 2 usage,
3 IN is not a readable valid ONNX model, 4 a node cannot be lowered exactly (unsupported variant,
unresolvable shape, too-old opset), 5 the onnxruntime check failed, 6 OUT cannot be written,
7 (inspect --target tensorrt) every node can be lowered, but TensorRT's parser would reject some node of the
patched graph, 130/143 interrupted (SIGINT/SIGTERM: OUT is the previous file or the complete new one).
"""
from __future__ import annotations

import logging
import re
import signal
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .errors import PoolFixError
from .api import MAX_DIM
from .planner import STRATEGIES

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


class _PatchByDefault(click.Group):
    """``onnxpoolfix IN OUT`` runs ``patch``; ``onnxpoolfix inspect IN`` runs ``inspect``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["patch"] + list(args)
        return super().parse_args(ctx, args)


class Interrupted(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every ``finally`` (the temporary output) runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, _frame):
    raise Interrupted(signum)


def _interrupted(signum: int) -> None:
    click.echo(f"onnxpoolfix: interrupted ({signal.Signals(signum).name})", err=True)
    click.echo("  hint: OUT is only ever replaced whole: it is the previous file (or absent) unless the run "
               "had already finished writing it", err=True)
    sys.exit(128 + signum)


def _fail(err: Exception, verbose: bool) -> None:
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


_common = [
    click.option("--target", type=click.Choice(["onnxruntime", "tensorrt"]), default="onnxruntime", show_default=True,
                 help="Restrict the emitted ops to what this runtime accepts."),
    click.option("--strategy", type=click.Choice(STRATEGIES), default="auto", show_default=True,
                 help="Force one lowering for every node (for comparisons); 'auto' picks the cheapest exact one."),
    click.option("--input-shape", "input_shape", multiple=True, metavar="NAME:D0,D1,...",
                 help="Bind an input's shape (repeatable; or several, space-separated, in one value)."),
    click.option("-v", "--verbose", is_flag=True, help="Log what happens and show tracebacks."),
]


def _with_common(f):
    for opt in reversed(_common):
        f = opt(f)
    return f


@click.group(cls=_PatchByDefault, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_EPILOG)
@click.version_option(__version__, prog_name="onnxpoolfix")
def main():
    """Replace PyTorch's leftover adaptive pooling nodes (org.pytorch.aten) with exact standard ONNX.

    \b
      onnxpoolfix IN.onnx OUT.onnx         patch, check in onnxruntime, write OUT
      onnxpoolfix inspect IN.onnx          show what would be done, write nothing
      onnxpoolfix windows N M              show PyTorch's windows for N -> M, and the recipes'
    """
    try:  # SIGTERM unwinds like Ctrl-C, so the temporary output is removed (not possible off the main thread)
        signal.signal(signal.SIGTERM, _raise_interrupted)
    except ValueError:
        pass


@main.command("patch", epilog=EXIT_CODES_EPILOG)
@click.argument("src", metavar="IN", type=click.Path(dir_okay=True, path_type=Path))
@click.argument("dst", metavar="OUT", type=click.Path(dir_okay=True, path_type=Path))
@_with_common
@click.option("--no-check", is_flag=True, help="Skip the onnxruntime check against the numpy reference.")
@click.option("--check-shape", "check_shape", multiple=True, metavar="NAME:D0,D1,...",
              help="Run the check at these input shapes (repeat the flag for several runs).")
@click.option("--keep-input-shapes", is_flag=True, help="Save the --input-shape binding in OUT.")
@click.option("--save-as-external-data", is_flag=True,
              help="Write OUT's tensors of 1 KiB or more to OUT.data beside it (smaller ones stay inline).")
@click.option("--in-place", is_flag=True, help="Allow OUT to be IN (replaced atomically).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON (schema in onnxpoolfix/report.py).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the check's random inputs.")
@click.option("--optimize-exporter-pools", is_flag=True,
              help="Also rewrite the pools the exporter lowered itself (GlobalAveragePool, AveragePool with "
                   "adaptive windows) where an exact form is faster or a pyramid can read its input once.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def patch_cmd(src, dst, target, strategy, input_shape, verbose, no_check, check_shape, keep_input_shapes,
              save_as_external_data, in_place, report_path, seed, optimize_exporter_pools, quiet):
    """Patch IN and write OUT (only after the check passed)."""
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    try:
        from .api import patch
        from .io import check_input_model, has_external_data, load_model, preflight_output, save_model

        shapes = parse_shapes(input_shape, "--input-shape")
        checks = [parse_shapes((c,), "--check-shape") for c in check_shape]
        model = load_model(src)  # external weights stay on disk: nothing below reads them but onnxruntime
        check_input_model(model, src)
        preflight_output(dst, source_path=src, in_place=in_place)  # fail before the work, not after it
        if report_path is not None:
            _preflight_report(report_path, src, dst, model)
        external = has_external_data(model)
        result = patch(model, check=not no_check, strategy=strategy, target=target, input_shapes=shapes or None,
                       keep_input_shapes=keep_input_shapes, check_shapes=checks or None, inplace=True,
                       model_dir=str(Path(src).resolve().parent) if external else None, seed=seed,
                       optimize_exporter_pools=optimize_exporter_pools)
        # the report is written once OUT is complete but before it is renamed into place: a report that
        # cannot be written leaves no OUT, and a failed commit takes the report away again
        written: list[Path] = []

        def write_report(_tmp_model: Path) -> None:
            target = _write_report(report_path, result.report.to_json())
            if not target.special:  # a device or FIFO has taken it; there is nothing to take back
                written.append(target.path)

        try:
            save_model(result.model, dst, source_path=src, save_as_external_data=save_as_external_data,
                       in_place=in_place, before_commit=write_report if report_path else None)
        except BaseException:
            for p in written:
                p.unlink(missing_ok=True)
            raise
    except click.ClickException:
        raise
    except (KeyboardInterrupt, Interrupted) as err:
        _interrupted(getattr(err, "signum", signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
        report = getattr(err, "report", None)
        if report is not None and not quiet:
            click.echo(report.format_table(), err=True)
        _fail(err, verbose)
        return
    if not quiet:
        click.echo(result.report.format_table())
        click.echo(f"{result.report.summary()}; wrote {dst}")


def _preflight_report(report: Path, src: Path, dst: Path, model) -> None:
    """--report must name a file of its own: not IN or IN's external data (they would be overwritten with
    JSON), not OUT or OUT's data file (the model would be renamed over it), not a folder."""
    from .errors import OutputError
    from .io import _same_file, external_data_files
    from .outfile import resolve_output

    if resolve_output(report, "the report").special:  # written into (/dev/null, /dev/stdout): replaces nothing
        return
    for data in external_data_files(model, Path(src).resolve().parent):
        if _same_file(report, data):
            raise OutputError(f"--report {report}: is the input model's external data; refusing to overwrite it",
                              "give the report a file of its own, e.g. report.json")
    out_data = dst.with_name(dst.name + ".data")
    if report.absolute() == out_data.absolute() or _same_file(report, out_data):
        raise OutputError(f"--report {report}: is where OUT's external data may go",
                          "give the report a file of its own, e.g. report.json")

    if report.name in ("", ".", "..") or report.is_dir():
        raise OutputError(f"--report {report}: is not a file name", "give the report a file name, e.g. report.json")
    if _same_file(report, src):
        raise OutputError(f"--report {report}: is the input model itself; refusing to overwrite it",
                          "give the report a file of its own, e.g. report.json")
    if report.absolute() == dst.absolute() or _same_file(report, dst):
        raise OutputError(f"--report {report}: is OUT as well; the model would replace the report",
                          "give the report a file of its own, e.g. report.json")


def _write_report(path: Path, text: str):
    """The report goes where OUT would: through a link, into a device or FIFO (onnxpoolfix.outfile)."""
    from .errors import OutputError
    from .outfile import write_text

    try:
        return write_text(path, text + "\n")
    except OSError as e:
        raise OutputError(f"cannot write the report {path}: {e.strerror or e}",
                          "check that the report's folder exists and is writable; nothing was written") from None



# ---------------------------------------------------------------------------------------------------------
# onnxpoolfix windows N M [N2 M2 ...]: the windows of each axis, and the recipes (onnxpoolfix/window_view.py)
# ---------------------------------------------------------------------------------------------------------

def parse_size_pairs(values: tuple[str, ...]) -> list[tuple[int, int]]:
    """``N M [N2 M2 ...]`` as (input size, output size) pairs; a click usage error for anything else."""
    from .window_view import MAX_SIZE

    if not values:
        raise click.UsageError("give an input size and an output size per axis, e.g. `onnxpoolfix windows 11 4`")
    sizes = []
    for v in values:
        if not re.fullmatch(r"[+-]?[0-9]+", v):  # int() would also take "1_000", " 5" and non-ASCII digits
            if v.startswith("-") and len(v) > 1 and not v[1].isdigit():
                raise click.NoSuchOption(v)  # an option (ignore_unknown_options passed it on as a size)
            raise click.BadParameter(f"'{v}' is not an integer", param_hint="N M")
        size = int(v)
        if not 1 <= size <= MAX_SIZE:
            raise click.BadParameter(f"'{v}': sizes must be in [1, {MAX_SIZE}]", param_hint="N M")
        sizes.append(size)
    if len(sizes) % 2:
        raise click.UsageError(f"sizes come in pairs (N M per axis), got {len(sizes)} number"
                               f"{'s' if len(sizes) != 1 else ''}: {' '.join(values)}")
    return list(zip(sizes[::2], sizes[1::2]))


@main.command("windows", context_settings={"ignore_unknown_options": True})  # so that `11 -4` says why
@click.argument("sizes", nargs=-1, metavar="N M [N2 M2 ...]")
@click.option("--json", "as_json", is_flag=True,
              help="Print the windows as JSON (schema in onnxpoolfix/window_view.py).")
def windows_cmd(sizes, as_json):
    """Show PyTorch's adaptive pooling windows for N -> M on each axis, and the popular recipes beside them.

    \b
      onnxpoolfix windows 11 4          one axis, 11 -> 4
      onnxpoolfix windows 8 6 9 7       two axes (H 8 -> 6, W 9 -> 7)
    """
    from . import window_view

    pairs = parse_size_pairs(sizes)
    found = window_view.views(pairs)
    click.echo(window_view.to_json(found) if as_json else window_view.format_text(found))


from .inspect import inspect_cmd  # noqa: E402  (the command lives beside its logic)

main.command("inspect")(_with_common(inspect_cmd))


if __name__ == "__main__":  # pragma: no cover
    main()

"""``onnxpoolfix IN OUT``: load, patch (plan, apply, check), write OUT atomically, print the report."""
from __future__ import annotations

import logging
import signal
from pathlib import Path

import click

from .app import main
from .common import EXIT_CODES_EPILOG, Interrupted, fail, interrupted, parse_shapes, with_common


@main.command("patch", epilog=EXIT_CODES_EPILOG)
@click.argument("src", metavar="IN", type=click.Path(dir_okay=True, path_type=Path))
@click.argument("dst", metavar="OUT", type=click.Path(dir_okay=True, path_type=Path))
@with_common
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
def patch_cmd(src, dst, target, strategy, input_shape, traced_shape, allow_partial, verbose, no_check, check_shape,
              keep_input_shapes, save_as_external_data, in_place, report_path, seed, optimize_exporter_pools, quiet):
    """Patch IN and write OUT (only after the check passed)."""
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    try:
        from ..api import patch
        from ..io import check_input_model, has_external_data, load_model, preflight_output, save_model

        shapes = parse_shapes(input_shape, "--input-shape")
        traced = parse_shapes(traced_shape, "--traced-shape")
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
                       optimize_exporter_pools=optimize_exporter_pools, traced_shapes=traced or None,
                       allow_partial=allow_partial)
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
        interrupted(getattr(err, "signum", signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
        report = getattr(err, "report", None)
        if report is not None and not quiet:
            click.echo(report.format_table(), err=True)
        fail(err, verbose)
        return
    if not quiet:
        click.echo(result.report.format_table())
        click.echo(f"{result.report.summary()}; wrote {dst}")


def _preflight_report(report: Path, src: Path, dst: Path, model) -> None:
    """--report must name a file of its own: not IN or IN's external data (they would be overwritten with
    JSON), not OUT or OUT's data file (the model would be renamed over it), not a folder."""
    from ..errors import OutputError
    from ..io import external_data_files, same_file
    from ..io.outfile import resolve_output

    if resolve_output(report, "the report").special:  # written into (/dev/null, /dev/stdout): replaces nothing
        return
    for data in external_data_files(model, Path(src).resolve().parent):
        if same_file(report, data):
            raise OutputError(f"--report {report}: is the input model's external data; refusing to overwrite it",
                              "give the report a file of its own, e.g. report.json")
    out_data = dst.with_name(dst.name + ".data")
    if report.absolute() == out_data.absolute() or same_file(report, out_data):
        raise OutputError(f"--report {report}: is where OUT's external data may go",
                          "give the report a file of its own, e.g. report.json")

    if report.name in ("", ".", "..") or report.is_dir():
        raise OutputError(f"--report {report}: is not a file name", "give the report a file name, e.g. report.json")
    if same_file(report, src):
        raise OutputError(f"--report {report}: is the input model itself; refusing to overwrite it",
                          "give the report a file of its own, e.g. report.json")
    if report.absolute() == dst.absolute() or same_file(report, dst):
        raise OutputError(f"--report {report}: is OUT as well; the model would replace the report",
                          "give the report a file of its own, e.g. report.json")


def _write_report(path: Path, text: str):
    """The report goes where OUT would: through a link, into a device or FIFO (onnxpoolfix.io.outfile)."""
    from ..errors import OutputError
    from ..io.outfile import write_text

    try:
        return write_text(path, text + "\n")
    except OSError as e:
        raise OutputError(f"cannot write the report {path}: {e.strerror or e}",
                          "check that the report's folder exists and is writable; nothing was written") from None




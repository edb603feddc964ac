"""``onnxpoolfix IN OUT``: load, patch (plan, apply, check), write OUT atomically, print the report.

What a run prints: the table (a row per replaced node), the result line (what was replaced, the check's
verdict, where it went), then one line per note: warnings first, marked, on stderr, then the notes.
Where OUT and ``--report`` may write is :mod:`onnxpoolfix.io.outfile`'s rule."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from ..api import patch_as_written
from ..errors import exit_codes_epilog
from ..io import preflight_output, preflight_report, resolve_output, save_model
from ..io import write_report as write_report_file
from ..io.save import plan_save
from ..progress import phase
from ..report import Note, PatchReport
from ..words import CLI
from .app import main
from .args import Check, CheckChoice, Logging, Plan, PlanChoice, Save, SaveChoice, Seed, Verbosity, command
from .guard import reported
from .progress_line import shown


@command(main, "patch", Plan(), Check(), Save(), Seed(), Logging(quiet=True), epilog=exit_codes_epilog("patch"),
         arguments=(click.argument("src", metavar="IN", type=click.Path(dir_okay=True, path_type=Path)),
                    click.argument("dst", metavar="OUT", type=click.Path(dir_okay=True))))
def patch_cmd(src: Path, dst: str, plan: PlanChoice, check: CheckChoice, save: SaveChoice, seed: int,
              verbosity: Verbosity) -> None:
    """Patch IN and write OUT (only after the check passed). OUT and --report stay strings until their checks:
    a name ending in a separator names a folder, which ``Path`` would drop."""
    for path, what in ((dst, "OUT"), (save.report_path, "--report")):
        if path is not None and str(path) == "-":  # would be a file named '-', where stdout was meant
            raise click.BadParameter(
                "'-' is not standard output here (it would write a file named '-'): for standard output give "
                "/dev/stdout (with -q, so that the summary does not mix in), for a file named '-' its absolute path",
                param_hint=what)

    def show_failed_check(err: Exception) -> None:
        report = getattr(err, "report", None)
        if report is not None and not verbosity.quiet:
            click.echo(report.format_table(CLI), err=True)

    with reported(verbosity.verbose, before=show_failed_check), shown(verbosity.quiet):
        model, model_dir = plan.load(src)
        preflight_output(dst, source_path=src, in_place=save.in_place)  # fail before the work, not after it
        if save.report_path is not None:
            preflight_report(save.report_path, src, Path(dst), model)
        result = patch_as_written(model, check=check.check, keep_input_shapes=save.keep_input_shapes,
                                  check_shapes=check.check_shapes, inplace=True, model_dir=model_dir, seed=seed,
                                  input_checked=True, **asdict(plan))
        if model_dir is not None and not save.save_as_external_data:
            result.report.notes += shared_data(result.model, src, dst, in_place=save.in_place)
        # the report is written once OUT is complete but before it is renamed into place: a report that
        # cannot be written leaves no OUT, and a failed commit takes the report away again
        written: list[Path] = []

        def write_report(_tmp_model: Path) -> None:
            target = write_report_file(save.report_path, result.report.to_json(CLI))
            if not target.special:  # a device or FIFO has taken it; there is nothing to take back
                written.append(target.path)

        try:
            with phase("save", str(dst)):
                save_model(result.model, dst, source_path=src, save_as_external_data=save.save_as_external_data,
                           in_place=save.in_place, before_commit=write_report if save.report_path else None)
        except BaseException:
            for p in written:
                p.unlink(missing_ok=True)
            raise
    show(result.report, dst, quiet=verbosity.quiet)


def show(report: PatchReport, dst: str, quiet: bool = False) -> None:
    """The table, the result line, then a line per note (warnings first, marked, on stderr). ``quiet``
    (-q): the warnings only, since a warning (a partial fix, a size resting on --traced-shape alone) is what
    a script that silenced the rest still has to see."""
    warnings, notes = report.note_lines(CLI)
    if not quiet:
        click.echo(report.format_table(CLI))
        click.echo(f"{report.summary(CLI)}; wrote {dst}")
    for line in warnings:
        click.echo(line, err=True)
    if not quiet:
        for line in notes:
            click.echo(line)


def shared_data(model, src: Path, dst: str, *, in_place: bool) -> list[Note]:
    """OUT beside IN keeps IN's external data files rather than copying them (:func:`~onnxpoolfix.io.save_model`):
    a note naming them, since OUT moved alone does not load (review58 F6). None for IN patched in place."""
    target = resolve_output(dst)
    if target.special or in_place:
        return []
    plan = plan_save(model, target.path, source_path=src, save_as_external_data=False, in_place=False)
    if plan.mode != "keep":
        return []
    names = sorted({p.name for p in plan.source_files})
    return [Note(f"OUT reads its weights from IN's data file(s) {', '.join(names)} beside it (shared, not copied): "
                 "move them with OUT, or give --save-as-external-data for OUT's own", "shared-data", files=names)]

"""``onnxpoolfix inspect IN``: what a patch would do, and what blocks it; writes nothing
(the library side is :mod:`onnxpoolfix.inspection.model`)."""
from __future__ import annotations

import sys
from dataclasses import asdict

import click

from ..errors import exit_codes_epilog
from ..inspection.model import inspect_as_written
from ..inspection.windows import render_inspection
from ..words import CLI
from .app import main
from .args import InspectView, Logging, Plan, PlanChoice, Seed, Verbosity, ViewChoice, command
from .guard import reported
from .progress_line import shown


@command(main, "inspect", Plan(), InspectView(), Seed(), Logging(), epilog=exit_codes_epilog("inspect"),
         arguments=(click.argument("src", metavar="IN", type=click.Path(dir_okay=True)),))
def inspect_cmd(src: str, plan: PlanChoice, view: ViewChoice, seed: int, verbosity: Verbosity) -> None:
    """Show what a patch of IN would do, and what blocks it; write nothing."""
    with reported(verbosity.verbose), shown(verbosity.quiet):
        model, model_dir = plan.load(src)  # the same exits 3 and 2 as patch
        result = inspect_as_written(model, name=src, seed=seed, model_dir=model_dir, input_checked=True,
                                    **asdict(plan))
    if view.windows:  # said with the CLI's flags
        click.echo(render_inspection(result, as_json=view.as_json, verbose=verbosity.verbose, audience=CLI))
    else:  # -v also lists the lowerings that do not apply, with the reason (the JSON always has them)
        click.echo(result.to_json(CLI) if view.as_json else result.format_text(verbosity.verbose, CLI))
    sys.exit(result.exit_code)

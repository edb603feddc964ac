"""``onnxpoolfix inspect IN``: what a patch would do, and what blocks it; writes nothing
(the library side is :mod:`onnxpoolfix.inspection.model`)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import exit_codes_epilog
from ..frontends.input_check import check_input_model
from ..inspection.model import inspect_as_written
from ..inspection.windows import render_inspection
from ..io import has_external_data, load_model
from ..progress import phase
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
        with phase("load", src):
            model = load_model(src)
        check_input_model(model, src)  # the same exit 3 as patch for a model the ONNX checker rejects
        plan.check_against(model)  # the same exit 2 as patch for an --input-shape that does not fit
        result = inspect_as_written(model, target=plan.target, strategy=plan.strategy, input_shapes=plan.input_shapes,
                                    name=src, optimize_exporter_pools=plan.optimize_exporter_pools, seed=seed,
                                    traced_shapes=plan.traced_shapes, allow_partial=plan.allow_partial,
                                    model_dir=str(Path(src).resolve().parent) if has_external_data(model) else None,
                                    input_checked=True, **plan.cost_arguments)
    if view.windows:  # said with the CLI's flags
        click.echo(render_inspection(result, as_json=view.as_json, verbose=verbosity.verbose, audience=CLI))
    else:  # -v also lists the lowerings that do not apply, with the reason (the JSON always has them)
        click.echo(result.to_json(CLI) if view.as_json else result.format_text(verbosity.verbose, CLI))
    sys.exit(result.exit_code)

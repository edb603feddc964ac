"""``onnxpoolfix inspect IN``: what a patch would do, and what blocks it; writes nothing
(the library side is :mod:`onnxpoolfix.inspection.model`)."""
from __future__ import annotations

import logging
import signal
import sys

import click

from ..inspection.model import inspect_model
from .app import main
from .common import Interrupted, fail, interrupted, parse_shapes, with_common


@main.command("inspect")
@with_common
@click.argument("src", metavar="IN", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True,
              help="Print the inspection as JSON (schema in onnxpoolfix/inspection_report.py).")
@click.option("--optimize-exporter-pools", is_flag=True,
              help="Also show the exporter's own adaptive pools, as the patch option of that name plans them.")
@click.option("--windows", "show_windows", is_flag=True,
              help="Also draw PyTorch's windows of every pooled axis, beside the popular recipes' "
                   "(as `onnxpoolfix windows N M`).")
def inspect_cmd(src, target, strategy, input_shape, traced_shape, allow_partial, verbose, as_json,
                optimize_exporter_pools, show_windows):
    """Show what a patch of IN would do, and what blocks it; write nothing.

    \b
    Exit codes: 0 a patch would succeed (with --target tensorrt: and the patched
    model would be TensorRT-clean), 3 IN is not a valid model, 4 some node is
    blocked, 7 (--target tensorrt) TensorRT's parser would reject some node.
    """
    from ..io import check_input_model, load_model

    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    shapes = parse_shapes(input_shape, "--input-shape")
    traced = parse_shapes(traced_shape, "--traced-shape")
    try:
        model = load_model(src)
        check_input_model(model, src)  # the same exit 3 as patch for a model the ONNX checker rejects
        result = inspect_model(model, target=target, strategy=strategy, input_shapes=shapes or None, name=src,
                               optimize_exporter_pools=optimize_exporter_pools, traced_shapes=traced or None,
                               allow_partial=allow_partial)
    except click.ClickException:
        raise
    except (KeyboardInterrupt, Interrupted) as err:
        interrupted(getattr(err, "signum", signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
        fail(err, verbose)
        return
    if show_windows:
        from ..inspection.windows import render_inspection

        click.echo(render_inspection(result, as_json=as_json))
    else:
        click.echo(result.to_json() if as_json else result.format_text())
    sys.exit(result.exit_code)

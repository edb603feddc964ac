"""``onnxpoolfix calibrate``: measure the planner's cost constants on this machine and write them to a file
that ``--costs FILE`` then names (the measuring is :mod:`onnxpoolfix.lowering.calibration`'s)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import OutputError
from ..io import resolve_output
from .app import main
from .guard import reported


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxpoolfix" / "costs.json"


@main.command("calibrate")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="File to write (default: ~/.cache/onnxpoolfix/costs.json).")
@click.option("--threads", type=click.IntRange(0), default=0, show_default=True,
              help="onnxruntime intra-op threads to measure with (0: onnxruntime's default).")
def calibrate_cmd(out, threads):
    """Time a few onnxruntime probes and write the planner's cost constants measured here.

    The planner uses them only where --costs names the file (the default stays the built-in,
    deterministic constants); each node's `why` then names the file.
    """
    from ..lowering import calibration

    if out == "-":  # as patch's OUT: a file named '-' where stdout was meant
        raise click.BadParameter("'-' is not standard output here (it would write a file named '-'): give "
                                 "/dev/stdout, or for a file named '-' its absolute path", param_hint="--out")
    with reported(False):
        if out is not None:
            resolve_output(out, "the costs")  # a name ending in a separator names a folder (Path would drop it)
        path = Path(out) if out else default_path()
        if out is None:  # the default cache folder is made; a folder named with --out must exist, as for OUT
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.parent.is_dir():
            raise OutputError(f"cannot write {path}: its folder {path.parent} does not exist",
                              "create the folder first, or choose another file with --out")
        found = calibration.measure(threads)
        try:
            calibration.save(found, path, threads)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror or e}", "choose another file with --out") from e
    for name in calibration.MEASURED:
        built = calibration.BUILT_IN[name]
        click.echo(f"{name:13s} {found[name]:10.3g}  (built-in {built:.3g}, {found[name] / built:.2f}x)")
    click.echo(f"wrote {path}; use it with: onnxpoolfix IN OUT --costs {path}")

"""``onnxpoolfix windows N M [N2 M2 ...]``: the windows of each axis, and the recipes
(the drawing and its JSON are :mod:`onnxpoolfix.inspection.window_view`'s)."""
from __future__ import annotations

import re

import click

from ..inspection import window_view
from ..inspection.window_view import MAX_SIZE
from .app import main

MAX_AXES = 3  # AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d


def parse_size_pairs(values: tuple[str, ...]) -> list[tuple[int, int]]:
    """``N M [N2 M2 ...]`` as (input size, output size) pairs; a click usage error for anything else."""
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
    if len(sizes) > 2 * MAX_AXES:  # torch pools 1 to 3 axes; more would only multiply the work (and --json)
        raise click.UsageError(f"adaptive pooling has 1 to {MAX_AXES} axes (N M per axis), got {len(sizes) // 2} "
                               "pairs")
    return list(zip(sizes[::2], sizes[1::2]))


@main.command("windows", context_settings={"ignore_unknown_options": True})  # so that `11 -4` says why
@click.argument("sizes", nargs=-1, metavar="N M [N2 M2 ...]")
@click.option("--json", "as_json", is_flag=True,
              help="Print the windows as JSON (schema in onnxpoolfix/inspection/window_view.py).")
def windows_cmd(sizes, as_json):
    """Show PyTorch's adaptive pooling windows for N -> M on each axis, and the popular recipes beside them.

    \b
      onnxpoolfix windows 11 4          one axis, 11 -> 4
      onnxpoolfix windows 8 6 9 7       two axes (H 8 -> 6, W 9 -> 7)
    """
    pairs = parse_size_pairs(sizes)
    big = [(n, m) for n, m in pairs if max(n, m) > window_view.MAX_JSON_SIZE]
    if as_json and big:  # every window listed: beyond this, megabytes no one reads
        n, m = big[0]
        raise click.UsageError(
            f"--json lists every window, up to {window_view.MAX_JSON_SIZE} per axis; {n} -> {m} has more. "
            f"Drop --json for the summary (any size), or in Python: onnxpoolfix.windows.windows({n}, {m})")
    found = window_view.views(pairs)
    click.echo(window_view.to_json(found) if as_json else window_view.format_text(found))

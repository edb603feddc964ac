"""The option groups the commands share (as Polygraphy's argument groups): a group declares its flags,
parses them and builds the one object a command reads, so no flag is declared twice and ``patch`` and
``inspect`` cannot drift apart.

    command         groups (in --help order)
    patch IN OUT    Plan, Check, Save, Seed, Logging(quiet=True)
    inspect IN      Plan, InspectView, Seed, Logging

How to add a flag:

- to a group: add its ``click.option`` to the group's ``options``, read it in the group's ``parse`` (pop it
  from ``values``) into a new field of the record the group builds, and use that field in the command;
  every command with the group gets the flag, with one help text;
- for one command only: the same in that command's own group (``Save`` is ``patch``'s, ``InspectView``
  ``inspect``'s), or a new :class:`ArgGroup` subclass added to the command's ``@command(...)`` line.

``parse`` raises ``click.BadParameter`` for a value that is wrong on its own (exit 2, click's usage message);
a value wrong only for the model (an ``--input-shape`` naming no input) is checked once the model is loaded
(:meth:`PlanChoice.load`: :class:`~onnxpoolfix.errors.ArgumentError`, also exit 2).
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click
import onnx

from ..api import MAX_DIM, TARGETS
from ..frontends.input_check import check_input_model
from ..graph.shapes import validate_shapes
from ..io import has_external_data, load_model
from ..lowering.calibration import CostModel
from ..plan.planner import AUTO, STRATEGIES
from ..progress import phase


class ArgGroup:
    """A set of flags: ``options`` declares them, ``parse`` takes their values out of the command's
    keyword arguments and returns what the command uses."""

    name: str  # the keyword the command receives the built record as
    options: tuple[Callable, ...] = ()

    def parse(self, values: dict[str, Any]) -> Any:
        raise NotImplementedError


def command(group: click.Group, name: str, *arg_groups: ArgGroup, arguments: tuple[Callable, ...] = (),
            **settings) -> Callable:
    """Register ``run`` as ``group``'s command ``name``: its ``arguments`` (click.argument), then each group's
    options. ``run`` is called with the positional arguments' values as keywords, plus one keyword per
    group, named by the group's ``name`` (``plan=PlanChoice(...)``)."""
    def register(run: Callable) -> click.Command:
        @functools.wraps(run)
        def callback(**values):
            built = {g.name: g.parse(values) for g in arg_groups}
            return run(**values, **built)

        f = callback
        for decorate in reversed([*arguments, *(opt for g in arg_groups for opt in g.options)]):
            f = decorate(f)
        return group.command(name, **settings)(f)
    return register


#: one NAME:DIMS entry of a shape flag, and the spaces after it (the shortest name whose dims end at a space)
_SHAPE_ENTRY = re.compile(r"((?P<name>\S.*?):(?P<dims>[^\s:]+))(?:\s+|$)")


def parse_shapes(values: tuple[str, ...], flag: str) -> dict[str, list[int]]:
    """``NAME:D0,D1,...`` entries (repeatable, or several in one value separated by spaces). A name may hold
    spaces and colons (``my input:1,3,9,9``, ``input:0:1,3,9,9``): an entry ends at the dims before a space."""
    shapes: dict[str, list[int]] = {}
    for value in values:
        pos = len(value) - len(value.lstrip())
        while pos < len(value):
            found = _SHAPE_ENTRY.match(value, pos)
            if found is None:
                raise click.BadParameter(f"'{value[pos:]}' is not NAME:D0,D1,... (e.g. x:1,3,224,224)",
                                         param_hint=flag)
            pos = found.end()
            item, name, dims = found.group(1), found.group("name"), found.group("dims")
            try:
                parsed = [int(d) for d in dims.split(",")]
            except ValueError:
                raise click.BadParameter(f"'{item}': dims must be integers", param_hint=flag) from None
            if any(d < 1 for d in parsed):
                raise click.BadParameter(f"'{item}': dims must be >= 1", param_hint=flag)
            if any(d > MAX_DIM for d in parsed):
                raise click.BadParameter(f"'{item}': dims must be <= {MAX_DIM}", param_hint=flag)
            if name in shapes:  # silently keeping the last would bind (or check) a size the user did not mean
                raise click.BadParameter(f"'{name}' is given twice ({name}:{','.join(map(str, shapes[name]))} and "
                                         f"{item}): give each input once", param_hint=flag)
            shapes[name] = parsed
    return shapes


# ----------------------------------------------------------------------------------------- Plan


@dataclass(frozen=True)
class PlanChoice:
    """What to plan, as ``patch``/``inspect_model`` take it: its fields are their keyword arguments
    (``**asdict(plan)``)."""

    target: str
    strategy: str
    input_shapes: dict[str, list[int]] | None
    optimize_exporter_pools: bool
    traced_shapes: dict[str, list[int]] | None = None  # a dynamo export's traced size (binds nothing)
    allow_partial: bool = False  # write the fix even where a dynamo region stays frozen
    costs: str | None = None  # a file `onnxpoolfix calibrate` wrote
    tune: bool = False
    tune_threads: int | None = None

    def load(self, src) -> tuple[onnx.ModelProto, str | None]:
        """IN as ``patch`` and ``inspect`` start from: loaded, checked (exit 3 where the ONNX checker rejects it),
        with ``--input-shape`` / ``--traced-shape`` checked against it (a name that is no input, a wrong rank, a
        fixed dim changed) and ``--costs`` read (:class:`~onnxpoolfix.errors.ArgumentError`, exit 2), before
        any work. Returns the model and the folder of its external data (None: it has none)."""
        with phase("load", str(src)):
            model = load_model(src)  # external weights stay on disk: nothing below reads them but onnxruntime
        check_input_model(model, src)
        CostModel.of(self.costs, self.tune, self.tune_threads)
        validate_shapes(model, self.input_shapes, self.traced_shapes)
        return model, str(Path(src).resolve().parent) if has_external_data(model) else None


class Plan(ArgGroup):
    name = "plan"
    options = (
        click.option("--target", type=click.Choice(TARGETS), default="onnxruntime", show_default=True,
                     help="Restrict the emitted ops to what this runtime accepts."),
        click.option("--strategy", type=click.Choice(STRATEGIES), default=AUTO, show_default=True,
                     help="Force one lowering for every node (for comparisons); 'auto' picks the cheapest exact "
                          "one."),
        click.option("--input-shape", "input_shape", multiple=True, metavar="NAME:D0,D1,...",
                     help="Bind an input's shape (repeatable; or several, space-separated, in one value)."),
        click.option("--optimize-exporter-pools", is_flag=True,
                     help="Also plan the pools the exporter lowered itself (GlobalAveragePool, AveragePool with "
                          "adaptive windows): each is replaced where an exact form is faster or a pyramid can "
                          "read its input once, kept otherwise."),
        click.option("--traced-shape", "traced_shape", multiple=True, metavar="NAME:D0,D1,...",
                     help="The input shape a dynamo export was traced at (the export call's example input): its "
                          "decomposed pools are proven and frozen ones sized there; binds nothing (OUT keeps its "
                          "symbolic dims)."),
        click.option("--allow-partial", is_flag=True,
                     help="Write the fix even where a dynamo region stays frozen at the traced size (OUT then "
                          "right only where the report's 'partial' says); refused by default."),
        click.option("--costs", metavar="FILE",
                     help="Rank the lowerings with the cost constants `onnxpoolfix calibrate` measured on this "
                          "machine (default: the built-in ones)."),
        click.option("--tune", is_flag=True,
                     help="Time every exact lowering of each static node in onnxruntime and keep the fastest "
                          "(slower; the choice may differ between runs on a busy machine)."),
        click.option("--tune-threads", type=click.IntRange(min=1), metavar="N",
                     help="With --tune: the intra-op threads the model will run with (default: onnxruntime's)."),
    )

    def parse(self, values):
        shapes = parse_shapes(values.pop("input_shape"), "--input-shape")
        traced = parse_shapes(values.pop("traced_shape"), "--traced-shape")
        return PlanChoice(values.pop("target"), values.pop("strategy"), shapes or None,
                          values.pop("optimize_exporter_pools"), traced or None, values.pop("allow_partial"),
                          values.pop("costs"), values.pop("tune"), values.pop("tune_threads"))


# ----------------------------------------------------------------------------------------- Check (patch)


@dataclass(frozen=True)
class CheckChoice:
    check: bool
    check_shapes: list[dict[str, list[int]]] | None


class Check(ArgGroup):
    name = "check"
    options = (
        click.option("--no-check", is_flag=True, help="Skip the onnxruntime check against the numpy reference."),
        click.option("--check-shape", "check_shape", multiple=True, metavar="NAME:D0,D1,...",
                     help="Run the check at these input shapes (repeat the flag for several runs)."),
    )

    def parse(self, values):
        checks = [parse_shapes((c,), "--check-shape") for c in values.pop("check_shape")]
        return CheckChoice(not values.pop("no_check"), checks or None)


class Seed(ArgGroup):
    """``--seed``: every random input the tool draws (the check's, the dynamo front end's proof). Builds the
    seed itself."""

    name = "seed"
    options = (
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of every random input drawn (the check's, and the proof of each dynamo region)."),
    )

    def parse(self, values):
        return values.pop("seed")


# ----------------------------------------------------------------------------------------- Save (patch)


@dataclass(frozen=True)
class SaveChoice:
    keep_input_shapes: bool
    save_as_external_data: bool
    in_place: bool
    report_path: str | None  # a string until checked (io.outfile.resolve_output: a trailing separator)


class Save(ArgGroup):
    name = "save"
    options = (
        click.option("--keep-input-shapes", is_flag=True, help="Save the --input-shape binding in OUT."),
        click.option("--save-as-external-data", is_flag=True,
                     help="Write OUT's tensors of 1 KiB or more to OUT.data beside it (smaller ones stay inline)."),
        click.option("--in-place", is_flag=True, help="Allow OUT to be IN (replaced atomically)."),
        click.option("--report", "report_path", type=click.Path(),
                     help="Also write the report as JSON (schema in onnxpoolfix/report.py)."),
    )

    def parse(self, values):
        return SaveChoice(values.pop("keep_input_shapes"), values.pop("save_as_external_data"),
                          values.pop("in_place"), values.pop("report_path"))


# ----------------------------------------------------------------------------------------- InspectView


@dataclass(frozen=True)
class ViewChoice:
    as_json: bool
    windows: bool


class InspectView(ArgGroup):
    name = "view"
    options = (
        click.option("--json", "as_json", is_flag=True,
                     help="Print the inspection as JSON (schema in onnxpoolfix/inspection/report.py)."),
        click.option("--windows", "show_windows", is_flag=True,
                     help="Also draw PyTorch's windows of every pooled axis, beside the popular recipes' "
                          "(as `onnxpoolfix windows N M`)."),
    )

    def parse(self, values):
        return ViewChoice(values.pop("as_json"), values.pop("show_windows"))


# ----------------------------------------------------------------------------------------- Logging


@dataclass(frozen=True)
class Verbosity:
    verbose: bool  # debug logs, and tracebacks with errors
    quiet: bool  # nothing printed on success but warnings


class Logging(ArgGroup):
    """``-v`` (every command) and ``-q`` (where ``quiet``): the one logging setup."""

    name = "verbosity"

    def __init__(self, quiet: bool = False):
        opts = [click.option("-v", "--verbose", is_flag=True, help="Log what happens and show tracebacks.")]
        if quiet:
            opts.append(click.option("-q", "--quiet", is_flag=True,
                                     help="Print nothing on success but warnings (on stderr)."))
        self.options = tuple(opts)

    def parse(self, values):
        verbose = values.pop("verbose")
        if verbose:
            logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
        return Verbosity(verbose, values.pop("quiet", False))

"""How a message names what its reader can change, written once and spelled for each reader.

A message (an error, its hint, a note, a plan's ``why``) that names a flag or an argument holds a
*reference* to it: :func:`ref` (``f"skip the check with {NO_CHECK}"``), a marker no other text contains.
:func:`render` spells each reference for its reader, and touches nothing else in the text:

==================  ===========================================  =======================================
reader              ``NO_CHECK``                                 ``INPUT_SHAPES_FORM``
==================  ===========================================  =======================================
``cli``             ``--no-check``                               ``--input-shape NAME:D0,D1,...``
``api``             ``check=False``                              ``input_shapes={'NAME': [D0, D1, ...]}``
``export``          ``check=False``                              how ``onnxpoolfix.export`` says it:
                                                                 static sizes in ``dynamic_shapes``
==================  ===========================================  =======================================

The library renders for ``api`` (``str(err)``, what :func:`onnxpoolfix.patch` returns), the CLI for
``cli`` (its output, its JSON report), :func:`onnxpoolfix.export` for ``export`` (``export-torchscript``:
the TorchScript exporter's ``dynamic_axes``, which has no ranges). A leaf module.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

CLI, API, EXPORT, EXPORT_TORCHSCRIPT = "cli", "api", "export", "export-torchscript"
AUDIENCES = (CLI, API, EXPORT, EXPORT_TORCHSCRIPT)

_MARK, _ARG = "\x1e", "\x1f"  # ASCII record/unit separators: in no message, shape or name we print


@dataclass(frozen=True)
class Knob:
    """One thing a reader can change, as each reader spells it (``{arg}``: the reference's argument;
    ``export`` None: as ``api``; ``export_torchscript`` None: as ``export``)."""

    cli: str
    api: str
    export: str | None = None
    export_torchscript: str | None = None

    def spelled(self, audience: str, arg: str) -> str:
        export = self.api if self.export is None else self.export
        text = {CLI: self.cli, API: self.api, EXPORT: export,
                EXPORT_TORCHSCRIPT: export if self.export_torchscript is None else self.export_torchscript}[audience]
        return text.format(arg=arg)


_STATIC = "static sizes (leave those dims out of dynamic_shapes / dynamic_axes)"
_RANGES = ("Dim ranges (min/max in dynamic_shapes), or multiples (16 * Dim('h') for a model that takes multiples "
           "of 16), that keep to sizes the model takes")
_RANGES_TS = "static sizes for those dims (leave them out of dynamic_axes)"

KNOBS: dict[str, Knob] = {
    "input_shapes": Knob("--input-shape", "input_shapes"),
    "input_shapes_form": Knob("--input-shape NAME:D0,D1,...", "input_shapes={{'NAME': [D0, D1, ...]}}", _STATIC),
    # "bind the {arg} with ...": export() cannot bind; it exports the dims static
    "bind": Knob("bind the {arg} with --input-shape NAME:D0,D1,...",
                 "bind the {arg} with input_shapes={{'NAME': [D0, D1, ...]}}",
                 "export those dims static (leave them out of dynamic_shapes / dynamic_axes)"),
    "check_shapes": Knob("--check-shape", "check_shapes"),
    "check_shapes_form": Knob("--check-shape NAME:D0,D1,...", "check_shapes=[{{'NAME': [D0, D1, ...]}}]",
                              _RANGES, _RANGES_TS),
    "check_shapes_repeatable": Knob("--check-shape NAME:D0,D1,... (repeatable)",
                                    "check_shapes=[{{'NAME': [D0, D1, ...]}}, ...]", _RANGES, _RANGES_TS),
    "check_or_input_shapes": Knob("--check-shape NAME:D0,D1,... or --input-shape",
                                  "check_shapes=[{{'NAME': [D0, D1, ...]}}] or input_shapes", _RANGES, _RANGES_TS),
    "traced_shapes": Knob("--traced-shape", "traced_shapes"),
    "traced_shapes_form": Knob("--traced-shape NAME:D0,D1,...", "traced_shapes={{'NAME': [D0, D1, ...]}}"),
    "allow_partial": Knob("--allow-partial", "allow_partial=True"),
    "no_check": Knob("--no-check", "check=False"),
    "strategy": Knob("--strategy", "strategy="),
    "drop_strategy": Knob("drop --strategy", "drop strategy= (or strategy='auto')"),
    "forced_by_strategy": Knob("forced by --strategy", "forced by the strategy argument"),
    "target": Knob("--target {arg}", "target='{arg}'"),
    "in_place": Knob("--in-place", "inplace=True"),
    "verbose": Knob("(rerun with -v)", "(with logging at DEBUG level)"),
    "input_names": Knob("use the name of a graph input (onnxpoolfix inspect IN lists them)",
                        "use the name of a graph input (the model's graph.input)"),
    "costs": Knob("--costs", "costs="),
    "tune_threads": Knob("--tune-threads", "tune_threads="),
    # "...; or export ...": said to who wrote the file some other way (export() compared with torch already)
    "or_export_compared": Knob(*(["; or export with onnxpoolfix.export, which compares with torch at other sizes"] * 2),
                               ""),
    # what to do where onnxpoolfix.export's file differs from torch: the TorchScript exporter's own pools may be why
    "report_it": Knob("report it", "report it", None, "try dynamo=True (the TorchScript exporter lowers some pools "
                      "wrongly itself: an unbatched input pooled to 1), else report it"),
    "convert_opset": Knob(*(["convert the model to opset {arg} or newer first "
                             "(onnx.version_converter.convert_version(model, {arg}))"] * 2),
                          "export with opset_version={arg} or later"),
}


def ref(key: str, arg: object = "") -> str:
    """The reference to ``KNOBS[key]`` (with ``arg`` where its spelling takes one) to write into a message."""
    if key not in KNOBS:
        raise KeyError(f"no knob {key!r}")
    return f"{_MARK}{key}{_ARG}{arg}{_MARK}"


def knob_of(reference: str) -> str:
    """The key of the knob a reference names (what an error's ``data["argument"]`` holds)."""
    return reference.split(_MARK)[1].partition(_ARG)[0]


INPUT_SHAPES, INPUT_SHAPES_FORM = ref("input_shapes"), ref("input_shapes_form")
CHECK_SHAPES, CHECK_SHAPES_FORM = ref("check_shapes"), ref("check_shapes_form")
CHECK_SHAPES_REPEATABLE = ref("check_shapes_repeatable")
TRACED_SHAPES, TRACED_SHAPES_FORM = ref("traced_shapes"), ref("traced_shapes_form")
NO_CHECK, ALLOW_PARTIAL, IN_PLACE, VERBOSE = ref("no_check"), ref("allow_partial"), ref("in_place"), ref("verbose")
STRATEGY, DROP_STRATEGY, FORCED_BY_STRATEGY = ref("strategy"), ref("drop_strategy"), ref("forced_by_strategy")
CHECK_OR_INPUT_SHAPES = ref("check_or_input_shapes")
BIND_INPUT_SIZES, BIND_SYMBOLIC_DIMS = ref("bind", "input sizes"), ref("bind", "symbolic input dims")
TARGET_ONNXRUNTIME = ref("target", "onnxruntime")
TARGET_PORTABLE, TARGET_TENSORRT = ref("target", "portable"), ref("target", "tensorrt")
OR_EXPORT_COMPARED = ref("or_export_compared")
REPORT_IT = ref("report_it")
#: a reference as :func:`ref` writes it: a knob's key, then its argument
_REFERENCE = re.compile(f"{_MARK}({'|'.join(map(re.escape, KNOBS))}){_ARG}([^{_MARK}]*){_MARK}")


def render(text, audience: str = API):
    """``text`` with every reference spelled for ``audience``; a str subclass with ``with_text`` (a note
    record, a reason) stays one. Text without references comes back as it is."""
    if not isinstance(text, str) or _MARK not in text:
        return text
    # a separator that came with a name from the model is no reference: its text stays as it is
    out = _REFERENCE.sub(lambda m: KNOBS[m[1]].spelled(audience, m[2]), text)
    return text.with_text(out) if hasattr(text, "with_text") else out


def render_all(value, audience: str = API):
    """``value`` with every text in it rendered (:func:`render`): strings, lists, tuples, dicts and
    dataclass records (copied), at any depth; anything else as it is."""
    if isinstance(value, str):
        return render(value, audience)
    if isinstance(value, list):
        return [render_all(v, audience) for v in value]
    if isinstance(value, tuple):
        items = [render_all(v, audience) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: render_all(v, audience) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: render_all(getattr(value, f.name), audience) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value

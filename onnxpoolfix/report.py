"""What a patch did: the printed table (a row per node), the result line (:meth:`PatchReport.summary`) and
the notes, one a line, warnings first (:meth:`PatchReport.note_lines`), and the same content as JSON
(``--report``; ``check_note`` is the notes joined).

Texts name what the reader can change by reference (:mod:`onnxpoolfix.words`): every method that says
something takes the ``audience`` to say it to (the API's arguments by default, the CLI's flags for the CLI).

JSON schema (``schema_version`` 2; 1 had no ``notes``)::

    {
      "schema_version": 2,
      "tool": "onnxpoolfix", "version": "0.1.0",
      "status": "patched" | "nothing-to-patch",
      "checked": bool,                 # the onnxruntime check ran
      "check_passed": bool | null,     # null when not checked
      "check_note": str,               # e.g. which input sizes were used, or why the check was skipped
      "opset": int, "target": "onnxruntime" | "tensorrt" | "portable",
      "nodes": [{
        "name": str, "op": str, "kind": "avg" | "max",
        "encoding": "aten-op" | "ATen-attr" | "standard" | "dynamo",   # standard: an exporter pool
                                       # (--optimize-exporter-pools); dynamo: a decomposition the dynamo
                                       # exporter wrote (onnxpoolfix/frontends/dynamo/front_end.py)
        "evidence": str,               # dynamo: why it is adaptive pooling ("metadata: <module class>",
                                       # "stack trace: <source line>", "structure"); "" otherwise
        "input_shape": [int | str | null], "output_shape": [int | str | null],   # str = symbolic dim
        "lowering": str, "why": str, "ops": [str],                               # emitted op types
                                       # lowering "pyramid": planned with the other pools of its input
        "indices": "computed" | "dropped" | "none",
        "max_error": float | null, "tolerance": float | null,     # null when not checked (max_error also
                                                                   # when infinite: indices differ)
        "checked_shapes": [[int]],                                               # input shapes checked
        "rests_on_traced_shape": bool  # a frozen pool sized from the given traced size alone (nothing in the
                                       # graph confirms it): OUT rests on the user's word
      }],
      "totals": {"nodes": int, "max_error": float | null, "by_lowering": {str: int}},
      "suspects": [{"result": str, "evidence": str, "why": str,   # suspected adaptive pooling, left as it
                    "frozen": bool,    # is; frozen: a dynamo decomposition stuck at the traced size
                    "right_at": str,   # where it is right as it is ("" unless frozen)
                    "remedy": "traced-shape" | "export" | "stripped"}],  # what would decide it
      "partial": [str],  # allow_partial / --allow-partial: per region left frozen, where OUT is right;
                         # empty: OUT is exact at every size it accepts (check_passed covers the replaced nodes)
      "windows_proven_to": int | null,  # the dynamic lowering's window-building subgraphs ran alone and matched
                         # PyTorch's windows for every input length up to this (the notes say how); null: no
                         # dynamic lowering, or not checked
      "notes": [{"severity": "note" | "warning",   # what the run has to say, in order (check_note joins
                 "code": str,                      # their texts); code: what it is about ("not-checked",
                 "text": str, "data": {}}]          # "nothing-to-patch", "checked-sizes", ...; "other")
    }
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field

from .reason import Reason
from .version import __version__
from .words import API, NO_CHECK, render, render_all

SCHEMA_VERSION = 2

class Note(Reason):
    """One thing a run has to say, as a record (a :class:`~onnxpoolfix.reason.Reason`'s text, ``code`` and
    ``data``) with a ``severity`` (``note`` or ``warning``): its ``code`` says what it is about, for code to act
    on, and a report's notes still read, join and compare as text. The JSON report writes each as
    ``{"severity", "code", "text", "data"}``."""

    severity = "note"

    def record(self) -> dict:
        return {"severity": self.severity, "code": self.code, "text": str(self), "data": self.data}


class WarningNote(Note):
    """A note the reader must not miss (a region left frozen, wrong at other sizes; a node left that cannot
    run; the input shapes kept bound in OUT): printed before the other notes, marked ``warning:``, on stderr."""

    severity = "warning"


def as_note(text: str) -> Note:
    return text if isinstance(text, Note) else Note(text)


#: what the notes end with where the check did not run: the result line says it (not repeated as a note)
NOTHING_TO_PATCH = Note("nothing to patch", "nothing-to-patch")
NOT_CHECKED = Note(NO_CHECK, "not-checked")
_SAID_BY_THE_RESULT_LINE = {NOTHING_TO_PATCH.code, NOT_CHECKED.code}

# the words of the note a frozen pool sized from the given traced size alone gets (frontends/dynamo/front_end.py); the
# check's hint looks for them
RESTS_ON_TRACED = "rests on the given traced size alone"
#: what no dynamo file shows: a pool's size set in forward from the input's (review79: ``self.pool.output_size =
#: (x.size(2) // 2, ...)`` writes the same file as ``nn.AdaptiveAvgPool2d((6, 3))``); a traced size then freezes it
OWN_SIZE_UNSEEN = ("a size assigned in forward from the input's, pool.output_size = x.size(2) // 2, writes the same "
                   "file as a fixed one, and given a traced size OUT pools to the traced output size at every input "
                   "size; onnxpoolfix.export is exact either way")


def note_lines(notes, audience: str = API) -> tuple[list[str], list[str]]:
    """(warnings, notes) as a run prints them, one a line: ``warning: ...`` first, then ``note: ...``."""
    notes = [as_note(n) for n in notes]
    warnings = [f"warning: {render(n, audience)}" for n in notes if n.severity == "warning"]
    plain = [f"note: {render(n, audience)}" for n in notes
             if n.severity != "warning" and n.code not in _SAID_BY_THE_RESULT_LINE]
    return warnings, plain


@dataclass
class NodeReport:
    name: str
    op: str
    kind: str
    encoding: str
    input_shape: list
    output_shape: list
    lowering: str
    why: str
    ops: list[str]
    indices: str = "none"
    max_error: float | None = None
    tolerance: float | None = None
    checked_shapes: list[list[int]] = field(default_factory=list)
    evidence: str = ""
    # its output size was read at the given --traced-shape alone: nothing in the graph confirms it
    rests_on_traced_shape: bool = False


@dataclass
class PatchReport:
    nodes: list[NodeReport] = field(default_factory=list)
    checked: bool = False
    check_passed: bool | None = None
    # what the run has to say, in the order said (the front ends', the planner's, the check's, the comparison
    # with torch's); WarningNote marks the warnings. The JSON's check_note is all of them joined
    notes: list[str] = field(default_factory=list)
    opset: int = 0
    target: str = "onnxruntime"
    suspects: list[dict] = field(default_factory=list)  # onnxpoolfix.frontends.base.Suspect, as dicts
    partial: list[str] = field(default_factory=list)  # per region a partial fix left frozen: where OUT is right
    windows_proven_to: int | None = None  # the dynamic lowering's windows proven for every length up to this

    @property
    def check_note(self) -> str:
        """Every note in one string (the JSON's ``check_note``): which input sizes were checked, why the
        check was skipped, what a front end left, ..."""
        return "; ".join(self.notes)

    def note_lines(self, audience: str = API) -> tuple[list[str], list[str]]:
        """(warnings, notes) as the command line prints them after :meth:`summary`, one a line."""
        return note_lines(self.notes, audience)

    @property
    def status(self) -> str:
        return "patched" if self.nodes else "nothing-to-patch"

    @property
    def max_error(self) -> float | None:
        errs = [n.max_error for n in self.nodes if n.max_error is not None]
        return max(errs) if errs else None

    def to_dict(self, audience: str = API) -> dict:
        """The JSON report's content, its texts in ``audience``'s words."""
        content = {
            "schema_version": SCHEMA_VERSION,
            "tool": "onnxpoolfix",
            "version": __version__,
            "status": self.status,
            "checked": self.checked,
            "check_passed": self.check_passed,
            "check_note": self.check_note,
            "opset": self.opset,
            "target": self.target,
            "nodes": [asdict(n) for n in self.nodes],
            "totals": {"nodes": len(self.nodes), "max_error": self.max_error,
                       "by_lowering": Counter(n.lowering for n in self.nodes)},
            "suspects": self.suspects,
            "partial": self.partial,
            "windows_proven_to": self.windows_proven_to,
            "notes": [as_note(n).record() for n in self.notes],
        }
        return render_all(content, audience)

    def to_json(self, audience: str = API) -> str:
        """Strict JSON: a non-finite error (indices that differ are an infinite error) is written as null,
        with ``check_passed`` false beside it."""
        return json.dumps(_finite_or_null(self.to_dict(audience)), indent=2, allow_nan=False)

    def format_table(self, audience: str = API) -> str:
        if not self.nodes:
            return "no leftover adaptive pooling nodes: nothing to patch"
        rows = [("node", "op", "in -> out", "lowering", "max err", "why")]
        for n in self.nodes:
            shape = f"{format_shape(n.input_shape)} -> {format_shape(n.output_shape)}"
            err = "-" if n.max_error is None else f"{n.max_error:.1e}" if n.max_error else "0"
            op = n.op + (" +idx" if n.indices == "computed" else "")
            rows.append((n.name, op, shape, n.lowering, err, render(n.why, audience)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self, audience: str = API) -> str:
        """The result line: what was replaced and the check's verdict (the notes are :meth:`note_lines`); a
        partial fix (``allow_partial``) says so first, and so do pools sized from the given traced size alone."""
        resting = sum(n.rests_on_traced_shape for n in self.nodes)
        return render(("PARTIAL fix, OUT is not right at every size: " if self.partial else "") + (
            f"OUT rests on the given traced size for {resting} pool{'s' if resting != 1 else ''} (nothing in the "
            "graph confirms it): " if resting else "") + self._summary(), audience)

    def _summary(self) -> str:
        if not self.nodes:
            return NOTHING_TO_PATCH
        n = len(self.nodes)
        what = f"replaced {n} node{'s' if n != 1 else ''}"
        if not self.checked:
            return f"{what}; not checked ({NOT_CHECKED})"
        verdict = "passed" if self.check_passed else "FAILED"
        err = self.max_error
        return f"{what}; onnxruntime check {verdict}" + (f" (max error {err:.1e})" if err is not None else "")


def format_shape(dims) -> str:
    """Dims as the patch's table writes them (:func:`dim_label`: onnx's ``unk__N`` is '?')."""
    return "x".join(dim_label(d) for d in dims)


def dim_label(d) -> str:
    """A dim for people: its value, its symbolic name, or '?' (onnx names unnamed dims ``unk__N``)."""
    if d is None or (isinstance(d, str) and d.startswith("unk__")):
        return "?"
    return str(d)


def time_label(seconds: float) -> str:
    """An estimated or measured time for people: in us below 10 ms, else in ms."""
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-2 else f"{seconds * 1e3:.1f} ms"


def _finite_or_null(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(v) for v in value]
    return value

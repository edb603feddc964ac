"""What ``onnxpoolfix inspect`` found, as records, as text and as JSON (the library side is
:mod:`onnxpoolfix.inspection.model`).

JSON (``--json``, ``schema_version`` 2; in 1 the notes were strings)::

    {
      "schema_version": 2, "tool": "onnxpoolfix", "version": str,
      "model": str | null, "opset": int, "target": str, "strategy": str,
      "would_patch": bool,            # every node has an exact lowering (the onnxruntime check is not run)
      "blocker": str | null, "hint": str | null,   # model-level (e.g. a non-constant output size)
      "notes": [{"severity": "note" | "warning", "code": str, "text": str, "data": {}}],  # as patch's report
      "nodes": [{
        "name": str, "op": str, "kind": "avg" | "max", "encoding": str, "dtype": str,
        "input_shape": [int | str | null], "output_shape": [int | str | null],
        "axes": [str],                                   # e.g. "8->5 non-uniform"
        "candidates": [{"name": str, "cost_s": float | null, "reason": str | null}],
        "chosen": str | null, "why": str | null, "ops": [str],
        "blocker": str | null, "hint": str | null, "warnings": [str],
        "evidence": str,                                 # dynamo: why it is adaptive pooling; "" otherwise
        "body": str | null                               # in an If/Loop/Scan body: its path, outermost
                                                         # first ("Loop '/Loop' body > If '/If' then_branch");
                                                         # null: the top-level graph
      }],                                                # the top-level graph's nodes first, then the bodies'
      "suspects": [{"result": str, "evidence": str, "why": str, "frozen": bool,  # suspected and left; frozen:
                    "right_at": str}],             # right only at some sizes, "right_at" which
      "tensorrt": null | {
        "linted": "patched" | "original",
        "clean": bool,                                   # no error-severity finding
        "ignored_leftovers": [str],                      # leftover nodes not linted as such
        "findings": [{"node": str, "op_type": str, "domain": str, "severity": str, "reason": str,
                      "emitted": bool}]                  # emitted: a node onnxpoolfix would add
      },
      "exit_code": int
    }
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .. import errors
from ..report import as_note, format_shape, note_lines, time_label
from ..version import __version__
from ..words import API, render, render_all

SCHEMA_VERSION = 2
# the verdict's exit codes, from the one table (onnxpoolfix.errors.EXIT_CODES)
EXIT_OK = errors.EXIT_OK
EXIT_BLOCKED = errors.UnsupportedNodeError.exit_code
EXIT_TENSORRT = errors.TensorRTRejectionError.exit_code


@dataclass
class CandidateInfo:
    name: str
    cost_s: float | None  # estimated seconds (lowering/cost.py); None when it does not apply
    reason: str | None  # why it does not apply


@dataclass
class NodeInspection:
    name: str
    op: str
    kind: str
    encoding: str
    dtype: str = ""
    input_shape: list = field(default_factory=list)
    output_shape: list = field(default_factory=list)
    axes: list[str] = field(default_factory=list)
    candidates: list[CandidateInfo] = field(default_factory=list)
    chosen: str | None = None
    why: str | None = None
    ops: list[str] = field(default_factory=list)
    blocker: str | None = None
    hint: str | None = None
    warnings: list[str] = field(default_factory=list)
    evidence: str = ""  # the dynamo front end's: metadata / stack trace / structure
    body: str | None = None  # the If/Loop/Scan body it is in (frontends.bodies.describe_path); None: top level


@dataclass
class TensorRTLint:
    linted: str  # "patched" | "original"
    findings: list[dict]
    ignored_leftovers: list[str]

    @property
    def clean(self) -> bool:
        return not any(f["severity"] == "error" for f in self.findings)


@dataclass
class Inspection:
    target: str
    strategy: str
    opset: int = 0
    model: str | None = None
    nodes: list[NodeInspection] = field(default_factory=list)
    blocker: str | None = None
    hint: str | None = None
    blocker_exit_code: int = EXIT_BLOCKED
    notes: list[str] = field(default_factory=list)
    tensorrt: TensorRTLint | None = None
    suspects: list[dict] = field(default_factory=list)  # onnxpoolfix.frontends.base.Suspect, as dicts

    @property
    def would_patch(self) -> bool:
        return self.blocker is None and not any(n.blocker for n in self.nodes)

    @property
    def exit_code(self) -> int:
        if self.blocker is not None:
            return self.blocker_exit_code
        if not self.would_patch:
            return EXIT_BLOCKED
        if self.tensorrt is not None and not self.tensorrt.clean:
            return EXIT_TENSORRT
        return EXIT_OK

    def to_dict(self) -> dict:
        lint = self.tensorrt
        trt = None if lint is None else {"linted": lint.linted, "clean": lint.clean,
                                         "ignored_leftovers": lint.ignored_leftovers, "findings": lint.findings}
        return {
            "schema_version": SCHEMA_VERSION, "tool": "onnxpoolfix", "version": __version__,
            "model": self.model, "opset": self.opset, "target": self.target, "strategy": self.strategy,
            "would_patch": self.would_patch, "blocker": self.blocker, "hint": self.hint,
            "notes": [as_note(n).record() for n in self.notes],
            "nodes": [asdict(n) for n in self.nodes], "suspects": self.suspects, "tensorrt": trt,
            "exit_code": self.exit_code,
        }

    def to_json(self, audience: str = API) -> str:
        """The JSON view, its texts in ``audience``'s words (:mod:`onnxpoolfix.words`)."""
        return json.dumps(render_all(self.to_dict(), audience), indent=2)

    def format_text(self, verbose: bool = False, audience: str = API) -> str:
        """The text ``inspect`` prints. Per node: the chosen lowering and the other exact ones with their costs;
        the lowerings that do not apply (and why) only with ``verbose``, or where none applies (then their
        reasons are the explanation). :meth:`to_dict` keeps every candidate either way."""
        head = f"{self.model}: " if self.model else ""
        lines = [f"{head}opset {self.opset}, target {self.target}"
                 + (f", strategy {self.strategy}" if self.strategy != "auto" else "")]
        exporter = sum(node.encoding == "standard" for node in self.nodes)
        dynamo = sum(node.encoding == "dynamo" for node in self.nodes)
        n = len(self.nodes) - exporter - dynamo
        if dynamo:  # regions the dynamo exporter decomposed (onnxpoolfix/frontends/dynamo/front_end.py)
            lines.append(f"{_count(dynamo, 'adaptive pooling region')} decomposed by the dynamo exporter, proven "
                         "and replaceable")
        pools = f"{_count(exporter, 'exporter pool')} with adaptive windows"
        if self.blocker is None and not self.nodes:
            lines.append("no leftover adaptive pooling nodes: nothing to patch")
        elif n or not exporter and not dynamo:
            inside = sum(node.body is not None for node in self.nodes)
            lines.append(_count(n, "leftover adaptive pooling node")
                         + (f" ({inside} inside If/Loop/Scan bodies)" if inside else "")
                         + (f", {pools}" if exporter else ""))
        elif exporter:  # (dynamo regions alone: their line says it all)
            lines.append(f"no leftover adaptive pooling nodes; {pools}")
        for node in self.nodes:
            lines += ["", *_format_node(node, verbose)]
        if self.blocker is not None:
            lines += ["", f"BLOCKED: {self.blocker}"]
            if self.hint:
                lines.append(f"  hint: {self.hint}")
        warnings, notes = note_lines(self.notes, audience)  # warnings first, marked
        lines.extend(warnings + notes)
        if self.tensorrt is not None:
            lines += ["", *_format_tensorrt(self.tensorrt)]
        lines += ["", self.verdict()]
        return render("\n".join(lines), audience)

    def verdict(self) -> str:
        if self.blocker is not None:
            return "verdict: a patch would fail (nothing was written)"
        blocked = [n for n in self.nodes if n.blocker]
        if blocked:
            return f"verdict: {len(blocked)} of {_count(len(self.nodes), 'node')} blocked: a patch would fail " \
                "(nothing was written)"
        # inspect plans; it does not run the patch's onnxruntime check (which may still refuse: too large, exit 8)
        what = "nothing to patch" if not self.nodes else "a patch would succeed, its onnxruntime check aside"
        if self.tensorrt is not None:
            errors = sum(f["severity"] == "error" for f in self.tensorrt.findings)
            what += ("; the patched model would be TensorRT-clean" if self.tensorrt.clean else
                     f"; the patched model would NOT be TensorRT-clean ({_count(errors, 'node error')})")
        return f"verdict: {what} (nothing was written)"


def _count(k: int, word: str) -> str:
    """``k word``, the word in the plural unless ``k`` is 1."""
    return f"{k} {word}{'s' if k != 1 else ''}"


def _format_node(node: NodeInspection, verbose: bool = False) -> list[str]:
    head = f"{node.name}  {node.op}"
    if node.dtype:
        head += f"  {node.dtype}"
    if node.input_shape:
        head += f"  {format_shape(node.input_shape)} -> {format_shape(node.output_shape)}"
    if node.axes:
        head += f"  ({', '.join(node.axes)})"
    lines = [head]
    if node.body:
        lines.append(f"  inside: {node.body}")
    if node.evidence:
        lines.append(f"  evidence: {node.evidence}")
    if node.candidates:
        shown = node.candidates
        if not verbose and any(c.reason is None for c in node.candidates):
            shown = [c for c in node.candidates if c.reason is None]
        width = max(len(c.name) for c in shown)
        for c in shown:
            mark = "*" if c.name == node.chosen else " "
            detail = c.reason if c.reason is not None else f"chosen: {node.why}" if c.name == node.chosen else "applies"
            cost = "-" if c.cost_s is None else time_label(c.cost_s)
            lines.append(f"  {mark} {c.name.ljust(width)}  {cost.rjust(8)}  {detail}")
        hidden = len(node.candidates) - len(shown)
        if hidden:
            lines.append(f"    ({hidden} lowering{'s' if hidden != 1 else ''} that do{'es' if hidden == 1 else ''} "
                         "not apply: -v lists them with the reason)")
    if node.chosen:
        lines.append(f"  -> {node.chosen}: {', '.join(node.ops)}")
    for w in node.warnings:
        lines.append(f"  warning: {w}")
    if node.blocker:
        lines.append(f"  BLOCKED: {node.blocker}")
        if node.hint:
            lines.append(f"    hint: {node.hint}")
    return lines


def _format_tensorrt(lint: TensorRTLint) -> list[str]:
    errors = [f for f in lint.findings if f["severity"] == "error"]
    warnings = [f for f in lint.findings if f["severity"] != "error"]
    what = "the patched model (built in memory)" if lint.linted == "patched" else \
        "the original model (the patch is blocked, so its replacements could not be built)"
    lines = [f"TensorRT lint of {what}, whole graph: {_count(len(errors), 'error')}, "
             f"{_count(len(warnings), 'warning')}"]
    for f in errors + warnings:
        where = f"{f['domain']}::{f['op_type']}" if f["domain"] else f["op_type"] or "model"
        tag = " [emitted by onnxpoolfix]" if f["emitted"] else ""
        lines.append(f"  {f['severity']}: {where} {f['node']!r}: {f['reason']}{tag}")
    if lint.ignored_leftovers:
        k = len(lint.ignored_leftovers)
        lines.append(f"  ({_count(k, 'leftover adaptive pooling node')} not linted as such: "
                     f"the patch replaces {'them' if k != 1 else 'it'}"
                     + ("; the replacements were linted)" if lint.linted == "patched" else ")"))
    return lines

"""``onnxpoolfix inspect``: what a patch would do, and what blocks it, without writing anything.

For every leftover adaptive pooling node: its shapes, every lowering with its estimated cost or the reason
it does not apply, the one the planner would choose and why, and any blocker (a symbolic pooled axis no
lowering handles, a non-constant output size, an unsupported dtype, ...). With ``target="tensorrt"`` it
is also a TensorRT-readiness lint of the WHOLE graph (:func:`onnxpoolfix.tensorrt.lint_tensorrt`): when
every node can be lowered, the patched model is built in memory and linted (so the replacements are
linted too); otherwise the original graph is linted, minus the leftover nodes the patch would replace.

Exit codes of the command (see :attr:`Inspection.exit_code`): 0 a patch would succeed (and, for
``--target tensorrt``, the patched model would be TensorRT-clean), 3 IN is not a valid model, 4 some node
is blocked, 7 (``--target tensorrt`` only) every node can be lowered but the patched graph would still
hold nodes TensorRT's parser rejects.

JSON (``--json``, ``schema_version`` 1)::

    {
      "schema_version": 1, "tool": "onnxpoolfix", "version": str,
      "model": str | null, "opset": int, "target": str, "strategy": str,
      "would_patch": bool,            # every node has an exact lowering (the onnxruntime check is not run)
      "blocker": str | null, "hint": str | null,   # model-level (e.g. a non-constant output size)
      "notes": [str],
      "nodes": [{
        "name": str, "op": str, "kind": "avg" | "max", "encoding": str, "dtype": str,
        "input_shape": [int | str | null], "output_shape": [int | str | null],
        "axes": [str],                                   # e.g. "8->5 non-uniform"
        "candidates": [{"name": str, "cost_s": float | null, "reason": str | null}],
        "chosen": str | null, "why": str | null, "ops": [str],
        "blocker": str | null, "hint": str | null, "warnings": [str]
      }],
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
import logging
import sys
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import click
import onnx
from onnx import TensorProto

from . import __version__
from .errors import PoolFixError, UnsupportedNodeError

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
EXIT_OK, EXIT_INVALID, EXIT_BLOCKED, EXIT_TENSORRT = 0, 3, 4, 7


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
        trt = None
        if self.tensorrt is not None:
            trt = {"linted": self.tensorrt.linted, "clean": self.tensorrt.clean,
                   "ignored_leftovers": self.tensorrt.ignored_leftovers, "findings": self.tensorrt.findings}
        return {
            "schema_version": SCHEMA_VERSION, "tool": "onnxpoolfix", "version": __version__,
            "model": self.model, "opset": self.opset, "target": self.target, "strategy": self.strategy,
            "would_patch": self.would_patch, "blocker": self.blocker, "hint": self.hint, "notes": self.notes,
            "nodes": [asdict(n) for n in self.nodes], "tensorrt": trt, "exit_code": self.exit_code,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format_text(self) -> str:
        lines = []
        head = f"{self.model}: " if self.model else ""
        lines.append(f"{head}opset {self.opset}, target {self.target}"
                     + (f", strategy {self.strategy}" if self.strategy != "auto" else ""))
        exporter = sum(node.encoding == "standard" for node in self.nodes)
        dynamo = sum(node.encoding == "dynamo" for node in self.nodes)
        n = len(self.nodes) - exporter - dynamo
        if dynamo:  # regions the dynamo exporter decomposed (onnxpoolfix.decomposed)
            lines.append(f"{dynamo} adaptive pooling region{'s' if dynamo != 1 else ''} decomposed by the dynamo "
                         "exporter, proven and replaceable")
        if dynamo and not n and not exporter:
            pass
        elif self.blocker is None and not self.nodes:
            lines.append("no leftover adaptive pooling nodes: nothing to patch")
        elif n or not exporter:
            lines.append(f"{n} leftover adaptive pooling node{'s' if n != 1 else ''}"
                         + (f", {exporter} exporter pool{'s' if exporter != 1 else ''} with adaptive windows"
                            if exporter else ""))
        else:
            lines.append(f"no leftover adaptive pooling nodes; {exporter} exporter pool{'s' if exporter != 1 else ''} "
                         "with adaptive windows")
        for node in self.nodes:
            lines.append("")
            lines.extend(_format_node(node))
        if self.blocker is not None:
            lines.append("")
            lines.append(f"BLOCKED: {self.blocker}")
            if self.hint:
                lines.append(f"  hint: {self.hint}")
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.tensorrt is not None:
            lines.append("")
            lines.extend(_format_tensorrt(self.tensorrt))
        lines.append("")
        lines.append(self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        if self.blocker is not None:
            return "verdict: a patch would fail (nothing was written)"
        blocked = [n for n in self.nodes if n.blocker]
        if blocked:
            return (f"verdict: {len(blocked)} of {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} "
                    f"blocked: a patch would fail (nothing was written)")
        what = "nothing to patch" if not self.nodes else "a patch would succeed"
        if self.tensorrt is not None:
            errors = sum(f["severity"] == "error" for f in self.tensorrt.findings)
            what += ("; the patched model would be TensorRT-clean" if self.tensorrt.clean else
                     f"; the patched model would NOT be TensorRT-clean ({errors} node error"
                     f"{'s' if errors != 1 else ''})")
        return f"verdict: {what} (nothing was written)"


def _shape(dims) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def _cost(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-2 else f"{seconds * 1e3:.1f} ms"


def _format_node(node: NodeInspection) -> list[str]:
    head = f"{node.name}  {node.op}"
    if node.dtype:
        head += f"  {node.dtype}"
    if node.input_shape:
        head += f"  {_shape(node.input_shape)} -> {_shape(node.output_shape)}"
    if node.axes:
        head += f"  ({', '.join(node.axes)})"
    lines = [head]
    if node.candidates:
        width = max(len(c.name) for c in node.candidates)
        for c in node.candidates:
            mark = "*" if c.name == node.chosen else " "
            if c.reason is None:
                detail = f"chosen: {node.why}" if c.name == node.chosen else "applies"
            else:
                detail = c.reason
            lines.append(f"  {mark} {c.name.ljust(width)}  {_cost(c.cost_s).rjust(8)}  {detail}")
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
    lines = [f"TensorRT lint of {what}, whole graph: {len(errors)} error{'s' if len(errors) != 1 else ''}, "
             f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}"]
    for f in errors + warnings:
        where = f"{f['domain']}::{f['op_type']}" if f["domain"] else f["op_type"] or "model"
        tag = " [emitted by onnxpoolfix]" if f["emitted"] else ""
        lines.append(f"  {f['severity']}: {where} {f['node']!r}: {f['reason']}{tag}")
    if lint.ignored_leftovers:
        k = len(lint.ignored_leftovers)
        lines.append(f"  ({k} leftover adaptive pooling node{'s' if k != 1 else ''} not linted as such: "
                     f"the patch replaces {'them' if k != 1 else 'it'}"
                     + ("; the replacements were linted)" if lint.linted == "patched" else ")"))
    return lines


# ---------------------------------------------------------------------------------------------------------
# The library entry point
# ---------------------------------------------------------------------------------------------------------

def inspect_model(model: onnx.ModelProto, *, target: str = "onnxruntime", strategy: str = "auto",
                  input_shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None,
                  optimize_exporter_pools: bool = False) -> Inspection:
    """What :func:`onnxpoolfix.patch` would do to ``model`` with these arguments, without doing it.

    Never raises for a model-level problem it can describe (non-constant output size, uninferable shape,
    unsupported dtype, bad ``input_shapes``): that becomes :attr:`Inspection.blocker`. ``model`` is not
    modified. The onnxruntime check is not run.
    """
    from .api import TARGETS, inline_functions_holding_leftovers, _specs, shape_map
    from .errors import InvalidModelError
    from .find import find_pool_nodes, is_pool_leftover
    from .planner import STRATEGIES, candidates, plan
    from .shapes import model_opset

    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"inspect_model() takes an onnx.ModelProto, not {type(model).__name__}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    input_shapes = shape_map(input_shapes, "input_shapes")
    result = Inspection(target=target, strategy=strategy, model=name, opset=model_opset(model))
    if not model.HasField("graph"):  # as patch() says it
        err = InvalidModelError("the model has no graph", "the file is not a complete ONNX model; re-export it")
        result.blocker, result.hint, result.blocker_exit_code = str(err), err.hint, err.exit_code
        return result
    model, inlined = inline_functions_holding_leftovers(model)  # a new model when it inlines anything
    if inlined:
        result.notes.append(f"the local function(s) {', '.join(inlined)} hold leftovers: the patch inlines them")
    leftovers = [n for n in model.graph.node if is_pool_leftover(n)]
    try:
        nodes = find_pool_nodes(model.graph, model_opset(model))
        if nodes:
            work = model
            if input_shapes:  # _specs binds the inputs in place
                work = onnx.ModelProto()
                work.CopyFrom(model)
            specs, notes = _specs(work, nodes, opset=result.opset, target=target, input_shapes=input_shapes,
                                  keep_input_shapes=False)
            result.notes.extend(notes)
        else:
            specs = []
    except PoolFixError as err:
        result.blocker, result.hint, result.blocker_exit_code = str(err), err.hint, err.exit_code
        result.nodes = [_bare(n, i) for i, n in enumerate(model.graph.node) if is_pool_leftover(n)]
        specs = []

    plans = []  # each node's plan (None where blocked), for the grouping below
    for spec in specs:
        info, p = _inspect_spec(spec, strategy, candidates, plan)
        result.nodes.append(info)
        plans.append(p)
    if result.blocker is None:  # what the dynamo exporter decomposed: proven here as the patch proves it
        from .decomposed import find_decomposed_pools

        found = find_decomposed_pools(model, opset=result.opset, target=target, input_shapes=input_shapes,
                                      taken=specs)
        for spec in found.specs:
            info, p = _inspect_spec(spec, strategy, candidates, plan)
            result.nodes.append(info)
            plans.append(p)
        result.notes.extend(found.notes() + [x for x in [found.frozen_note()] if x])
    if optimize_exporter_pools and result.blocker is None:
        plans += _inspect_exporter_pools(model, specs, result, candidates, plan)
    if strategy == "auto":
        _inspect_groups(plans, result)

    if target == "tensorrt":
        result.tensorrt = _lint(model, result, leftovers, strategy=strategy, input_shapes=input_shapes)
    return result


def _inspect_exporter_pools(model, specs, result: Inspection, candidates, plan) -> list:
    """The exporter's own pools that --optimize-exporter-pools would plan (see exporter_pools.py)."""
    from .api import _exporter_pools
    from .exporter_pools import keeps_its_op

    plans = []
    for s in _exporter_pools(model, specs, opset=result.opset, target=result.target):
        info, p = _inspect_spec(s, "auto", candidates, plan)
        if info.chosen and keeps_its_op(s, info.chosen):
            info.why = f"kept as it is unless it joins a pyramid ({info.why})"
        result.nodes.append(info)
        plans.append(p)
    return plans


def _inspect_groups(plans, result: Inspection) -> None:
    """Nodes that pool the same tensor and would be planned together (onnxpoolfix/pyramid.py)."""
    from .pyramid import NAME, plan_groups

    if any(p is None for p in plans):
        return  # the patch stops at the blocked node anyway
    groups, _ = plan_groups(plans)
    by_node = {p.spec.node.index: info for p, info in zip(plans, result.nodes)}  # (names may repeat)
    for g in groups:
        for lv in g.levels:
            info = by_node[lv.spec.node.index]
            info.chosen, info.why = NAME, g.why(lv)
        result.notes.append(f"{len(g.levels)} nodes pool '{g.levels[0].spec.node.input}': planned together, "
                            f"the input read once (est. {g.cost * 1e6:.0f} us vs {g.separate_cost * 1e6:.0f} us)")


def _bare(node: onnx.NodeProto, index: int) -> NodeInspection:
    from .find import _aten_operator

    op = _aten_operator(node) or node.op_type
    return NodeInspection(name=node.name or f"{op}_{index}", op=op, kind="max" if "_max_" in op else "avg",
                          encoding="ATen-attr" if node.op_type == "ATen" else "aten-op")


def _inspect_spec(spec, strategy, candidates, plan):
    """The node's inspection, and its plan (None where no lowering applies)."""
    from .lowering.base import axis_windows

    s = spec
    info = NodeInspection(name=s.node.name, op=s.node.op, kind=s.kind, encoding=s.node.encoding, dtype=s.dtype_name,
                          input_shape=list(s.input_shape), output_shape=list(s.output_shape))
    if s.static:
        info.axes = [a.describe() for a in axis_windows(s)]
    else:
        info.axes = [f"{'?' if n is None else n}->{'?' if m is None else m}"
                     + (" symbolic" if not isinstance(n, int) else "") for n, m in zip(s.in_sizes, s.out_sizes)]
    info.candidates = [CandidateInfo(c.name, c.cost, c.reason) for c in candidates(s)]
    if s.dtype == TensorProto.DOUBLE and s.target == "tensorrt":
        info.warnings.append("float64: TensorRT computes it in float32 (clamped to +-FLT_MAX), so the result "
                             "is exact to float32, not float64")
    try:
        p = plan(s, strategy)
    except UnsupportedNodeError as err:
        info.blocker, info.hint = _node_blocker(s, info, strategy, err)
        return info, None
    info.chosen, info.why = p.lowering.name, p.why
    info.ops = [op for step in p.lowering.steps(s) for op in step.ops]
    return info, p


def _node_blocker(spec, info: NodeInspection, strategy: str, err: UnsupportedNodeError) -> tuple[str, str | None]:
    if strategy != "auto":
        return str(err), err.hint
    if not spec.static:
        dims = _shape(spec.input_shape)
        return (f"a pooled axis is symbolic (input {dims}) and no lowering handles symbolic sizes",
                "bind the input's shape with --input-shape NAME:D0,D1,... (the patched model then keeps that "
                "shape), or re-export with static spatial dims")
    if spec.target == "tensorrt":
        from dataclasses import replace

        from .planner import plan

        try:
            other = plan(replace(spec, target="onnxruntime"))
        except UnsupportedNodeError:
            other = None
        if other is not None:
            return ("no exact lowering uses only ops TensorRT's ONNX parser accepts",
                    f"--target onnxruntime would use '{other.lowering.name}'")
    return "no exact lowering applies (reasons above)", err.hint


def _lint(model: onnx.ModelProto, result: Inspection, leftovers, *, strategy, input_shapes) -> TensorRTLint:
    from .api import patch
    from .tensorrt import lint_tensorrt

    leftover_labels = {n.name or (f"-> {n.output[0]}" if n.output else "") for n in leftovers}
    original_labels = {n.name or (f"-> {n.output[0]}" if n.output else "") for n in model.graph.node}
    linted, target_model = "original", model
    if result.would_patch and leftovers:
        try:
            target_model = patch(model, check=False, strategy=strategy, target="tensorrt",
                                 input_shapes=input_shapes).model
            linted = "patched"
        except PoolFixError as err:  # should not happen once every node was planned; say so, lint the original
            logger.debug("in-memory patch failed: %s", err)
            result.notes.append(f"the in-memory patch failed ({err}); linted the original graph")
    findings = []
    for f in lint_tensorrt(target_model):
        if linted == "original" and f.node in leftover_labels and f.domain in ("org.pytorch.aten", "", "ai.onnx") \
                and f.op_type in {n.op_type for n in leftovers}:
            continue
        findings.append({"node": f.node, "op_type": f.op_type, "domain": f.domain, "severity": f.severity,
                         "reason": f.reason, "emitted": linted == "patched" and f.node not in original_labels
                         and f.node != "<model>"})
    return TensorRTLint(linted, findings, sorted(leftover_labels))


# ---------------------------------------------------------------------------------------------------------
# The command (registered in cli.py, which adds the common --target/--strategy/--input-shape/-v options)
# ---------------------------------------------------------------------------------------------------------

@click.argument("src", metavar="IN", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the inspection as JSON (schema in onnxpoolfix/inspect.py).")
@click.option("--optimize-exporter-pools", is_flag=True,
              help="Also show the exporter's own adaptive pools, as the patch option of that name plans them.")
def inspect_cmd(src, target, strategy, input_shape, verbose, as_json, optimize_exporter_pools):
    """Show what a patch of IN would do, and what blocks it; write nothing.

    \b
    Exit codes: 0 a patch would succeed (with --target tensorrt: and the patched
    model would be TensorRT-clean), 3 IN is not a valid model, 4 some node is
    blocked, 7 (--target tensorrt) TensorRT's parser would reject some node.
    """
    import signal

    from .cli import Interrupted, _fail, _interrupted, parse_shapes
    from .io import check_input_model, load_model

    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    shapes = parse_shapes(input_shape, "--input-shape")
    try:
        model = load_model(src)
        check_input_model(model, src)  # the same exit 3 as patch for a model the ONNX checker rejects
        result = inspect_model(model, target=target, strategy=strategy, input_shapes=shapes or None, name=src,
                               optimize_exporter_pools=optimize_exporter_pools)
    except click.ClickException:
        raise
    except (KeyboardInterrupt, Interrupted) as err:
        _interrupted(getattr(err, "signum", signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
        _fail(err, verbose)
        return
    click.echo(result.to_json() if as_json else result.format_text())
    sys.exit(result.exit_code)

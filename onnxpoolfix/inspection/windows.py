"""``onnxpoolfix inspect IN --windows``: the windows of every pooled axis of every inspected node, drawn by
:mod:`onnxpoolfix.inspection.window_view` (its docstring has the JSON schema), inserted before the verdict."""
from __future__ import annotations

import json

from ..words import API, render, render_all
from .window_view import MAX_SIZE, SYMBOLIC, axis_view, format_axis


def _node_axes(node) -> list[tuple[int, object, object]]:
    """(absolute axis, input size, output size) of each pooled axis of an inspected node."""
    k = len(node.axes)  # one entry per pooled axis, static or symbolic
    if not k or not node.input_shape or len(node.input_shape) != len(node.output_shape):
        return []
    first = len(node.input_shape) - k
    return [(first + j, node.input_shape[first + j], node.output_shape[first + j]) for j in range(k)]


def _axis_entry(axis, n, m):
    """An AxisView for a static axis within MAX_SIZE, else the reason none is drawn."""
    if not (isinstance(n, int) and isinstance(m, int) and not isinstance(n, bool) and n >= 1 and m >= 1):
        return SYMBOLIC
    if n > MAX_SIZE or m > MAX_SIZE:
        return f"{n} -> {m}: larger than {MAX_SIZE}, not drawn"
    return axis_view(n, m, axis, lowering=False)


def inspection_windows_text(inspection) -> str:
    """The windows of every pooled axis of every node of an :class:`onnxpoolfix.inspection.report.Inspection`."""
    lines = ["windows of each pooled axis (torch's, and what the recipes would use):"]
    if not inspection.nodes:
        lines.append("  (no nodes)")
    for node in inspection.nodes:
        lines += ["", f"{node.name}  {node.op}" + (f"  (inside {node.body})" if node.body else "")]
        axes = _node_axes(node)
        if not axes:
            lines.append("  shapes unknown: no windows to show")
        drawn = False  # a blank line around each drawn axis, none between one-line ones
        for j, (axis, n, m) in enumerate(axes):
            entry = _axis_entry(axis, n, m)
            if j and (drawn or not isinstance(entry, str)):
                lines.append("")
            drawn = not isinstance(entry, str)
            if isinstance(entry, str):
                lines.append(f"  axis {axis}: {'?' if n is None else n} -> {'?' if m is None else m}  {entry}")
            else:
                lines.extend(format_axis(entry, indent="  "))
    return "\n".join(lines)


def inspection_windows_dicts(inspection) -> list[list[dict]]:
    """Per node, per pooled axis: the AxisView dict, or ``{"axis", "in_size", "out_size", "note"}``."""
    out = []
    for node in inspection.nodes:
        per_node = []
        for axis, n, m in _node_axes(node):
            entry = _axis_entry(axis, n, m)
            per_node.append({"axis": axis, "in_size": n, "out_size": m, "note": entry}
                            if isinstance(entry, str) else entry.to_dict())
        out.append(per_node)
    return out


def render_inspection(inspection, *, as_json: bool, verbose: bool = False, audience: str = API) -> str:
    """``inspect --windows``: the inspection, the windows, the verdict (JSON: a ``windows`` list in every node)."""
    if as_json:
        d = render_all(inspection.to_dict(), audience)
        for node, wins in zip(d["nodes"], inspection_windows_dicts(inspection)):
            node["windows"] = wins
        return json.dumps(d, indent=2)
    text, verdict = inspection.format_text(verbose, audience), render(inspection.verdict(), audience)
    head = text[:-len(verdict)].rstrip("\n") if text.endswith(verdict) else text
    windows_text = inspection_windows_text(inspection)
    # the verdict stays the last line, as without --windows
    return f"{head}\n\n{windows_text}\n\n{verdict}" if head is not text else f"{text}\n\n{windows_text}"

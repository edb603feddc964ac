"""PyTorch's adaptive pooling windows made visible, next to the two popular recipes that get them wrong.

Pure formatting: sizes in, :class:`AxisView` data out, and text or JSON from that data (no click, no
printing). The window arithmetic is :mod:`onnxpoolfix.windows`; the lowering shown for an axis is the one
:func:`onnxpoolfix.plan.planner.plan` picks for a one-axis pool of that size, so nothing here restates either.
``onnxpoolfix windows N M [N2 M2 ...]`` (onnxpoolfix/cli/windows_cmd.py) and ``onnxpoolfix inspect IN
--windows`` (onnxpoolfix/inspection/windows.py) print it.

The recipes, as a plain AveragePool/MaxPool would apply them (no padding, floor mode:
``floor((N - kernel) / stride) + 1`` outputs, output ``i`` reads ``[i*stride, i*stride + kernel)``):

- ``A``: ``stride = N // M; kernel = N - (M - 1) * stride`` (a popular blog answer, Paddle2ONNX,
  Torch-TensorRT). Always M outputs; exact only where the windows are uniform.
- ``B``: ``kernel = stride = N // M`` (MMDeploy, torch-to-nnef). Can give more than M outputs
  (11 -> 4 gives 5) and leave the last inputs unread.

Both have stride 0 when N < M (upsampling): "not applicable", never a division by zero. A recipe is exact
when its windows are exactly torch's (same count, same ranges). The text (an example, and how long axes are
drawn: :data:`MAX_COLUMNS`, :data:`MAX_ROWS`) is in docs/command-line.md, "Seeing the windows"; the JSON
always has every window, each list on one line (``onnxpoolfix windows --json`` refuses axes past
:data:`MAX_JSON_SIZE`, with a hint).

JSON (``schema_version`` 1; ``onnxpoolfix windows --json``)::

    {
      "schema_version": 1,
      "axes": [{
        "axis": int, "in_size": int, "out_size": int,
        "kind": "identity" | "global" | "uniform" | "integer-upsample" | "non-uniform" | "non-integer-upsample",
        "label": str,                                  # e.g. "uniform k3 s2", "integer upsample x2"
        "kernel": int | null, "stride": int | null,    # uniform (and global) only
        "upsample_factor": int | null,                 # integer-upsample only
        "windows": [[start, end]],                     # half-open, one per output
        "lengths": [int], "starts": [int],
        "lowering": {"avg": str, "max": str} | null,   # the planner's pick for this axis alone (one plane,
                                                       # float32, opset 17); null in inspect --windows
        "recipes": [{
          "name": "A" | "B", "formula": str, "applicable": bool,
          "kernel": int | null, "stride": int | null,
          "windows": [[start, end]], "outputs": int,
          "exact": bool,
          "differs_at": [int],                         # outputs (< min(outputs, M)) whose window differs
          "unread": [[start, end]],                    # input ranges no window of the recipe reads
          "verdict": str                               # the text shown, e.g. "NOT exact: ..."
        }]
      }]
    }

``onnxpoolfix inspect IN --windows --json`` is the inspection's JSON (onnxpoolfix/inspection/report.py) with a
``"windows"`` list added to every node: per pooled axis, the axis object above, or
``{"axis", "in_size", "out_size", "note"}`` where the axis is symbolic (the note says so).
In the text, the windows come after the nodes and before the verdict, which stays the last line.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import windows as W
from ..lowering.base import AxisWindows
from ..plan.planner import plan
from ..spec import PoolNode, PoolSpec

SCHEMA_VERSION = 1
MAX_SIZE = 1_000_000  # per axis; beyond it the planner's cost estimate alone takes seconds
MAX_COLUMNS = 64  # input elements drawn one per column; longer axes are drawn scaled
MAX_ROWS = 16  # outputs drawn (and ranges listed) in full; more are cut to the edges
EDGE_ROWS = 6
LIST_EDGE = 4  # the same, for the range lists written on one line

# the lowering is asked for a pool of one plane of one axis, in float32 at a current opset
_PLAN_OPSET = 17

Window = tuple[int, int]

FORMULA_A = "stride = N // M; kernel = N - (M - 1) * stride"
FORMULA_B = "kernel = stride = N // M"


@dataclass(frozen=True)
class Recipe:
    name: str
    formula: str
    applicable: bool
    kernel: int | None
    stride: int | None
    windows: tuple[Window, ...]
    outputs: int
    exact: bool
    differs_at: tuple[int, ...]
    unread: tuple[Window, ...]
    verdict: str


@dataclass(frozen=True)
class AxisView:
    axis: int
    in_size: int
    out_size: int
    kind: str
    label: str
    kernel: int | None
    stride: int | None
    upsample_factor: int | None
    windows: tuple[Window, ...]
    lowering: dict | None  # {"avg": name, "max": name}, or None when not asked
    recipes: tuple[Recipe, ...]

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(e - s for s, e in self.windows)

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.windows)

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in ("axis", "in_size", "out_size", "kind", "label", "kernel", "stride",
                                           "upsample_factor")}
        d["windows"] = [list(w) for w in self.windows]
        d["lengths"], d["starts"] = list(self.lengths), list(self.starts)
        d["lowering"] = dict(self.lowering) if self.lowering is not None else None
        d["recipes"] = [{**{f: getattr(r, f) for f in ("name", "formula", "applicable", "kernel", "stride")},
                         "windows": [list(w) for w in r.windows], "outputs": r.outputs, "exact": r.exact,
                         "differs_at": list(r.differs_at), "unread": [list(w) for w in r.unread], "verdict": r.verdict}
                        for r in self.recipes]
        return d


def check_sizes(n: int, m: int) -> None:
    """Raise TypeError/ValueError (with the reason) unless ``n`` and ``m`` are integers in [1, MAX_SIZE]."""
    for what, v in (("input size", n), ("output size", m)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what} {v!r} is not an integer")
        if not 1 <= v <= MAX_SIZE:
            raise ValueError(f"{what} {v} is not in [1, {MAX_SIZE}]")


# ------------------------------------------------------------------------------------------------ data

def pool_windows(n: int, kernel: int, stride: int) -> tuple[Window, ...]:
    """The windows of a plain AveragePool/MaxPool (no padding, floor mode) over ``n`` elements."""
    if kernel > n:
        return ()
    return tuple((i * stride, i * stride + kernel) for i in range((n - kernel) // stride + 1))


def _unread(n: int, wins: Sequence[Window]) -> tuple[Window, ...]:
    """Input ranges that no window covers, as half-open ranges."""
    gaps, pos = [], 0
    for s, e in sorted(wins):
        if s > pos:
            gaps.append((pos, s))
        pos = max(pos, e)
    if pos < n:
        gaps.append((pos, n))
    return tuple(gaps)


def recipe(name: str, n: int, m: int) -> Recipe:
    """Recipe ``"A"`` or ``"B"`` for ``n -> m``, compared with torch's windows."""
    formula = {"A": FORMULA_A, "B": FORMULA_B}[name]
    stride = n // m
    if stride == 0:
        return Recipe(name, formula, False, None, None, (), 0, False, (), (),
                      "not applicable: N < M (stride N // M would be 0)")
    kernel = n - (m - 1) * stride if name == "A" else stride
    torch_windows = W.windows(n, m)
    wins = pool_windows(n, kernel, stride)
    differs = tuple(i for i, (a, b) in enumerate(zip(wins, torch_windows)) if a != b)
    unread = _unread(n, wins)
    exact = wins == torch_windows
    if exact:
        verdict = "exact"
    else:
        why = []
        if len(wins) != m:
            why.append(f"{len(wins)} outputs, torch has {m}")
        if differs:
            which = differs if len(differs) <= 8 else differs[:4] + ("...",) + differs[-2:]
            why.append(f"window{'s' if len(differs) != 1 else ''} of output{'s' if len(differs) != 1 else ''} "
                       f"{', '.join(map(str, which))} differ{'s' if len(differs) == 1 else ''}")
        if unread:
            why.append("input " + ", ".join(_range(w) for w in unread) + " never read")
        verdict = "NOT exact: " + "; ".join(why)
    return Recipe(name, formula, True, kernel, stride, wins, len(wins), exact, differs, unread, verdict)


def _classify(n: int, m: int) -> tuple[str, str, int | None, int | None, int | None]:
    """(kind, label, kernel, stride, upsample factor), from the same predicates the lowerings use."""
    a = AxisWindows(0, n, m)
    if a.keep:
        return "identity", "identity", None, None, None
    if m == 1:
        return "global", f"global {n}->1", n, n, None
    if a.uniform:
        k, s = a.uniform.kernel, a.uniform.stride
        return "uniform", f"uniform k{k} s{s}", k, s, None
    if a.upsample:
        return "integer-upsample", f"integer upsample x{a.upsample}", None, None, a.upsample
    if m > n:
        return "non-integer-upsample", "upsampling, non-integer", None, None, None
    return "non-uniform", "non-uniform", None, None, None


def axis_lowering(n: int, m: int) -> dict:
    """What the planner picks for a one-plane, one-axis float32 pool ``n -> m``, average and max."""
    from onnx import TensorProto

    picks = {}
    for kind in ("avg", "max"):
        node = PoolNode(index=-1, name=f"{n}->{m}", op=f"adaptive_{kind}_pool1d", kind=kind, rank=1,
                        encoding="aten-op", input="x", output="y", indices_output=None, unused_outputs=(),
                        output_size=(m,), size_input=None)
        picks[kind] = plan(PoolSpec(node, (1, 1, n), (1, 1, m), TensorProto.FLOAT, _PLAN_OPSET)).lowering.name
    return picks


def axis_view(n: int, m: int, axis: int = 0, *, lowering: bool = True) -> AxisView:
    """Everything shown about one axis ``n -> m``. ``lowering=False`` skips asking the planner."""
    check_sizes(n, m)
    kind, label, kernel, stride, factor = _classify(n, m)
    return AxisView(axis, n, m, kind, label, kernel, stride, factor, W.windows(n, m),
                    axis_lowering(n, m) if lowering else None, (recipe("A", n, m), recipe("B", n, m)))


def views(pairs: Iterable[tuple[int, int]]) -> list[AxisView]:
    return [axis_view(n, m, axis=i) for i, (n, m) in enumerate(pairs)]


#: ``windows --json`` lists every window: up to this many per axis (input and output size), about 15 MB
MAX_JSON_SIZE = 65536


def to_json(axis_views: Sequence[AxisView]) -> str:
    return dumps({"schema_version": SCHEMA_VERSION, "axes": [v.to_dict() for v in axis_views]})


_LISTS = ("windows", "lengths", "starts", "differs_at", "unread")


def dumps(doc: dict) -> str:
    """``doc`` as indented JSON with each list of windows or ints on one line (one number per line made a
    million windows a 2 GB, 19 s affair)."""
    raw: dict[str, str] = {}

    def compact(node):
        if isinstance(node, dict):
            return {k: (_token(raw, v) if k in _LISTS and isinstance(v, list) else compact(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [compact(v) for v in node]
        return node

    text = json.dumps(compact(doc), indent=2)
    # (json writes the NUL that marks a token as \u0000; no real string holds one)
    return re.sub(r'"\\u0000(\d+)\\u0000"', lambda mt: raw[mt.group(1)], text) if raw else text


def _token(raw: dict[str, str], values: list) -> str:
    key = str(len(raw))
    raw[key] = json.dumps(values, separators=(", ", ": "))
    return f"\x00{key}\x00"


# ------------------------------------------------------------------------------------------------ text

def _range(w: Window) -> str:
    return f"[{w[0]},{w[1]})"


def _cut(items: Sequence, edge: int = EDGE_ROWS, limit: int = MAX_ROWS) -> list:
    """``items``, or its first and last ``edge`` with ``None`` where the middle was left out."""
    items = list(items)
    return items if len(items) <= limit else items[:edge] + [None] + items[-edge:]


def _list(values: Sequence, fmt=str) -> str:
    return " ".join("..." if v is None else fmt(v) for v in _cut(values, edge=LIST_EDGE))


def _lengths(lengths: Sequence[int]) -> str:
    """The lengths, and how many windows have each (the list alone may be cut)."""
    counts = {k: lengths.count(k) for k in sorted(set(lengths))}
    if len(counts) == 1:
        return f"{_list(lengths)} (all {lengths[0]})"
    return f"{_list(lengths)} ({', '.join(f'{c} of length {k}' for k, c in counts.items())})"


def _scale(n: int) -> int:
    """Input elements per diagram column."""
    return 1 if n <= MAX_COLUMNS else -(-n // MAX_COLUMNS)


def diagram_row(n: int, w: Window) -> str:
    """One output's row: ``#`` read, ``.`` not read (scaled: ``+`` where a column is partly read)."""
    q = _scale(n)
    s, e = w
    cells = []
    for c in range(-(-n // q)):
        lo, hi = c * q, min((c + 1) * q, n)
        inside = max(0, min(hi, e) - max(lo, s))
        cells.append("#" if inside == hi - lo else "+" if inside else ".")
    return "".join(cells)


def _ruler(n: int) -> list[str]:
    if _scale(n) > 1:
        return []
    units = "".join(str(j % 10) for j in range(n))
    if n <= 10:
        return [units]
    tens = "".join(str(j // 10 % 10) if j % 10 == 0 else " " for j in range(n))
    return [tens, units]


def diagram(n: int, wins: Sequence[Window], indent: str = "") -> list[str]:
    """The table of outputs: index, window, length, and which inputs it reads."""
    m = len(wins)
    iw = max(3, len(str(m - 1)))
    ww = max(6, max(len(_range(w)) for w in wins))
    lw = max(3, len(str(max(e - s for s, e in wins))))
    q = _scale(n)
    head = f"{'out'.rjust(iw)}  {'window'.ljust(ww)}  {'len'.rjust(lw)}  "
    pad = " " * len(head)
    what = f"input 0..{n - 1}" if q == 1 else \
        f"input 0..{n - 1}, one column = {q} elements ('#' all read, '+' some)"
    lines = [indent + head + what] + [indent + pad + r for r in _ruler(n)]
    for i in _cut(range(m)):
        if i is None:
            lines.append(indent + f"{'...'.rjust(iw)}  ({m - 2 * EDGE_ROWS} more rows)")
            continue
        s, e = wins[i]
        lines.append(indent + f"{str(i).rjust(iw)}  {_range(wins[i]).ljust(ww)}  {str(e - s).rjust(lw)}  "
                     + diagram_row(n, wins[i]))
    return lines


def _kind_note(v: AxisView) -> str:
    return {
        "identity": "each output is its own input",
        "global": "one window over the whole axis",
        "uniform": "one length, evenly spaced: one AveragePool/MaxPool is exact",
        "integer-upsample": f"each output copies input i // {v.upsample_factor}",
        "non-uniform": "no single kernel and stride reproduce these windows",
        "non-integer-upsample": "windows of " + " and ".join(str(k) for k in sorted(set(v.lengths)))
                                + " elements: not a Resize",
    }[v.kind]


def format_axis(v: AxisView, indent: str = "") -> list[str]:
    """The text for one axis (a list of lines)."""
    more = f" ({v.out_size} windows; --json lists all)" if v.out_size > MAX_ROWS else ""
    lines = [f"{indent}axis {v.axis}: {v.in_size} -> {v.out_size}  {v.label} ({_kind_note(v)})",
             f"{indent}  torch: {_list(v.windows, _range)}{more}",
             f"{indent}  lengths {_lengths(v.lengths)}",
             f"{indent}  starts  {_list(v.starts)}",
             ""]
    lines += [*diagram(v.in_size, v.windows, indent + "  "), ""]
    if v.lowering is not None:
        lines.append(f"{indent}  lowering (this axis alone): average -> {v.lowering['avg']}, "
                     f"max -> {v.lowering['max']}")
    for r in v.recipes:
        if not r.applicable:
            lines.append(f"{indent}  recipe {r.name} ({r.formula}): {r.verdict}")
            continue
        lines += [f"{indent}  recipe {r.name} ({r.formula}): kernel {r.kernel}, stride {r.stride}",
                  f"{indent}    {_list(r.windows, _range)}", f"{indent}    {r.verdict}"]
    return lines


def format_text(axis_views: Sequence[AxisView]) -> str:
    return "\n\n".join("\n".join(format_axis(v)) for v in axis_views)


#: what ``inspect --windows`` says of an axis whose size is not known until run time
SYMBOLIC = "symbolic: windows depend on the runtime size"

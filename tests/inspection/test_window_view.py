"""``onnxpoolfix windows N M`` and ``inspect --windows`` (onnxpoolfix/window_view.py): the windows against an
independent brute force and against torch itself, the recipes against an explicit comparison (and torch's
own AveragePool), the kinds, the diagram, the JSON shape, bad input, and the inspect flag."""
from __future__ import annotations

import json
import re
from fractions import Fraction
from math import ceil, floor
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import make_leftover

from onnxpoolfix.cli import main
from onnxpoolfix.inspection import window_view as V

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SIZES = [(n, m) for n in range(1, 41) for m in range(1, 41)]


def torch_windows(n: int, m: int) -> list[tuple[int, int]]:
    """DESIGN.md's formula, written out with exact fractions (not windows.py's integer arithmetic)."""
    return [(floor(Fraction(i * n, m)), ceil(Fraction((i + 1) * n, m))) for i in range(m)]


def plain_pool_windows(n: int, kernel: int, stride: int) -> list[tuple[int, int]]:
    """What AveragePool(kernel, stride), no padding, floor mode, reads: every full window from the left."""
    out, start = [], 0
    while start + kernel <= n:
        out.append((start, start + kernel))
        start += stride
    return out


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------------------------------ the data

def test_windows_lengths_starts_match_the_brute_force():
    for n, m in SIZES:
        v = V.axis_view(n, m, lowering=False)
        expect = torch_windows(n, m)
        assert list(v.windows) == expect, (n, m)
        assert list(v.lengths) == [e - s for s, e in expect] and list(v.starts) == [s for s, _ in expect]


def test_windows_match_torch_itself():
    """Each window's first and last element read off torch's adaptive max pool on a rising and a falling ramp."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for n, m in SIZES[::3]:
        rising = torch.arange(n, dtype=torch.float64).reshape(1, 1, n)
        _, last = F.adaptive_max_pool1d(rising, m, return_indices=True)
        _, first = F.adaptive_max_pool1d(-rising, m, return_indices=True)
        torch_ranges = [(int(a), int(b) + 1) for a, b in zip(first.flatten(), last.flatten())]
        assert list(V.axis_view(n, m, lowering=False).windows) == torch_ranges, (n, m)


def test_recipes_against_an_explicit_comparison():
    for n, m in SIZES:
        _check_recipes(n, m)


def _check_recipes(n, m):
    a, b = V.axis_view(n, m, lowering=False).recipes
    truth = torch_windows(n, m)
    if n < m:
        assert not a.applicable and not b.applicable and not a.exact and not b.exact
        assert "not applicable: N < M" in a.verdict and "not applicable: N < M" in b.verdict
        return
    stride = n // m
    for r, kernel in ((a, n - (m - 1) * stride), (b, stride)):
        expect = plain_pool_windows(n, kernel, stride)
        assert (r.kernel, r.stride) == (kernel, stride)
        assert list(r.windows) == expect and r.outputs == len(expect)
        assert r.exact == (expect == truth), (n, m, r.name)
        assert r.verdict.startswith("exact" if r.exact else "NOT exact")
        read = {j for s, e in expect for j in range(s, e)}
        assert {j for s, e in r.unread for j in range(s, e)} == set(range(n)) - read
        assert list(r.differs_at) == [i for i, (x, y) in enumerate(zip(expect, truth)) if x != y]


def test_recipe_exactness_agrees_with_torchs_own_pooling():
    """A recipe is exact iff torch's avg_pool1d with its kernel/stride gives adaptive_avg_pool1d's result."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(0)
    for n, m in SIZES[::2]:
        x = torch.randn(1, 1, n, dtype=torch.float64, generator=gen)
        want = F.adaptive_avg_pool1d(x, m)
        for r in V.axis_view(n, m, lowering=False).recipes:
            if not r.applicable:
                continue
            got = F.avg_pool1d(x, r.kernel, r.stride)
            same = got.shape == want.shape and torch.allclose(got, want, rtol=0, atol=1e-12)
            assert r.exact == same, (n, m, r.name)


def test_kind():
    for n, m in SIZES:
        _check_kind(n, m)


def _check_kind(n, m):
    v = V.axis_view(n, m, lowering=False)
    w = torch_windows(n, m)
    lengths = {e - s for s, e in w}
    step = w[1][0] - w[0][0] if m > 1 else 0
    evenly = m > 1 and step >= 1 and all(s == i * step for i, (s, _) in enumerate(w))
    if n == m:
        assert v.kind == "identity"
    elif m == 1:
        assert v.kind == "global" and v.label == f"global {n}->1"
    elif len(lengths) == 1 and evenly:
        assert v.kind == "uniform" and (v.kernel, v.stride) == (lengths.pop(), step)
        assert v.label == f"uniform k{v.kernel} s{v.stride}"
    elif m % n == 0:
        assert v.kind == "integer-upsample" and v.upsample_factor == m // n
    elif m > n:
        assert v.kind == "non-integer-upsample"
    else:
        assert v.kind == "non-uniform"


def test_lowering_is_the_planners_for_one_axis():
    """The facts DESIGN.md states: uniform -> a pooling op, integer upsample -> Resize, m == 1 -> a Reduce."""
    assert V.axis_view(7, 3).lowering == {"avg": "pool", "max": "pool"}
    assert V.axis_view(3, 6).lowering == {"avg": "resize", "max": "resize"}
    assert V.axis_view(5, 1).lowering == {"avg": "global", "max": "global"}
    assert V.axis_view(4, 4).lowering == {"avg": "identity", "max": "identity"}
    # non-uniform average: never a single pooling op
    assert V.axis_view(11, 4).lowering["avg"] not in ("pool", "resize", "global", "identity")
    assert V.axis_view(11, 4, lowering=False).lowering is None


@pytest.mark.parametrize("n, m", [(0, 3), (3, 0), (-1, 2), (2.5, 2), (True, 2), (V.MAX_SIZE + 1, 2)])
def test_bad_sizes_are_refused(n, m):
    with pytest.raises((TypeError, ValueError)):
        V.axis_view(n, m)


# ------------------------------------------------------------------------------------------ the text

def _rows(text: str) -> dict[int, tuple[tuple[int, int], str]]:
    """The diagram rows of one axis' text: output index -> (window, cells)."""
    rows = {}
    for line in text.splitlines():
        mt = re.match(r"^\s+(\d+)  \[(\d+),(\d+)\)\s+(\d+)  ([#+.]+)$", line)
        if mt:
            rows[int(mt[1])] = ((int(mt[2]), int(mt[3])), mt[5])
    return rows


@pytest.mark.parametrize("n, m", [(11, 4), (7, 3), (4, 6), (9, 7), (1, 1), (5, 1), (1, 4), (16, 16), (64, 5)])
def test_diagram_marks_exactly_the_window(n, m):
    rows = _rows(V.format_text([V.axis_view(n, m)]))
    assert sorted(rows) == list(range(m))
    for i, (s, e) in enumerate(torch_windows(n, m)):
        window, cells = rows[i]
        assert window == (s, e)
        assert cells == "".join("#" if s <= j < e else "." for j in range(n))


def test_large_sizes_are_summarised():
    text = V.format_text([V.axis_view(1000, 30)])
    rows = _rows(text)
    assert len(rows) == 2 * V.EDGE_ROWS and "(18 more rows)" in text and "--json lists all" in text
    assert len(text.splitlines()) < 40
    q = -(-1000 // V.MAX_COLUMNS)  # elements per column
    assert f"one column = {q} elements" in text
    truth = torch_windows(1000, 30)
    for i, ((s, e), cells) in rows.items():
        assert (s, e) == truth[i] and len(cells) <= V.MAX_COLUMNS
        for c, ch in enumerate(cells):
            cell = set(range(c * q, min((c + 1) * q, 1000)))
            inside = cell & set(range(s, e))
            assert ch == ("#" if inside == cell else "+" if inside else "."), (i, c)
    # the JSON keeps every window
    data = json.loads(V.to_json([V.axis_view(1000, 30)]))["axes"][0]
    assert [tuple(w) for w in data["windows"]] == truth


def test_many_outputs_of_a_short_axis_are_summarised():
    text = V.format_text([V.axis_view(3, 1000)])
    assert len(_rows(text)) == 2 * V.EDGE_ROWS and len(text.splitlines()) < 40


# ------------------------------------------------------------------------------------------ the command

def test_cli_11_to_4():
    r = cli("windows", 11, 4)
    assert r.exit_code == 0, r.output
    assert "torch: [0,3) [2,6) [5,9) [8,11)" in r.output
    assert "[0,5) [2,7) [4,9) [6,11)" in r.output  # recipe A
    assert "[0,2) [2,4) [4,6) [6,8) [8,10)" in r.output  # recipe B: five outputs
    verdicts = re.findall(r"^\s+(exact|NOT exact.*)$", r.output, flags=re.MULTILINE)
    assert len(verdicts) == 2 and all(v.startswith("NOT exact") for v in verdicts)
    assert "5 outputs, torch has 4" in r.output and "input [10,11) never read" in r.output
    assert r.output.isascii()


def test_cli_7_to_3():
    r = cli("windows", 7, 3)
    assert r.exit_code == 0 and "uniform k3 s2" in r.output
    a_line = r.output.splitlines().index(next(ln for ln in r.output.splitlines() if "recipe A" in ln))
    assert r.output.splitlines()[a_line + 2].strip() == "exact"
    assert "lowering (this axis alone): average -> pool, max -> pool" in r.output


@pytest.mark.parametrize("args", [("1", "1"), ("5", "1"), ("1", "4"), ("4", "6"), ("3", "6"), ("1000", "30")])
def test_cli_edge_sizes(args):
    r = cli("windows", *args)
    assert r.exit_code == 0, r.output
    n, m = map(int, args)
    assert f"axis 0: {n} -> {m}" in r.output
    if n < m:
        assert r.output.count("not applicable: N < M") == 2


def test_cli_several_axes_and_json_shape():
    r = cli("windows", 8, 6, 9, 7, "--json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["schema_version"] == V.SCHEMA_VERSION and [a["axis"] for a in data["axes"]] == [0, 1]
    axis_keys = {"axis", "in_size", "out_size", "kind", "label", "kernel", "stride", "upsample_factor",
                 "windows", "lengths", "starts", "lowering", "recipes"}
    recipe_keys = {"name", "formula", "applicable", "kernel", "stride", "windows", "outputs", "exact",
                   "differs_at", "unread", "verdict"}
    for ax, (n, m) in zip(data["axes"], [(8, 6), (9, 7)]):
        assert set(ax) == axis_keys and (ax["in_size"], ax["out_size"]) == (n, m)
        assert [tuple(w) for w in ax["windows"]] == torch_windows(n, m)
        assert set(ax["lowering"]) == {"avg", "max"}
        assert [rc["name"] for rc in ax["recipes"]] == ["A", "B"]
        for rc in ax["recipes"]:
            assert set(rc) == recipe_keys and isinstance(rc["exact"], bool)
    # the text has the same two axes
    text = cli("windows", 8, 6, 9, 7).output
    assert "axis 0: 8 -> 6" in text and "axis 1: 9 -> 7" in text


@pytest.mark.parametrize("args, message", [
    ((), "give an input size and an output size"),
    (("0", "3"), "sizes must be in [1,"),
    (("3", "-1"), "sizes must be in [1,"),
    (("-4", "3"), "sizes must be in [1,"),
    (("3.5", "2"), "'3.5' is not an integer"),
    (("x", "2"), "'x' is not an integer"),
    (("1_0", "2"), "'1_0' is not an integer"),
    (("11", "4", "7"), "sizes come in pairs"),
    (("11",), "sizes come in pairs"),
    (("2000000", "3"), "sizes must be in [1,"),
    (("11", "4", "--jsn"), "No such option"),
])
def test_cli_bad_input_is_a_usage_error(args, message):
    r = cli("windows", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


# ------------------------------------------------------------------------------------------ inspect --windows

def test_inspect_windows_draws_every_pooled_axis():
    r = cli("inspect", FIXTURES / "avg2d_mixed_8x9_to_4x7.onnx", "--windows")
    assert r.exit_code == 0, r.output
    plain = cli("inspect", FIXTURES / "avg2d_mixed_8x9_to_4x7.onnx").output
    assert r.output.startswith(plain.rstrip().rsplit("\n", 1)[0].rstrip())  # the inspection, unchanged
    assert r.output.rstrip().splitlines()[-1].startswith("verdict:")  # still the last line
    for axis, (n, m) in ((2, (8, 4)), (3, (9, 7))):
        assert f"axis {axis}: {n} -> {m}" in r.output
        assert "torch: " + " ".join(f"[{s},{e})" for s, e in torch_windows(n, m)) in r.output


def test_inspect_windows_json():
    r = cli("inspect", FIXTURES / "avg2d_mixed_8x9_to_4x7.onnx", "--windows", "--json")
    data = json.loads(r.output)
    plain = json.loads(cli("inspect", FIXTURES / "avg2d_mixed_8x9_to_4x7.onnx", "--json").output)
    (node,) = data["nodes"]
    assert {k: v for k, v in node.items() if k != "windows"} == plain["nodes"][0]
    assert [(w["axis"], [tuple(x) for x in w["windows"]]) for w in node["windows"]] == \
        [(2, torch_windows(8, 4)), (3, torch_windows(9, 7))]


def test_inspect_windows_symbolic_axes():
    r = cli("inspect", FIXTURES / "dynamic_classifier.onnx", "--windows")
    assert r.exit_code == 0 and r.output.count(V.SYMBOLIC) == 2
    bound = cli("inspect", FIXTURES / "dynamic_classifier.onnx", "--windows", "--input-shape", "x:1,3,30,27")
    assert V.SYMBOLIC not in bound.output and "torch: [0," in bound.output


def test_inspect_windows_on_a_blocked_model(tmp_path):
    """A node whose shapes are unknown (the model-level blocker) says so instead of failing."""
    model = make_leftover("avg", [1, 2, 8, 8], [5, 5])
    model.graph.node[0].op_type = "Shape"  # the size is no longer a constant
    del model.graph.node[0].attribute[:]
    model.graph.node[0].input.append("x")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    r = cli("inspect", path, "--windows")
    assert r.exit_code == 4, r.output
    assert "shapes unknown" in r.output and r.output.rstrip().splitlines()[-1].startswith("verdict:")


def test_inspect_windows_with_exporter_pools():
    r = cli("inspect", FIXTURES / "pyramid_pooling.onnx", "--windows", "--optimize-exporter-pools", "--json")
    assert r.exit_code == 0, r.output
    nodes = json.loads(r.output)["nodes"]
    assert len({tuple(n["output_shape"]) for n in nodes}) > 1  # the pyramid's levels differ
    for node in nodes:
        assert len(node["windows"]) == len(node["axes"]) == 2
        for w, n, m in zip(node["windows"], node["input_shape"][2:], node["output_shape"][2:]):
            assert (w["in_size"], w["out_size"]) == (n, m)
            assert [tuple(x) for x in w["windows"]] == torch_windows(n, m)


# ------------------------------------------------------------------------------------------ README

README = Path(__file__).resolve().parents[2] / "docs" / "command-line.md"  # moved there from README.md
OUTPUT_MARK = "<!-- the output of the command above"


def _readme_example() -> tuple[list[str], str]:
    """The command before the README's output marker, and the indented block after it (dedented)."""
    lines = README.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(OUTPUT_MARK))
    command = next(ln for ln in reversed(lines[:at]) if ln.startswith("    onnxpoolfix ")).split()[1:]
    block, i = [], at + 1
    while i < len(lines) and not lines[i]:
        i += 1
    while i < len(lines) and (not lines[i] or lines[i].startswith("    ")):
        block.append(lines[i][4:])
        i += 1
    return command, "\n".join(block).rstrip("\n")


def test_readme_shows_the_real_output():
    command, shown = _readme_example()
    assert command == ["windows", "11", "4"]
    r = cli(*command)
    assert r.exit_code == 0 and shown == r.output.rstrip("\n")


"""Errors raised through the Python API name the API's arguments, not the CLI's flags (issue 22, item 5);
the CLI prints the same errors with its flags."""
from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from helpers import leftovers_in_if_branches, make_leftover

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.errors import ArgumentError, PoolFixError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def _api_error(**kwargs) -> PoolFixError:
    with pytest.raises(PoolFixError) as info:
        onnxpoolfix.patch(kwargs.pop("model"), **kwargs)
    return info.value


def _no_flags(err: PoolFixError) -> None:
    for text in (str(err), err.hint or ""):
        assert not FLAG.search(text), text


def test_symbolic_axes_below_opset_11_hint_names_input_shapes() -> None:
    err = _api_error(model=make_leftover("max", ("N", 2, "H", "W"), (5, 7), opset=10))
    _no_flags(err)
    assert "input_shapes=" in err.hint


def test_a_forced_strategy_that_is_not_exact_says_drop_strategy() -> None:
    err = _api_error(model=onnx.load(FIXTURES / "avg2d_8x9_to_5x7.onnx"), strategy="pool")
    _no_flags(err)
    assert "strategy=" in err.hint


def test_check_shapes_errors_name_check_shapes() -> None:
    err = _api_error(model=onnx.load(FIXTURES / "dynamic_avg2d.onnx"), check_shapes=[{"nope": [1, 2, 8, 9]}])
    _no_flags(err)
    assert str(err).startswith("check_shapes names 'nope'")


def test_a_check_size_against_the_binding_names_the_binding() -> None:
    """The dim is fixed by the caller's own input_shapes (which the patched model keeps), not by the model."""
    err = _api_error(model=onnx.load(FIXTURES / "dynamic_avg2d.onnx"), input_shapes={"x": [1, 2, 10, 10]},
                     check_shapes=[{"x": [1, 2, 12, 12]}])
    assert isinstance(err, ArgumentError) and "fixed to 10 in the model" not in str(err)
    assert "bound to 10 by your input_shapes x:1,2,10,10" in str(err), str(err)
    _no_flags(err)


def test_the_cli_says_the_same_with_its_flags(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(make_leftover("max", ("N", 2, "H", "W"), (5, 7), opset=10), src)
    r = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx")])
    assert r.exit_code == 4 and "--input-shape NAME:D0,D1,..." in r.stderr and "input_shapes=" not in r.stderr
    assert "(API: " not in r.stderr, r.stderr  # once "(API: --input-shape=...)": the API's words turned twice
    r = CliRunner().invoke(main, [str(FIXTURES / "dynamic_avg2d.onnx"), str(tmp_path / "o.onnx"),
                                  "--input-shape", "x:1,2,10,10", "--check-shape", "x:1,2,12,12"])
    assert r.exit_code == 2 and "bound to 10 by your --input-shape x:1,2,10,10" in r.stderr, r.stderr
    assert "fixed to 10 in the model" not in r.stderr and not (tmp_path / "o.onnx").exists()
    r = CliRunner().invoke(main, ["inspect", str(src)])
    assert r.exit_code == 4 and "--input-shape" in r.stdout and "input_shapes=" not in r.stdout


def test_every_knob_is_spelled_for_every_reader() -> None:
    """Each reference names a flag for the CLI and an argument (never a flag) for the API and export."""
    from onnxpoolfix.words import AUDIENCES, CLI, KNOBS, ref, render

    for key in KNOBS:
        text = f"a {ref(key, 13)} b"
        spelled = {a: render(text, a) for a in AUDIENCES}
        assert all(v.startswith("a ") and v.endswith(" b") and "\x1e" not in v for v in spelled.values()), spelled
        for audience in set(AUDIENCES) - {CLI}:
            assert not FLAG.search(spelled[audience]), (key, audience, spelled[audience])
        if KNOBS[key].cli != KNOBS[key].api:  # (a remedy outside the tool, convert_opset, reads the same)
            assert re.search(r"--[a-z]|-v\b|onnxpoolfix [a-z]", spelled[CLI]), (key, spelled[CLI])  # (a command)


def test_no_message_names_a_flag_but_by_reference() -> None:
    """Outside the CLI's own modules, no string literal (docstrings and comments aside) spells a flag: a message
    that did would print it to API callers too. (The one table of exit codes, errors.EXIT_CODES, describes
    the CLI's exits; --report and inspect's --json have no API counterpart.)"""
    import ast

    package = Path(onnxpoolfix.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("cli/") or rel in ("words.py", "errors.py"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if {f for f in FLAG.findall(node.value)} - {"--report", "--json"}:
                    found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not found, found


def test_the_not_checked_note_is_said_by_the_result_line_alone() -> None:
    """A record, not a phrase: --no-check's note is never printed as a note (the result line says it), in the
    API's words or the CLI's."""
    from onnxpoolfix.words import CLI

    result = onnxpoolfix.patch(onnx.load(FIXTURES / "small_convnet.onnx"), check=False)
    rep = result.report
    assert [n.code for n in rep.notes] == ["not-checked"]
    for audience in ("api", CLI):
        warnings, notes = rep.note_lines(audience)
        assert warnings == notes == []
    assert rep.summary().endswith("not checked (check=False)")
    assert "--no-check" not in rep.to_json()


def test_a_warning_record_is_said_in_each_readers_words(tmp_path: Path) -> None:
    """The dynamo fixture's frozen bin, left with allow_partial: one warning record, whose remedy the API names
    as traced_shapes= and the CLI (its output and its JSON report) as --traced-shape."""
    import json

    src = FIXTURES / "dynamo" / "psp_area_symbolic.onnx"
    rep = onnxpoolfix.patch(onnx.load(src), allow_partial=True).report
    (frozen,) = [n for n in rep.notes if n.code == "regions-left-frozen"]
    assert frozen.severity == "warning" and frozen.data == {"regions": 1}
    assert "traced_shapes={'NAME'" in frozen and "--traced-shape" not in frozen
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx"), "--allow-partial", "--report", str(out)])
    assert r.exit_code == 0 and "give that size with --traced-shape NAME:D0,D1,..." in r.stderr, r.stderr
    (record,) = [n for n in json.loads(out.read_text())["notes"] if n["code"] == "regions-left-frozen"]
    assert "--traced-shape NAME:D0,D1,..." in record["text"] and record["severity"] == "warning"


def test_a_name_holding_the_reference_mark_is_said_as_it_is() -> None:
    """A model's names may hold any character, the reference marker too: rendering keeps such text as written
    and still spells the references around it."""
    from onnxpoolfix.words import CLI, NO_CHECK, render

    odd = "x\x1ey\x1fz\x1e"
    assert render(f"input '{odd}': skip the check with {NO_CHECK}", CLI) == f"input '{odd}': skip the check with --no-check"
    assert render(f"{NO_CHECK} then '\x1eno_check\x1e'", "api") == "check=False then '\x1eno_check\x1e'"


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_an_if_in_out_is_named_with_the_target_that_writes_none(kind: str, target: str) -> None:
    """Users take OUT to TFLite/ncnn next: where OUT holds an If (the default target's NaN guard), a note says
    which converters refuse it and names the portable target, in the reader's words; counted from OUT's graph."""
    from onnxpoolfix.graph import nodes_deep

    result = onnxpoolfix.patch(make_leftover(kind, (1, 2, 8, 9), (5, 7)), target=target, check=False)
    ifs = [n for n in nodes_deep(result.model.graph.node) if n.op_type == "If"]
    notes = [n for n in result.report.notes if n.code == "if-guards"]
    assert bool(ifs) == bool(notes) == (target == "onnxruntime")
    if notes:
        assert "target='portable'" in notes[0] and notes[0].data == {"ifs": len(ifs), "top_level_ifs": 1}
        assert "tract" not in notes[0]  # one If in the graph: tract loads it


@pytest.mark.parametrize("check", [True, False])
def test_the_if_note_counts_the_guards_written_inside_a_users_if(check: bool) -> None:
    """Leftovers inside the user's own If branches get guards too: the note counts every If onnxpoolfix wrote,
    in bodies as well (it counted the top-level replacements only: a review found it), not the user's own If."""
    from onnxpoolfix.graph import nodes_deep

    model = leftovers_in_if_branches()
    result = onnxpoolfix.patch(model, check=check)
    written = [n for n in nodes_deep(result.model.graph.node) if n.op_type == "If" and n.name != "users"]
    (note,) = [n for n in result.report.notes if n.code == "if-guards"]
    assert len(written) == 2 and note.data["ifs"] == 2

"""Errors raised through the Python API name the API's arguments, not the CLI's flags (issue 22, item 5);
the CLI prints the same errors with its flags."""
from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from helpers import make_leftover

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


def test_every_phrase_goes_both_ways() -> None:
    from onnxpoolfix.errors import api_words, cli_words

    cli = ("give them with --check-shape NAME:D0,D1,... (repeatable), or skip the check with --no-check; "
           "drop --strategy; --target tensorrt; pass --in-place")
    api = api_words(cli)
    assert not FLAG.search(api), api
    assert cli_words(api) == cli
    err = PoolFixError("x", "skip the check with --no-check")
    assert err.hint == "skip the check with check=False"
    err.hint = "bind it with --input-shape NAME:D0,D1,..."
    assert err.hint == "bind it with input_shapes={'NAME': [D0, D1, ...]}"
    err.hint = "bind them with --input-shape NAME:D0,D1,... (API: input_shapes=...); then"
    assert err.hint == "bind them with input_shapes={'NAME': [D0, D1, ...]}; then"
    assert cli_words(err.hint) == "bind them with --input-shape NAME:D0,D1,...; then"


def test_report_notes_and_whys_speak_the_api_and_the_cli_its_flags(tmp_path):
    """Not only errors: the report patch() returns names the API's arguments too (its notes, each node's why);
    the CLI prints the same report with its flags."""
    model = make_leftover("avg", [1, 3, 10, 9], [4, 5])
    report = onnxpoolfix.patch(model, strategy="matmul", check=False).report
    texts = [n.why for n in report.nodes] + [str(n) for n in report.notes]
    assert "forced by the strategy argument" in texts and "check=False" in texts
    assert not any(FLAG.search(t) for t in texts), texts
    src = tmp_path / "in.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(tmp_path / "out.onnx"), "--strategy", "matmul", "--no-check",
                                  "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert "forced by --strategy" in r.output and "--no-check" in r.output
    assert "forced by --strategy" in (tmp_path / "r.json").read_text()

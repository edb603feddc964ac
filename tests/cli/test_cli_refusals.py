"""Usage the CLI refuses instead of guessing (issue 22, item 5): an input given twice, OUT '-', and
``windows --json`` beyond what anyone reads (the JSON itself compact)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from onnxpoolfix import windows as W
from onnxpoolfix.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DYNAMIC = FIXTURES / "dynamic_avg2d.onnx"


def cli(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


# (two --check-shape flags are two check runs: that one is fine)
@pytest.mark.parametrize("flag, how", [("--input-shape", "two flags"), ("--input-shape", "one value"),
                                       ("--check-shape", "one value")])
def test_an_input_given_twice_is_a_usage_error(tmp_path: Path, flag: str, how: str) -> None:
    out = tmp_path / "o.onnx"
    first, second = "x:1,2,10,10", "x:1,2,12,12"
    args = [flag, first, flag, second] if how == "two flags" else [flag, f"{first} {second}"]
    r = cli(DYNAMIC, out, *args)
    assert r.exit_code == 2 and "'x' is given twice" in r.stderr, r.stderr
    assert not out.exists()


def test_out_dash_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = cli(FIXTURES / "avg2d_8x9_to_5x7.onnx", "-")
        assert r.exit_code == 2 and "/dev/stdout" in r.stderr and "absolute path" in r.stderr, r.stderr
        r = cli(FIXTURES / "avg2d_8x9_to_5x7.onnx", "o.onnx", "--report", "-")
        assert r.exit_code == 2 and "--report" in r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == []
        r = cli(FIXTURES / "avg2d_8x9_to_5x7.onnx", tmp_path / "-", "-q")  # a file named '-', asked for plainly
        assert r.exit_code == 0 and (tmp_path / "-").is_file()
    finally:
        os.chdir(here)


def test_windows_json_beyond_the_limit_is_refused_with_a_hint() -> None:
    r = cli("windows", "--json", 1000000, 999999)
    assert r.exit_code == 2 and "65536" in r.stderr and "Drop --json" in r.stderr
    assert "onnxpoolfix.windows.windows(1000000, 999999)" in r.stderr
    r = cli("windows", 1000000, 999999)  # the text summary takes any size
    assert r.exit_code == 0 and "uniform k2 s1" in r.stdout


def test_windows_json_is_compact_and_complete() -> None:
    n, m = 65536, 65535
    r = cli("windows", "--json", n, m)
    assert r.exit_code == 0
    assert len(r.stdout) < 8_000_000 and r.stdout.count("\n") < 100  # a line per field, not per number
    axis = json.loads(r.stdout)["axes"][0]
    assert [tuple(w) for w in axis["windows"]] == list(W.windows(n, m))
    assert axis["lengths"] == [e - s for s, e in W.windows(n, m)] and axis["label"] == "uniform k2 s1"
    small = json.loads(cli("windows", "--json", 11, 4).stdout)["axes"][0]
    assert small["windows"] == [[0, 3], [2, 6], [5, 9], [8, 11]] and small["recipes"][0]["differs_at"] == [0, 1, 2, 3]


def test_windows_takes_at_most_three_axes() -> None:
    """torch pools 1 to 3 axes; a fourth pair is a usage error (it used to multiply the work, with --json
    by up to 15 MB per axis)."""
    r = cli("windows", *([65536, 65535] * 4), "--json")
    assert r.exit_code == 2 and "1 to 3 axes" in r.stderr
    assert cli("windows", 8, 6, 9, 7, 5, 3).exit_code == 0

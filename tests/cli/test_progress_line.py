"""The progress line (onnxpoolfix/progress.py's phases, onnxpoolfix/cli/progress_line.py's printer): on a
terminal, a line on stderr for each phase still running after a second; nothing in -q, nothing where stderr is
not a terminal, and the phases never change what the run writes."""
from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.cli import progress_line as pl
from onnxpoolfix.progress import listening

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DYNAMO = FIXTURES / "dynamo" / "psp_area_symbolic.onnx"


def _phases(model, **kwargs) -> list[tuple[str, str, bool]]:
    seen = []
    with listening(lambda p, started: seen.append((p.code, p.detail, started))):
        patch(model, **kwargs)
    return seen


def test_the_library_announces_its_phases_in_order_and_ends_each():
    seen = _phases(onnx.load(FIXTURES / "dynamic_avg2d.onnx"))
    starts = [code for code, _, started in seen if started]
    assert starts[0] == "find" and "check" in starts and starts.index("find") < starts.index("check")
    assert sum(1 for s in seen if s[2]) == sum(1 for s in seen if not s[2])  # every phase ended
    checks = [detail for code, detail, started in seen if code == "check" and started]
    assert len(checks) >= 2 and all(d.startswith("x:") for d in checks)  # one per size, each named


def test_a_dynamo_file_announces_its_proof_search():
    seen = _phases(onnx.load(DYNAMO), traced_shapes={"x": [1, 3, 16, 16]})
    searches = [int(detail) for code, detail, started in seen if code == "search" and started]
    assert searches and all(n >= 1 for n in searches)


def test_nothing_listens_by_default_and_the_output_is_the_same():
    model = onnx.load(FIXTURES / "avg2d_8x9_to_5x7.onnx")
    quiet = patch(model).model.SerializeToString()
    seen = []
    with listening(lambda p, started: seen.append(p)):
        heard = patch(model).model.SerializeToString()
    assert seen and heard == quiet


@pytest.fixture()
def terminal(monkeypatch):
    """stderr taken for a terminal, and every phase shown at once."""
    monkeypatch.setattr(pl, "is_terminal", lambda stream: True)
    monkeypatch.setattr(pl, "DELAY", 0.0)


def _run(args) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def _wait_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("onnxpoolfix: ") and ln.endswith(" ...")]


def test_on_a_terminal_each_phase_has_its_line(terminal, tmp_path):
    code, out, err = _run([FIXTURES / "dynamic_avg2d.onnx", tmp_path / "o.onnx"])
    assert code == 0 and (tmp_path / "o.onnx").exists()
    lines = _wait_lines(err)
    for words in ("loading", "finding the pooling", "checking in onnxruntime at x:", "writing"):
        assert any(words in ln for ln in lines), (words, err)
    assert not _wait_lines(out)  # the report on stdout stays clean


def test_a_dynamo_search_has_its_line(terminal, tmp_path):
    code, _, err = _run([DYNAMO, tmp_path / "o.onnx", "--traced-shape", "x:1,3,16,16"])
    assert code == 0 and any(re.search(r"proving \d+ dynamo region\(s\)", ln) for ln in _wait_lines(err)), err


def test_quiet_or_no_terminal_prints_no_progress(terminal, tmp_path, monkeypatch):
    code, out, err = _run([FIXTURES / "dynamic_avg2d.onnx", tmp_path / "o.onnx", "-q"])
    assert code == 0 and out == "" and not _wait_lines(err)
    monkeypatch.setattr(pl, "is_terminal", lambda stream: False)
    code, _, err = _run([FIXTURES / "dynamic_avg2d.onnx", tmp_path / "p.onnx"])
    assert code == 0 and not _wait_lines(err)


def test_a_short_phase_prints_nothing():
    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    stream = Tty()
    line = pl.progress_line(False, stream)
    assert line is not None and pl.progress_line(True, stream) is None
    from onnxpoolfix.progress import phase
    with line, listening(line):
        with phase("load", "IN"):
            pass
    assert stream.text == ""  # ended before its second: no line

"""Check sizes the caller chose that would not fit in memory: refused with exit 8 and the way out, before
any input is made (the kernel would otherwise kill the process: exit 137, no message, nothing said)."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from helpers import make_leftover

import onnxpoolfix
import onnxpoolfix.check as check
from onnxpoolfix.cli import main
from onnxpoolfix.errors import CheckTooLargeError


def test_sizes_beyond_the_memory_share_are_refused(monkeypatch):
    monkeypatch.setattr(check, "available_memory", lambda: 64 << 20)  # 64 MiB available
    model = make_leftover("avg", [1, 3, "H", "W"], [4, 5])
    with pytest.raises(CheckTooLargeError, match="GiB of memory available"):  # 1x3x2048x2048 float32: 48 MiB
        onnxpoolfix.patch(model, check_shapes=[{"x": [1, 3, 2048, 2048]}])
    result = onnxpoolfix.patch(model, check_shapes=[{"x": [1, 3, 64, 64]}])  # 48 KiB: checked
    assert result.report.check_passed


def test_the_cli_exits_8_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "available_memory", lambda: 64 << 20)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(make_leftover("avg", [1, 3, "H", "W"], [4, 5]), src)
    r = CliRunner().invoke(main, [str(src), str(out), "--check-shape", "x:1,3,2048,2048"])
    assert r.exit_code == 8, r.output
    assert "--no-check" in r.output
    assert not out.exists()


def test_available_memory_reads_this_machine():
    avail = check.available_memory()
    assert avail is None or avail > 0

"""A full disk (or no writable temporary folder) is the machine's refusal, not a bug: one line naming it, the
output error's exit code, and the way out; it was "internal error ... this is a bug" (exit 1, review23)."""
from __future__ import annotations

import errno
import tempfile

from click.testing import CliRunner

from onnxpoolfix.cli import main, patch_cmd
from onnxpoolfix.errors import EXIT_INTERNAL, OutputError


def _run(tmp_path, monkeypatch, exc):
    def refuse(*_args, **_kwargs):
        raise exc

    monkeypatch.setattr(patch_cmd, "save_model", refuse)
    return CliRunner().invoke(main, ["fixtures/avg2d_8x9_to_5x7.onnx", str(tmp_path / "out.onnx")])


def test_a_full_disk_is_an_output_error_not_a_bug(tmp_path, monkeypatch):
    r = _run(tmp_path, monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    assert r.exit_code == OutputError.exit_code != EXIT_INTERNAL, r.output
    assert "No space left on device" in r.output and "TMPDIR" in r.output and "bug" not in r.output
    assert not (tmp_path / "out.onnx").exists()


def test_no_usable_temporary_folder_is_an_output_error(tmp_path, monkeypatch):
    def no_folder():
        raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(tempfile, "gettempdir", no_folder)
    r = _run(tmp_path, monkeypatch, FileNotFoundError(errno.ENOENT, "No usable temporary directory found"))
    assert r.exit_code == OutputError.exit_code, r.output
    assert "temporary folder" in r.output and "bug" not in r.output


def test_any_other_missing_file_inside_the_tool_is_still_a_bug(tmp_path, monkeypatch):
    r = _run(tmp_path, monkeypatch, FileNotFoundError(errno.ENOENT, "x.bin"))
    assert r.exit_code == EXIT_INTERNAL, r.output
    assert "bug" in r.output

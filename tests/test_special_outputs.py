"""OUT and --report that are not regular files (issue 12, cases 2 and 3).

A FIFO or character device is written INTO, as cp does (``onnxpoolfix IN /dev/null`` is a dry run); the
atomic rename must never replace the node itself (as root it would turn /dev/null into a regular file).
Block devices and sockets are refused (exit 6). The report follows the same rules (one shared module,
onnxpoolfix/io/outfile.py): through a symbolic link, into /dev/stdout.

As root, a regression here would replace the system's own /dev/null or /dev/stdout, so the tests use
private look-alikes where they can: a character device made with mknod (same major/minor as /dev/null)
and a link to /proc/self/fd/1 (what /dev/stdout is).
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from helpers import leftover_nodes

from onnxpoolfix.cli import main
from onnxpoolfix.errors import OutputError
from onnxpoolfix.io import load_model, save_model

ROOT = Path(__file__).resolve().parent.parent
AVG = ROOT / "fixtures" / "avg2d_8x9_to_5x7.onnx"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def null_device(tmp_path: Path) -> Path:
    """/dev/null where a regression cannot destroy it (not root: /dev is not writable), else a private
    character device with /dev/null's numbers."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as e:
        pytest.skip(f"cannot make a character device here: {e}")
    return dev


class FifoReader:
    """Reads a FIFO to its end in a thread (the writer's open blocks until a reader is there)."""

    def __init__(self, path: Path):
        self.data = b""
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path):
        with open(path, "rb") as f:
            self.data = f.read()

    def result(self) -> bytes:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "nothing closed the FIFO"
        return self.data


def assert_patched_model(data: bytes) -> None:
    model = onnx.load_from_string(data)
    assert model.graph.node and leftover_nodes(model) == []


@pytest.mark.parametrize("via_link", [False, True], ids=["direct", "through-a-symlink"])
def test_out_fifo_is_written_into_and_stays_a_fifo(tmp_path, via_link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = fifo
    if via_link:
        out = tmp_path / "link.onnx"
        out.symlink_to(fifo)
    reader = FifoReader(fifo)
    r = cli(AVG, out, "-q")
    data = reader.result()
    assert r.exit_code == 0, r.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    if via_link:
        assert out.is_symlink() and os.readlink(out) == str(fifo)
    assert_patched_model(data)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["pipe"] + (["link.onnx"] if via_link else []))


@pytest.mark.parametrize("via_link", [False, True], ids=["direct", "through-a-symlink"])
def test_out_null_device_stays_a_character_device(tmp_path, via_link):
    dev = null_device(tmp_path)
    before = os.stat(dev)
    out = dev
    if via_link:
        out = tmp_path / "discard.onnx"
        out.symlink_to(dev)
    r = cli(AVG, out, "--report", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    after = os.stat(dev)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    if via_link:
        assert out.is_symlink()
    assert (tmp_path / "r.json").read_text().startswith("{")
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("null", "discard.onnx", "r.json")]
    assert leftovers == []


def test_out_block_device_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a block device needs root")
    dev = tmp_path / "disk"
    try:
        os.mknod(dev, stat.S_IFBLK | 0o600, os.makedev(7, 250))  # a loop device number nobody uses
    except OSError as e:
        pytest.skip(f"cannot make a block device here: {e}")
    r = cli(AVG, dev)
    assert r.exit_code == 6, r.output
    assert "block device" in r.output and "hint:" in r.output
    assert stat.S_ISBLK(os.stat(dev).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["disk"]


def test_failed_commit_writes_nothing_into_a_fifo(tmp_path):
    """Nothing half-written: the FIFO is opened only after everything passed (here before_commit fails)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there, so a premature open would not block
    try:
        def fail(_tmp):
            raise RuntimeError("check failed")

        with pytest.raises(RuntimeError):
            save_model(load_model(AVG), fifo, source_path=AVG, before_commit=fail)
        assert os.read(fd, 1 << 16) == b""  # no writer ever came, nothing is in the pipe
    finally:
        os.close(fd)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_external_data_beside_a_special_out_is_refused(tmp_path):
    with pytest.raises(OutputError, match="not a regular file"):
        save_model(load_model(AVG), null_device(tmp_path), source_path=AVG, save_as_external_data=True,
                   size_threshold=1)


def test_report_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "reports" / "r.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    r = cli(AVG, tmp_path / "o.onnx", "-q", "--report", link)
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("{") and '"patched"' in target.read_text()


def test_report_to_a_stdout_link_writes_stdout_and_keeps_the_link(tmp_path):
    """--report /dev/stdout, with a private link of the same kind (-> /proc/self/fd/1) on a pipe."""
    if not Path("/proc/self/fd/1").exists():
        pytest.skip("no /proc/self/fd")
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    r = subprocess.run([sys.executable, "-m", "onnxpoolfix", str(AVG), str(tmp_path / "o.onnx"), "-q",
                        "--report", str(link)], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert r.stdout.lstrip().startswith("{") and '"schema_version"' in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "stdout"]


def test_report_into_a_fifo_and_a_null_device(tmp_path):
    fifo = tmp_path / "rpipe"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    r = cli(AVG, tmp_path / "o.onnx", "-q", "--report", fifo)
    assert r.exit_code == 0, r.output
    assert b'"schema_version"' in reader.result()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    dev = null_device(tmp_path)
    r = cli(AVG, tmp_path / "o2.onnx", "-q", "--report", dev)
    assert r.exit_code == 0, r.output
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_out_socket_is_refused(tmp_path):
    import socket

    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(path))
        r = cli(AVG, path)
        assert r.exit_code == 6, r.output
        assert "socket" in r.output and "hint:" in r.output
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    finally:
        s.close()


def test_external_data_into_a_device_only_refused_when_a_data_file_is_needed(tmp_path):
    """--save-as-external-data moves tensors of 1 KiB or more: a model with none needs no OUT.data, so
    /dev/null takes it (onnxpoolfix.export's default external_data=True sends every model this way); one
    with such a tensor is still refused there (exit 6)."""
    r = CliRunner().invoke(main, [str(AVG), os.devnull, "-q", "--save-as-external-data"])
    assert r.exit_code == 0, r.output
    convnet = ROOT / "fixtures" / "small_convnet.onnx"
    assert any(len(t.raw_data) >= 1024 for t in onnx.load(convnet).graph.initializer)
    r = CliRunner().invoke(main, [str(convnet), os.devnull, "-q", "--save-as-external-data"])
    assert r.exit_code == 6 and "data file" in r.output, r.output

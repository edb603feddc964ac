"""Where an output path really writes: the one rule for OUT and ``--report`` alike.

* A regular file (or a new name) is replaced atomically: the content goes to a temporary file that is
  renamed over it once complete. A symbolic link is written through, as ``cp`` does: the file it points
  to is replaced and the link stays (replacing the link would leave its target stale).
* A FIFO or a character device (``/dev/null``, ``/dev/stdout`` on a pipe or a terminal) is written INTO,
  as ``cp`` does, once the content is complete: a rename would replace the device node itself (as root,
  the system's ``/dev/null`` would become a regular file). The path is opened as given, so links through
  ``/proc/self/fd`` resolve in the kernel.
* Anything else that exists and is neither a file nor a folder (a block device, a socket) is refused
  (:class:`~onnxpoolfix.errors.OutputError`, exit 6): writing a model over a disk is never what was meant.

``--report`` also names a file of its own (:func:`preflight_report`: not IN, IN's external data, OUT or
OUT's data file) and is written by :func:`write_report`; OUT's own checks are :mod:`.commit`'s.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import OutputError
from .tensors import PathLike, external_data_files

#: the suffix of every temporary folder an output is prepared in (so leftovers of a killed run are findable)
TMP_SUFFIX = ".onnxpoolfix-tmp"


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


@dataclass(frozen=True)
class OutputTarget:
    path: Path  # what is replaced (regular) or opened and written into (special)
    special: bool  # a FIFO or character device: written into, never renamed over


#: a file name to suggest inside a folder, by what is written
_EXAMPLES = {"the report": "report.json", "the costs": "costs.json"}


def resolve_output(out_path: PathLike, what: str = "the output") -> OutputTarget:
    """The :class:`OutputTarget` of ``out_path`` (see the module docstring); raises ``OutputError`` for
    block devices and sockets, and for a name that ends in a separator (a folder's: ``Path`` would drop it)."""
    if isinstance(out_path, str) and out_path.endswith(tuple({"/", os.sep})):
        raise OutputError(f"{out_path}: ends in '{out_path[-1]}', so it names a folder, not a file",
                          f"give a file name inside it, e.g. {out_path}{_EXAMPLES.get(what, 'model_fixed.onnx')}")
    out = Path(out_path)
    try:
        mode = os.stat(out).st_mode  # follows links: the kind of what is finally written
    except OSError:  # not there yet (or a dangling link: its target is created), or unreadable: a file
        mode = None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return OutputTarget(out, True)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "block device" if stat.S_ISBLK(mode) else "socket" if stat.S_ISSOCK(mode) else "special file"
        raise OutputError(f"{out}: is a {kind}, not a regular file; refusing to write {what} into it",
                          "choose a regular file (or /dev/null to discard it)")
    return OutputTarget(Path(os.path.realpath(out)) if out.is_symlink() else out, False)


@contextmanager
def temp_folder(target: OutputTarget) -> Iterator[Path]:
    """A private temporary folder for the content before it is committed, removed when the block ends,
    however it ends: beside a regular file (the rename must stay on one filesystem), in the system's temp
    folder for a special file (/dev may not be writable, and nothing is renamed there). Its name is chosen
    before it is made, so that a signal landing between the mkdir and the block (SIGTERM: an exception
    raised by the CLI's handler) still finds it to remove; mkdtemp made it before naming it to anyone."""
    parent = Path(tempfile.gettempdir()) if target.special else target.path.parent
    for _ in range(100):  # (random names: a clash is a freak; bounded all the same)
        path = parent / f".{target.path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        clash = False
        try:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                clash = True
                continue
            yield path
            return
        finally:
            if not clash:
                shutil.rmtree(path, ignore_errors=True)
    raise FileExistsError(f"no free temporary folder name in {parent}")


def commit(target: OutputTarget, complete: Path) -> None:
    """Put a complete file in place: rename it over a regular target, copy its bytes into a special one (which
    blocks on a FIFO until a reader opens it, as ``cp`` does)."""
    if target.special:
        with open(complete, "rb") as src, open(target.path, "wb") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
            dst.flush()
    else:
        os.replace(complete, target.path)


def write_text(out_path: PathLike, text: str, what: str = "the report") -> OutputTarget:
    """Write ``text`` to ``out_path`` by the same rules as OUT: atomically for a regular file (through a
    link), into a FIFO or character device. Returns where it went; nothing is left half-written."""
    target = resolve_output(out_path, what)
    with temp_folder(target) as tmp_dir:
        tmp = tmp_dir / target.path.name
        tmp.write_text(text)
        if not target.special:
            with suppress(OSError):  # a new file: keep the umask-derived mode
                os.chmod(tmp, stat.S_IMODE(target.path.stat().st_mode))
        commit(target, tmp)
    return target


_OWN_FILE = "give the report a file of its own, e.g. report.json"


def preflight_report(report: PathLike, src: Path, dst: Path, model) -> None:
    """``--report`` must name a file of its own: not IN or IN's external data (they would be overwritten with
    JSON), not OUT or OUT's data file (the model would be renamed over it), not a folder. A device or FIFO
    is written into and replaces nothing."""
    if resolve_output(report, "the report").special:  # written into (/dev/null, /dev/stdout): replaces nothing
        return
    report = Path(report)
    for data in external_data_files(model, Path(src).resolve().parent):
        if same_file(report, data):
            raise OutputError(f"--report {report}: is the input model's external data; refusing to overwrite it",
                              _OWN_FILE)
    out_data = dst.with_name(dst.name + ".data")
    if report.absolute() == out_data.absolute() or same_file(report, out_data):
        raise OutputError(f"--report {report}: is where OUT's external data may go", _OWN_FILE)
    if report.name in ("", ".", "..") or report.is_dir():
        raise OutputError(f"--report {report}: is not a file name", "give the report a file name, e.g. report.json")
    if same_file(report, src):
        raise OutputError(f"--report {report}: is the input model itself; refusing to overwrite it", _OWN_FILE)
    if report.absolute() == dst.absolute() or same_file(report, dst):
        raise OutputError(f"--report {report}: is OUT as well; the model would replace the report", _OWN_FILE)


def write_report(path: Path, text: str) -> OutputTarget:
    """The report goes where OUT would (:func:`write_text`: through a link, into a device or FIFO)."""
    try:
        return write_text(path, text + "\n")
    except BrokenPipeError:  # a FIFO or standard output whose reader has gone
        raise OutputError(f"cannot write the report {path}: its reader closed it",
                          "keep the reading end open until the run ends; nothing was written") from None
    except OSError as e:
        raise OutputError(f"cannot write the report {path}: {e.strerror or e}",
                          "check that the report's folder exists and is writable; nothing was written") from None

"""Where OUT goes and how it gets there: OUT's path checks (also made up front by ``preflight_output``),
and the atomic commit that renames the finished files into place (data file first, model last, the previous
data file restored if the model's rename fails). What a path really writes (a link's target, a FIFO or
device written into) is :mod:`.outfile`'s one rule, shared with ``--report``."""
from __future__ import annotations

import logging
import os
from contextlib import suppress
from pathlib import Path

from ..errors import OutputError
from ..words import IN_PLACE
from .outfile import OutputTarget, commit, resolve_output, same_file
from .tensors import PathLike

logger = logging.getLogger(__name__)


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def check_out_path(out: Path) -> Path:
    folder = out.parent
    if out.name in ("", ".", ".."):
        raise OutputError(f"{out}: is not a file name", "give the output a file name, e.g. model_fixed.onnx")
    if out.is_dir():
        raise OutputError(f"{out}: is a directory", "give a file name for the output, e.g. DIR/model_fixed.onnx")
    if not folder.exists():
        raise OutputError(f"{out}: folder {folder} does not exist", "create the folder or choose another output path")
    if not folder.is_dir():
        raise OutputError(f"{out}: {folder} is not a folder", "choose another output path")
    return folder


def refuse_input_as_output(out: Path, src: Path | None, in_place: bool) -> None:
    if src is not None and same_file(out, src) and not in_place:
        raise OutputError(f"{out}: is the input model itself; refusing to overwrite it",
                          f"choose another output path, or pass {IN_PLACE} to replace the input")


def preflight_output(out_path: PathLike, *, source_path: PathLike | None = None, in_place: bool = False) -> None:
    """The checks ``save_model`` makes on OUT before it writes anything, made up front so that a bad OUT
    fails in milliseconds and not after a long patch and check. Writes nothing. ``save_model`` still makes
    them again (and is the real test of writability: permissions can lie, e.g. read-only mounts)."""
    target = resolve_output(out_path)
    out = target.path
    folder = check_out_path(out)
    refuse_input_as_output(out, Path(source_path) if source_path is not None else None, in_place)
    if target.special:  # written into, not renamed over: its folder may be read-only (/dev)
        if not os.access(out, os.W_OK):
            raise OutputError(f"{out}: cannot write to it (permission denied)", "choose another output path")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write to folder {folder} (permission denied)",
                          "check the folder's permissions, or choose another output path")


def commit_files(tmp_model: Path, target: OutputTarget, tmp_data: Path | None, data_final: Path,
                 tmp_dir: Path) -> list[Path]:
    """Rename the written files into place: the data file first, the model last (a failed model rename
    puts the previous data file back); a special target (FIFO, device) is written into instead. Returns
    the files committed, the model first."""
    out = target.path
    committed = [out]
    if tmp_data is not None:
        # keep the previous data file reachable, so a failed model rename can put it back
        backup: Path | None = tmp_dir / "previous.data"
        had_data = data_final.exists()
        try:
            os.link(data_final, backup)
        except OSError:
            backup = None
        os.replace(tmp_data, data_final)
        try:
            os.replace(tmp_model, out)
        except BaseException:
            if backup is not None:
                os.replace(backup, data_final)
            elif not had_data:
                os.unlink(data_final)
            raise
        committed.append(data_final)
    else:
        commit(target, tmp_model)
    if not target.special:
        fsync_dir(out.parent)
    logger.info("wrote %s", ", ".join(map(str, committed)))
    return committed

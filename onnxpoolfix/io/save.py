"""``save_model``: choose how the tensors are stored (inline, keep the source's data files, copy one, or
merge/externalize into ``<OUT>.data``), write everything into a private temporary folder beside OUT, run the
caller's ``before_commit``, then commit atomically (:mod:`.commit`). Any failure leaves nothing behind."""
from __future__ import annotations

import logging
import os
import shutil
import stat
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import onnx
from onnx import ModelProto, TensorProto

from ..errors import InvalidModelError, OutputError
from .commit import check_out_path, commit_files, refuse_input_as_output
from .outfile import resolve_output, same_file, temp_folder
from .tensors import (
    COPY_CHUNK,
    PROTOBUF_LIMIT,
    ExternalRef,
    PathLike,
    TensorPath,
    copy_range,
    external_refs,
    has_external_data,
    inline_nbytes,
    read_range,
    walk_tensors,
)
from .wire import SizeGuessWrong, WireEmitter, metadata_copy, raw_data_mismatch

logger = logging.getLogger(__name__)

#: Inline tensors of at least this many bytes go to the data file with ``save_as_external_data``
#: (the same default as ``onnx.save``).
EXTERNAL_DATA_THRESHOLD = 1024
#: Tensors of at least 1 MiB start at a multiple of 4 KiB in data files we write, so that onnxruntime can
#: memory-map them.
_ALIGN_MIN, _ALIGNMENT = 1 << 20, 4096


# Types whose typed-field (non raw_data) storage numpy_helper turns into exactly the raw_data layout.
_TYPED_TO_RAW_OK = frozenset(
    {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32,
     TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
     TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.COMPLEX64, TensorProto.COMPLEX128}
)


def _external_stub(tensor: TensorProto, entries: dict[str, str]) -> TensorProto:
    """A copy of ``tensor``'s metadata (name, dims, type, ...) pointing at external data, without its data."""
    stub = metadata_copy(tensor)
    for key, val in entries.items():
        entry = stub.external_data.add()
        entry.key, entry.value = key, val
    stub.data_location = TensorProto.EXTERNAL
    return stub


def _inline_bytes(tensor: TensorProto) -> bytes | None:
    """The tensor's data in raw_data layout, or None when it must stay inline (strings, packed types)."""
    if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    if tensor.data_type not in _TYPED_TO_RAW_OK:
        return None
    return onnx.numpy_helper.to_array(tensor).tobytes()


class _DataFileWriter:
    """Appends tensors to one new data file, aligning big ones so onnxruntime can memory-map them."""

    def __init__(self, path: Path):
        self.path = path
        self._f: BinaryIO | None = None
        self._pos = 0

    def append(self, write: Callable[[BinaryIO], None], length: int) -> int:
        if self._f is None:
            self._f = open(self.path, "xb")
        if length >= _ALIGN_MIN and self._pos % _ALIGNMENT:
            pad = _ALIGNMENT - self._pos % _ALIGNMENT
            self._f.write(b"\0" * pad)
            self._pos += pad
        offset = self._pos
        write(self._f)
        self._pos += length
        return offset

    def close(self) -> None:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


def _copy_file(src: Path, dst: Path) -> None:
    """Copy a whole data file in the kernel (copy_file_range: a reflink on CoW filesystems, no user-space
    buffer), falling back to shutil. Not a hard link: onnx >= 1.17 refuses external data files with more
    than one link ("potential hardlink attack"), so a linked output would fail onnx.load and the checker."""
    with open(src, "rb") as fsrc, open(dst, "xb") as fdst:
        try:
            left = os.fstat(fsrc.fileno()).st_size
            while left > 0:
                n = os.copy_file_range(fsrc.fileno(), fdst.fileno(), min(left, 1 << 30))
                if n == 0:
                    break
                left -= n
            if left:
                raise OSError("copy_file_range stopped early")
        except (AttributeError, OSError):
            fsrc.seek(0)
            fdst.seek(0)
            fdst.truncate()
            shutil.copyfileobj(fsrc, fdst, COPY_CHUNK)
        fdst.flush()
        os.fsync(fdst.fileno())


def save_model(
    model: ModelProto,
    out_path: PathLike,
    *,
    source_path: PathLike | None = None,
    save_as_external_data: bool = False,
    in_place: bool = False,
    before_commit: Callable[[Path], None] | None = None,
    size_threshold: int = EXTERNAL_DATA_THRESHOLD,
) -> list[Path]:
    """Write ``model`` to ``out_path`` atomically and return the files written (the model first).

    Everything is written into a private temporary folder inside OUT's folder, then ``before_commit`` (if
    given) is called with the temporary model path (same file name as OUT, its data files beside it, so
    onnxruntime can load it), and only then are the files renamed into place with ``os.replace``, data file
    first and model last. If anything raises, nothing is left behind and a pre-existing OUT is untouched.
    Exceptions from ``before_commit`` propagate unchanged; write failures become ``OutputError``.

    ``source_path`` is the file the model was loaded from: external data locations are relative to its
    folder, and OUT resolving to the same file is refused unless ``in_place``. External data:

    * OUT in the source's folder: locations are kept as they are (the data files are shared, not copied).
    * OUT elsewhere: the output is made self-contained with one data file ``<OUT name>.data`` next to OUT:
      a copy of the single source data file (in-kernel, a reflink where the filesystem can), offsets
      unchanged; with several source data files, their tensors are streamed into it. Not a hard link: onnx
      refuses to load data files that have several links. Naming it after OUT (instead of
      keeping the source names) means we never clobber another model's data file in OUT's folder.
    * ``save_as_external_data``: every tensor of at least ``size_threshold`` bytes, inline or already
      external, goes to ``<OUT name>.data``, streamed one tensor at a time; smaller external tensors are
      brought inline (onnxruntime needs shape-like inputs such as Slice's starts inline).
    * A model that would exceed protobuf's 2 GiB limit with its inline tensors is saved as if
      ``save_as_external_data`` were given (logged), since such a file could never be loaded again.

    ``model`` itself is never modified. Peak memory is the model plus its largest tensor. An OUT that is a
    symbolic link is written through to the file it points to; a FIFO or character device (/dev/null) is
    written into once everything has passed, never renamed over (:mod:`onnxpoolfix.io.outfile`).
    """
    target = resolve_output(out_path)
    out = target.path
    plan = plan_save(model, out, source_path=source_path, save_as_external_data=save_as_external_data,
                     in_place=in_place, special=target.special, size_threshold=size_threshold)
    made = False
    try:
        with temp_folder(target) as tmp_dir:
            made = True
            try:
                tmp_model, tmp_data = write_files(model, plan, tmp_dir, size_threshold)
            except OSError as e:
                raise _not_written(out, e) from e
            if before_commit is not None:  # its exceptions, OSError included, propagate unchanged
                before_commit(tmp_model)
            try:
                return commit_files(tmp_model, target, tmp_data, plan.folder / plan.data_name, tmp_dir)
            except OSError as e:
                raise _not_written(out, e) from e
    except OSError as e:
        if made:  # not the temporary folder's own making
            raise
        raise OutputError(f"{out}: cannot write to folder {plan.folder} ({e.strerror})",
                          "check the folder's permissions and free space, or choose another output path") from None


def _not_written(out: Path, e: OSError) -> OutputError:
    return OutputError(f"{out}: could not write the output ({e.strerror or str(e)})",
                       "check free disk space and the folder's permissions; nothing was written")


@dataclass
class SavePlan:
    """How ``save_model`` stores the tensors (``mode``), decided before anything is written."""

    out: Path
    folder: Path
    model_name: str  # the source file, for messages
    mode: str  # "inline" | "keep" (the source's data files) | "copy" (its one data file) | "merge" (stream all)
    externalize: bool  # every tensor over the threshold goes to the data file (merge mode)
    refs: dict[TensorPath, ExternalRef]
    source_files: list[Path]
    data_name: str  # "<OUT name>.data"
    estimate: WireEmitter  # its size memo is reused when nothing is substituted
    special: bool = False  # OUT is a FIFO or character device, written into (io/outfile.py)


def plan_save(model: ModelProto, out: Path, *, source_path: PathLike | None, save_as_external_data: bool,
              in_place: bool, special: bool = False, size_threshold: int = EXTERNAL_DATA_THRESHOLD) -> SavePlan:
    """Choose the storage mode and refuse every OUT that would overwrite an input, writing nothing."""
    folder = check_out_path(out)
    src = Path(source_path) if source_path is not None else None
    refuse_input_as_output(out, src, in_place)
    model_name = str(src) if src is not None else "model"

    refs: dict[TensorPath, ExternalRef] = {}
    if has_external_data(model):
        if src is None:
            raise ValueError("save_model: source_path is required for a model with external data")
        refs = external_refs(model, src.parent, model_name)
    source_files = list(dict.fromkeys(r.file for r in refs.values()))
    for file in source_files:
        if same_file(out, file):
            raise OutputError(f"{out}: is the external data file of the input model; refusing to overwrite it",
                              "choose another output path")

    externalize = save_as_external_data
    estimate = WireEmitter({})
    if not externalize and estimate.size(model) > PROTOBUF_LIMIT:
        logger.info("%s: over 2 GiB with inline tensors; saving its tensors to external data", out)
        externalize = True
    same_folder = src is not None and same_file(folder, src.parent)
    if externalize:
        mode = "merge"
    elif not refs:
        mode = "inline"
    elif same_folder:
        mode = "keep"
    else:
        mode = "copy" if len(source_files) == 1 else "merge"
    data_name = out.name + ".data"
    data_final = folder / data_name
    # the input's own data file may be replaced only by a true in-place patch (OUT is IN): with --in-place
    # and another OUT it would break IN and every model sharing that file
    replacing_input = in_place and src is not None and same_file(out, src)
    if mode in ("merge", "copy") and not replacing_input and any(same_file(data_final, f) for f in source_files):
        raise OutputError(f"{out}: writing {data_final} would overwrite the input model's external data",
                          "choose another output name or folder")
    if special and mode == "merge" and not refs and not any(
            inline_nbytes(t) >= size_threshold for _, t in walk_tensors(model)):
        mode = "inline"  # no tensor reaches the threshold: there is no data file, a device or FIFO takes it
    if special and mode in ("merge", "copy"):
        raise OutputError(f"{out}: is not a regular file, and the model's weights would go to a data file "
                          f"{data_final} beside it", "write the model to a regular file")
    logger.debug("saving %s (mode %s)", out, mode)
    return SavePlan(out, folder, model_name, mode, externalize, refs, source_files, data_name, estimate, special)


def write_files(model: ModelProto, plan: SavePlan, tmp_dir: Path, size_threshold: int) -> tuple[Path, Path | None]:
    """Write the model (and its data file, if any) into ``tmp_dir``. Returns both paths (data: None when
    no data file was written)."""
    out, refs, model_name, data_name = plan.out, plan.refs, plan.model_name, plan.data_name
    tmp_model, tmp_data = tmp_dir / out.name, tmp_dir / data_name
    replacements: dict[TensorPath, TensorProto] = {}
    if plan.mode == "copy":
        _copy_file(plan.source_files[0], tmp_data)
        by_path = dict(walk_tensors(model))
        for tpath, ref in refs.items():
            replacements[tpath] = _external_stub(by_path[tpath], {**ref.entries, "location": data_name})
    elif plan.mode == "merge":
        writer = _DataFileWriter(tmp_data)
        try:
            for tpath, tensor in walk_tensors(model):
                ref = refs.get(tpath)
                if ref is not None and ref.length < size_threshold:
                    # small tensors go inline: onnxruntime cannot use external shape-like inputs
                    # (Slice starts, Reshape shape) during shape inference
                    replacements[tpath] = inline = metadata_copy(tensor)
                    inline.raw_data = read_range(ref, model_name)
                    continue
                if ref is not None:
                    offset = writer.append(lambda f, ref=ref: copy_range(ref, f, model_name), ref.length)
                    length = ref.length
                elif plan.externalize and inline_nbytes(tensor) >= size_threshold:
                    data = _inline_bytes(tensor)
                    if data is None:
                        continue
                    length = len(data)
                    offset = writer.append(lambda f, data=data: f.write(data), length)
                    del data
                else:
                    continue
                replacements[tpath] = _external_stub(
                    tensor, {"location": data_name, "offset": str(offset), "length": str(length)})
        finally:
            writer.close()

    emitter = WireEmitter(replacements) if replacements else plan.estimate
    for attempt in ("predicted sizes", "exact sizes"):
        size = emitter.size(model)
        if size > PROTOBUF_LIMIT:
            raise OutputError(f"{out}: the model is {size / 2**30:.2f} GiB even with its tensors in external "
                              "data, over protobuf's 2 GiB limit",
                              "the graph itself is too large for one ONNX file")
        try:
            with open(tmp_model, "wb") as f:
                emitter.write(f, model)
                f.flush()
                os.fsync(f.fileno())
            break
        except SizeGuessWrong as e:  # a tensor whose data does not match its dims: size it exactly
            why = raw_data_mismatch(e.tensor) if e.tensor is not None else None
            if why:
                raise InvalidModelError(f"{model_name}: {why}",
                                        "the model is malformed (truncated weights?); re-export it") from None
            if attempt == "exact sizes":
                raise
            logger.debug("%s: %s; writing again with exact sizes", out, e)
            emitter = WireEmitter(replacements, guess=False)
    written = os.path.getsize(tmp_model)
    if written != size:  # a serialiser bug must never produce a silently corrupt file
        raise OutputError(f"{out}: internal error: wrote {written} bytes, expected {size}",
                          "report this bug; the output was not written")
    if not plan.special:
        with suppress(OSError):  # a new file: keep the umask-derived mode it was created with
            os.chmod(tmp_model, stat.S_IMODE(out.stat().st_mode))
    return tmp_model, (tmp_data if tmp_data.exists() else None)  # (the writer opens it at its first tensor)


"""The tensors of a model and their external data: the walk that finds every TensorProto (initializers,
Constant and attribute tensors, sparse tensors, subgraphs, functions), and the validated references to
external data files with their byte ranges (read or streamed, never loaded whole)."""
from __future__ import annotations

import logging
import math
import os
import stat
from pathlib import Path, PurePath
from typing import BinaryIO, Iterator, NamedTuple, Union

import onnx
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    SparseTensorProto,
    TensorProto,
    TrainingInfoProto,
)

from ..errors import InvalidModelError
from ..graph import is_repeated

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


#: Largest message protobuf can parse (2 GiB - 1). A model file must stay at or below it.
PROTOBUF_LIMIT = 2**31 - 1


COPY_CHUNK = 16 << 20


HINT_EXTERNAL = "keep the model's external data file(s) next to it (copy or move them together with the .onnx file)"


HINT_REEXPORT = "re-export or re-download the model; the file is probably truncated or not an ONNX model"


# Messages that can (transitively) hold a TensorProto; everything else is copied through whole.
CONTAINERS = frozenset(
    d.DESCRIPTOR
    for d in (ModelProto, GraphProto, FunctionProto, TrainingInfoProto, NodeProto, AttributeProto, SparseTensorProto)
)


#: a TensorProto's values, and with where they are stored, all its data
VALUE_FIELDS = frozenset({"raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
                          "uint64_data"})
DATA_FIELDS = VALUE_FIELDS | {"external_data", "data_location"}


TensorPath = tuple  # ((field number, index), ...) from the ModelProto down to a TensorProto


def message_fields(msg) -> Iterator[tuple]:
    """Yield ``(field, step, value)`` for every set field in wire order; ``step`` is None for non-message
    fields, else ``(field number, index)`` with repeated message fields expanded item by item."""
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            yield fd, None, value
        elif is_repeated(fd):
            for i, item in enumerate(value):
                yield fd, (fd.number, i), item
        else:
            yield fd, (fd.number, 0), value


def walk_tensors(msg, path: TensorPath = ()) -> Iterator[tuple[TensorPath, TensorProto]]:
    """Every TensorProto in the model: initializers, sparse tensors, Constant/attribute tensors, subgraphs
    and functions (a superset of what ``onnx.external_data_helper`` visits)."""
    for _fd, step, value in message_fields(msg):
        if step is None:
            continue
        if value.DESCRIPTOR is TensorProto.DESCRIPTOR:
            yield path + (step,), value
        elif value.DESCRIPTOR in CONTAINERS:
            yield from walk_tensors(value, path + (step,))


def is_external(tensor: TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == TensorProto.EXTERNAL


def has_external_data(model: ModelProto) -> bool:
    """True when some tensor of ``model`` keeps its data in an external file (a reference, not loaded)."""
    return any(is_external(t) for _, t in walk_tensors(model))


def external_data_files(model: ModelProto, base_dir: PathLike) -> list[Path]:
    """The external data files ``model`` references, resolved against ``base_dir`` (the model file's folder),
    each once, in first-use order. Nothing is checked here; ``load_model`` validates them."""
    return list(dict.fromkeys(Path(os.path.normpath(Path(base_dir) / _entries(t).get("location", "")))
                              for _, t in walk_tensors(model) if is_external(t)))


def _entries(tensor: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


class ExternalRef(NamedTuple):
    """A validated external-data reference: the file, and the byte range the tensor occupies in it."""

    file: Path
    offset: int
    length: int
    entries: dict[str, str]


def _resolve_ref(tensor: TensorProto, base_dir: Path, model_name: str, sizes: dict[Path, int]) -> ExternalRef:
    """Validate one external reference the way onnx does (relative, inside the model's folder, a regular
    file, not a symlink) and check the byte range exists, so a missing or truncated data file is reported
    at load time and not as a crash deep inside onnxruntime."""
    entries = _entries(tensor)
    where = f"{model_name}: tensor '{tensor.name}'"
    location = entries.get("location", "")
    if not location:
        raise InvalidModelError(f"{where} is marked as external data but names no file", HINT_REEXPORT)
    if PurePath(location).is_absolute() or os.path.isabs(location):
        raise InvalidModelError(
            f"{where} stores its data at the absolute path {location}, which ONNX does not allow",
            "re-save the model with its external data relative to the model file",
        )
    file = Path(os.path.normpath(base_dir / location))
    base_real, file_real = os.path.realpath(base_dir), os.path.realpath(file)
    if os.path.commonpath([base_real, file_real]) != base_real:
        raise InvalidModelError(
            f"{where} stores its data in {location}, outside the model's folder {base_dir}",
            "re-save the model with its external data inside the model's folder",
        )
    try:
        offset = int(entries.get("offset", "0") or 0)
        length = int(entries["length"]) if entries.get("length") else None
    except ValueError:
        raise InvalidModelError(f"{where} has a non-integer external data offset/length", HINT_REEXPORT) from None
    if offset < 0 or (length is not None and length < 0):
        raise InvalidModelError(f"{where} has a negative external data offset/length", HINT_REEXPORT)
    if file not in sizes:
        if os.path.islink(file):
            raise InvalidModelError(f"{where} stores its data in {file}, a symbolic link, which ONNX refuses",
                                    "replace the link by the file itself")
        try:
            st = os.stat(file)
        except OSError:
            raise InvalidModelError(f"{where} stores its data in {file}, which does not exist",
                                    HINT_EXTERNAL) from None
        if not stat.S_ISREG(st.st_mode):
            raise InvalidModelError(f"{where} stores its data in {file}, which is not a regular file", HINT_EXTERNAL)
        if not os.access(file, os.R_OK):
            raise InvalidModelError(f"{where} stores its data in {file}, which is not readable (permission denied)",
                                    "check the data file's permissions")
        sizes[file] = st.st_size
    size = sizes[file]
    if length is None:
        length = size - offset
    if offset + length > size or length < 0:
        raise InvalidModelError(
            f"{where} needs bytes {offset}..{offset + length} of {file}, which has only {size} bytes (truncated?)",
            HINT_EXTERNAL,
        )
    return ExternalRef(file, offset, length, entries)


def external_refs(model: ModelProto, base_dir: Path, model_name: str) -> dict[TensorPath, ExternalRef]:
    sizes: dict[Path, int] = {}
    return {p: _resolve_ref(t, base_dir, model_name, sizes) for p, t in walk_tensors(model) if is_external(t)}


def read_range(ref: ExternalRef, model_name: str) -> bytes:
    with open(ref.file, "rb") as f:
        f.seek(ref.offset)
        data = f.read(ref.length)
    if len(data) != ref.length:
        raise InvalidModelError(f"{model_name}: external data file {ref.file} ended early (truncated?)", HINT_EXTERNAL)
    return data


def copy_range(ref: ExternalRef, dst: BinaryIO, model_name: str) -> None:
    """Stream one tensor's bytes from a source data file: a bounded buffer, never the whole tensor."""
    buf = bytearray(min(COPY_CHUNK, max(ref.length, 1)))
    view = memoryview(buf)
    left = ref.length
    with open(ref.file, "rb") as src:
        src.seek(ref.offset)
        while left:
            n = src.readinto(view[: min(left, len(buf))])
            if not n:
                raise InvalidModelError(f"{model_name}: external data file {ref.file} ended early (truncated?)",
                                        HINT_EXTERNAL)
            dst.write(view[:n])
            left -= n


def inline_nbytes(tensor: TensorProto) -> int:
    """Approximate data size of an inline tensor, from its shape (no copy of the data)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # unknown/odd type: decide from the shape alone
        itemsize = 1
    return math.prod(tensor.dims) * itemsize

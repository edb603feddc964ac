"""Reading and writing ONNX models without ever corrupting or half-writing one.

The tool sits in deployment pipelines, so this module is deliberately defensive:

* ``load_model`` turns every way a file can fail to be an ONNX model into one ``InvalidModelError`` whose
  message names the file and the problem. By default it leaves external tensors as references, so the graph
  can be patched without reading gigabytes of weights.
* ``save_model`` writes everything into a private temporary folder inside OUT's folder and only renames the
  files into place at the very end; any failure (including the caller's ``before_commit`` check) leaves no
  trace and leaves a pre-existing OUT untouched.
* The model is serialised piece by piece (one top-level tensor at a time) by ``_Emitter``, so saving needs
  about the model's own memory plus its largest tensor (plain ``onnx.save`` needs model + a full serialised
  copy), the caller's ``ModelProto`` is never modified, and a model whose tensors are external references is
  re-homed or converted to one ``<OUT name>.data`` file by streaming the bytes, never loading them all.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePath
from typing import BinaryIO, Callable, Iterator, Union

import onnx
from google.protobuf.message import DecodeError
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

from .errors import InvalidModelError, OutputError
from .outfile import commit, resolve_output, temp_folder

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

#: Largest message protobuf can parse (2 GiB - 1). A model file must stay at or below it.
PROTOBUF_LIMIT = 2**31 - 1
#: Inline tensors of at least this many bytes go to the data file with ``save_as_external_data``
#: (the same default as ``onnx.save``).
EXTERNAL_DATA_THRESHOLD = 1024
#: Tensors of at least 1 MiB start at a multiple of 4 KiB in data files we write, so that onnxruntime can
#: memory-map them.
_ALIGN_MIN, _ALIGNMENT = 1 << 20, 4096
#: External tensors smaller than this are read and made inline by ``load_model`` even without
#: ``load_external_data``: they are values (output sizes, shapes) that the patch and shape inference read.
SMALL_EXTERNAL_INLINE = 1024
_COPY_CHUNK = 16 << 20

_HINT_EXTERNAL = "keep the model's external data file(s) next to it (copy or move them together with the .onnx file)"
_HINT_REEXPORT = "re-export or re-download the model; the file is probably truncated or not an ONNX model"

# Messages that can (transitively) hold a TensorProto; everything else is copied through whole.
_CONTAINERS = frozenset(
    d.DESCRIPTOR
    for d in (ModelProto, GraphProto, FunctionProto, TrainingInfoProto, NodeProto, AttributeProto, SparseTensorProto)
)
# Containers that are always written field by field, so no single big serialised copy of them is made.
_STRUCTURAL = frozenset(d.DESCRIPTOR for d in (ModelProto, GraphProto, FunctionProto, TrainingInfoProto))
_DATA_FIELDS = frozenset(
    {"raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data",
     "external_data", "data_location"}
)
# Types whose typed-field (non raw_data) storage numpy_helper turns into exactly the raw_data layout.
_TYPED_TO_RAW_OK = frozenset(
    {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32,
     TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
     TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.COMPLEX64, TensorProto.COMPLEX128}
)

TensorPath = tuple  # ((field number, index), ...) from the ModelProto down to a TensorProto


# --------------------------------------------------------------------------------------------- traversal


def _is_repeated(fd) -> bool:
    is_rep = getattr(fd, "is_repeated", None)
    return bool(is_rep) if is_rep is not None else fd.label == fd.LABEL_REPEATED


def _fields(msg) -> Iterator[tuple]:
    """Yield ``(field, step, value)`` for every set field in wire order; ``step`` is None for non-message
    fields, else ``(field number, index)`` with repeated message fields expanded item by item."""
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            yield fd, None, value
        elif _is_repeated(fd):
            for i, item in enumerate(value):
                yield fd, (fd.number, i), item
        else:
            yield fd, (fd.number, 0), value


def _walk_tensors(msg, path: TensorPath = ()) -> Iterator[tuple[TensorPath, TensorProto]]:
    """Every TensorProto in the model: initializers, sparse tensors, Constant/attribute tensors, subgraphs
    and functions (a superset of what ``onnx.external_data_helper`` visits)."""
    for _fd, step, value in _fields(msg):
        if step is None:
            continue
        if value.DESCRIPTOR is TensorProto.DESCRIPTOR:
            yield path + (step,), value
        elif value.DESCRIPTOR in _CONTAINERS:
            yield from _walk_tensors(value, path + (step,))


def _is_external(tensor: TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == TensorProto.EXTERNAL


def has_external_data(model: ModelProto) -> bool:
    """True when some tensor of ``model`` keeps its data in an external file (a reference, not loaded)."""
    return any(_is_external(t) for _, t in _walk_tensors(model))


def external_data_files(model: ModelProto, base_dir: PathLike) -> list[Path]:
    """The external data files ``model`` references, resolved against ``base_dir`` (the model file's folder),
    each once, in first-use order. Nothing is checked here; ``load_model`` validates them."""
    seen: dict[str, Path] = {}
    for _, tensor in _walk_tensors(model):
        if _is_external(tensor):
            location = _entries(tensor).get("location", "")
            path = Path(os.path.normpath(Path(base_dir) / location))
            seen.setdefault(str(path), path)
    return list(seen.values())


# --------------------------------------------------------------------------------------------- external refs


def _entries(tensor: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


class _ExternalRef:
    """A validated external-data reference: the file, and the byte range the tensor occupies in it."""

    __slots__ = ("file", "offset", "length", "entries")

    def __init__(self, file: Path, offset: int, length: int, entries: dict[str, str]):
        self.file, self.offset, self.length, self.entries = file, offset, length, entries


def _resolve_ref(tensor: TensorProto, base_dir: Path, model_name: str, sizes: dict[Path, int]) -> _ExternalRef:
    """Validate one external reference the way onnx does (relative, inside the model's folder, a regular
    file, not a symlink) and check the byte range exists, so a missing or truncated data file is reported
    at load time and not as a crash deep inside onnxruntime."""
    entries = _entries(tensor)
    where = f"{model_name}: tensor '{tensor.name}'"
    location = entries.get("location", "")
    if not location:
        raise InvalidModelError(f"{where} is marked as external data but names no file", _HINT_REEXPORT)
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
        raise InvalidModelError(f"{where} has a non-integer external data offset/length", _HINT_REEXPORT) from None
    if offset < 0 or (length is not None and length < 0):
        raise InvalidModelError(f"{where} has a negative external data offset/length", _HINT_REEXPORT)
    if file not in sizes:
        if os.path.islink(file):
            raise InvalidModelError(f"{where} stores its data in {file}, a symbolic link, which ONNX refuses",
                                    "replace the link by the file itself")
        try:
            st = os.stat(file)
        except OSError:
            raise InvalidModelError(f"{where} stores its data in {file}, which does not exist",
                                    _HINT_EXTERNAL) from None
        if not stat.S_ISREG(st.st_mode):
            raise InvalidModelError(f"{where} stores its data in {file}, which is not a regular file", _HINT_EXTERNAL)
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
            _HINT_EXTERNAL,
        )
    return _ExternalRef(file, offset, length, entries)


def _external_refs(model: ModelProto, base_dir: Path, model_name: str) -> dict[TensorPath, _ExternalRef]:
    sizes: dict[Path, int] = {}
    return {p: _resolve_ref(t, base_dir, model_name, sizes) for p, t in _walk_tensors(model) if _is_external(t)}


def _read_range(ref: _ExternalRef, model_name: str) -> bytes:
    with open(ref.file, "rb") as f:
        f.seek(ref.offset)
        data = f.read(ref.length)
    if len(data) != ref.length:
        raise InvalidModelError(f"{model_name}: external data file {ref.file} ended early (truncated?)", _HINT_EXTERNAL)
    return data


def _copy_range(ref: _ExternalRef, dst: BinaryIO, model_name: str) -> None:
    """Stream one tensor's bytes from a source data file: a bounded buffer, never the whole tensor."""
    buf = bytearray(min(_COPY_CHUNK, max(ref.length, 1)))
    view = memoryview(buf)
    left = ref.length
    with open(ref.file, "rb") as src:
        src.seek(ref.offset)
        while left:
            n = src.readinto(view[: min(left, len(buf))])
            if not n:
                raise InvalidModelError(f"{model_name}: external data file {ref.file} ended early (truncated?)",
                                        _HINT_EXTERNAL)
            dst.write(view[:n])
            left -= n


# --------------------------------------------------------------------------------------------- loading


_TENSOR_DATA_FIELDS = frozenset({"raw_data", "float_data", "int32_data", "string_data", "int64_data",
                                 "double_data", "uint64_data"})


def _invalid_utf8_field(msg, where: str = "") -> str | None:
    """The first string field holding invalid UTF-8 (protobuf's Python runtime hands such proto2 strings back
    as bytes, or raises, far from the load: a corrupt name would become an internal error deep inside the
    patch). Walks every message but never touches tensor data."""
    skip = _TENSOR_DATA_FIELDS if msg.DESCRIPTOR is TensorProto.DESCRIPTOR else ()
    for fd in msg.DESCRIPTOR.fields:
        if fd.name in skip:
            continue
        rep = _is_repeated(fd)
        if not rep and not msg.HasField(fd.name):
            continue
        try:
            value = getattr(msg, fd.name)
            items = list(value) if rep else [value]
        except UnicodeDecodeError:
            return f"field {where}{fd.name}"
        if not items:
            continue
        if fd.type == fd.TYPE_STRING:
            if any(not isinstance(v, str) for v in items):
                return f"field {where}{fd.name}"
        elif fd.type == fd.TYPE_MESSAGE:
            for i, v in enumerate(items):
                bad = _invalid_utf8_field(v, f"{where}{fd.name}[{i}]." if rep else f"{where}{fd.name}.")
                if bad:
                    return bad
    return None


def _not_a_model_reason(model: ModelProto) -> str | None:
    """Why a message that parsed is not an ONNX model. Protobuf happily parses a serialised TensorProto,
    GraphProto or NodeProto (or many random byte strings) as a ModelProto: its fields land in unknown or
    wrong fields, leaving these tell-tale gaps."""
    if model.ir_version <= 0:
        return "it has no ir_version"
    if not model.HasField("graph"):
        return "it has no graph"
    if not model.opset_import:
        return "it has no opset_import"
    if not model.graph.node:
        return "its graph has no nodes"
    return None


def load_model(path: PathLike, *, load_external_data: bool = False) -> ModelProto:
    """Read an ONNX model, raising ``InvalidModelError`` (one line naming the file) for anything that is not
    a readable, well-formed ONNX model file.

    With ``load_external_data=False`` (the default) tensors stored in external files stay references
    (``data_location == EXTERNAL``): the graph can be patched and re-saved without reading the weights.
    Only external tensors under ``SMALL_EXTERNAL_INLINE`` bytes (sizes and shapes, not weights) are read
    and made inline.
    The referenced files are still checked to exist and hold the referenced byte ranges, so a broken
    model is rejected up front. The ONNX checker is not run here; see ``check_model``.
    """
    p = Path(path)
    name = str(p)
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidModelError(f"{name}: no such file", "check the model path") from None
    except PermissionError:
        raise InvalidModelError(f"{name}: cannot access the file (permission denied)",
                                "check the permissions of the file and its folders") from None
    except OSError as e:
        raise InvalidModelError(f"{name}: cannot access the file ({e.strerror})", "check the model path") from None
    if stat.S_ISDIR(st.st_mode):
        raise InvalidModelError(f"{name}: is a directory, not an ONNX model file", "pass the .onnx file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidModelError(f"{name}: is not a regular file", "pass an .onnx model file")
    if st.st_size == 0:
        raise InvalidModelError(f"{name}: is empty (0 bytes)", "the export or copy probably failed; re-export it")
    if st.st_size > PROTOBUF_LIMIT:
        raise InvalidModelError(
            f"{name}: is {st.st_size / 2**30:.2f} GiB, over protobuf's 2 GiB limit, so it cannot be parsed",
            "re-export it with its weights in external data (torch.onnx.export(..., external_data=True) or "
            "onnx.save(model, path, save_as_external_data=True))",
        )
    try:
        with open(p, "rb") as f:
            data = f.read()
    except PermissionError:
        raise InvalidModelError(f"{name}: cannot read the file (permission denied)",
                                "check the file's permissions") from None
    except OSError as e:
        raise InvalidModelError(f"{name}: cannot read the file ({e.strerror})", "check the file and the disk") from None
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise InvalidModelError(f"{name}: is not a valid ONNX file (protobuf parsing failed: truncated or corrupt)",
                                _HINT_REEXPORT) from None
    finally:
        del data
    bad_text = _invalid_utf8_field(model)
    if bad_text:
        raise InvalidModelError(f"{name}: is corrupt: {bad_text} is not valid UTF-8 text", _HINT_REEXPORT)
    reason = _not_a_model_reason(model)
    if reason:
        raise InvalidModelError(
            f"{name}: is not an ONNX model (it parses as protobuf, but {reason})",
            "pass an ONNX model file; a file holding only a tensor, a graph or a node, or another format, "
            "cannot be patched",
        )
    refs = _external_refs(model, p.parent, name)
    if refs:
        logger.debug("%s: %d external tensors in %d file(s)", name, len(refs), len({r.file for r in refs.values()}))
    if refs:
        by_path = dict(_walk_tensors(model))
        for tpath, ref in refs.items():
            # tiny external tensors (output sizes, Reshape targets: a few bytes) are values the patch reads,
            # not weights: bring them inline, as save_model does for onnxruntime's sake
            if load_external_data or ref.length < SMALL_EXTERNAL_INLINE:
                tensor = by_path[tpath]
                tensor.raw_data = _read_range(ref, name)
                del tensor.external_data[:]
                tensor.ClearField("data_location")
    return model


def _run_checker(model_or_path) -> None:
    """``onnx.checker.check_model(..., full_check=True)`` with the C++ checker's own prints (e.g. "Warning:
    Model contains experimental ops: ATen", written straight to file descriptor 1) sent to the log instead:
    the tool's stdout is the report, and ``-q`` promises silence."""
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no usable fd 1: nothing to protect
        onnx.checker.check_model(model_or_path, full_check=True)
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            onnx.checker.check_model(model_or_path, full_check=True)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            said = sink.read().decode("utf-8", "replace").strip()
            if said:
                logger.debug("onnx checker: %s", said)


def check_model(model: ModelProto, path: PathLike | None = None) -> None:
    """Run ``onnx.checker.check_model`` with ``full_check=True`` (so shape/type inference errors count too),
    raising ``InvalidModelError`` with the checker's first line.

    A model with external data or over 2 GiB cannot be checked in memory (the checker would resolve the
    data files against the current folder, or protobuf refuses the size), so it is checked from ``path``,
    the file it was saved to (e.g. the temporary file given to ``save_model``'s ``before_commit``).
    Small self-contained models are checked in memory and ``path`` only names them in messages.
    """
    name = str(path) if path is not None else "model"
    by_path = has_external_data(model) or _Emitter({}).size(model) > PROTOBUF_LIMIT
    if by_path and path is None:
        raise ValueError("check_model: a model with external data or over 2 GiB must be checked by path")
    try:
        _run_checker(str(path) if by_path else model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        full = str(e).strip()
        logger.debug("%s: checker says:\n%s", name, full)
        first = full.splitlines()[0] if full else type(e).__name__
        raise InvalidModelError(f"{name}: fails the ONNX checker: {first}",
                                "the model is malformed; re-export it or fix the exporter") from None


_LIGHT_STUB_FILE = "onnxpoolfix-checker-stub.data"


def check_input_model(model: ModelProto, path: PathLike) -> None:
    """``check_model`` for a model just loaded from ``path``, without copying or serialising its weights.

    Leftovers inside model-local functions (``export_modules_as_functions``) make the checker's inference of
    the function bodies fail (the aten node's output has no type, so the next op's input has none): when
    the checker refuses such a model, the model with those functions inlined, as the patch will do it,
    is checked instead.

    With external data, the file itself is checked by path (its weights stay on disk; only the graph is
    parsed). A self-contained model is checked as a *light* copy: every initializer over 1 KiB is replaced
    by an external-data stub (name, dims, dtype) pointing at an empty placeholder file in a private temporary
    folder, so a 500 MB model costs the checker a few KB. Not checked: that those initializers' bytes are
    as long as their dims say for tensors of 64 KiB and more (reading the length would copy the tensor):
    ``save_model`` stops with the same error when it writes one (exit 3, nothing written).
    """
    try:
        _check_input_model(model, path)
    except InvalidModelError:
        from .api import inline_functions_holding_leftovers
        from .subgraphs import typed_copy

        # torch leaves the outputs of leftovers in If/Loop bodies, and the bodies' own outputs, untyped: a
        # real export, judged with those types filled in as the patch will fill them
        typed = typed_copy(model)
        if typed is not None:
            _check_input_model(typed, path)
            return
        inlined, holders = inline_functions_holding_leftovers(model)
        if not holders:
            raise
        _check_input_model(inlined, path)


def _check_input_model(model: ModelProto, path: PathLike) -> None:
    name = str(path)
    if has_external_data(model):  # (load_model refuses files over 2 GiB, so the rest fit in memory)
        check_model(model, path)
        return
    from .shapes import _small, light_copy

    # the light copy below hides the bytes of every initializer over 1 KiB from the checker; those under
    # _GUESS_MIN are measured here (cheap), the larger ones when save_model writes them (it predicts their
    # size from dims x dtype and stops with this same error when the data disagrees)
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL and not _small(t) and _inline_nbytes(t) < _GUESS_MIN:
            why = _raw_data_mismatch(t)
            if why:
                raise InvalidModelError(f"{name}: {why}", "the model is malformed (truncated weights?); re-export it")
    light = light_copy(model, stub_location=_LIGHT_STUB_FILE)
    with tempfile.TemporaryDirectory(prefix=".onnxpoolfix-checker-") as tmp:
        (Path(tmp) / _LIGHT_STUB_FILE).touch()
        light_path = Path(tmp) / Path(name).name
        with open(light_path, "wb") as f:
            f.write(light.SerializeToString())
        try:
            _run_checker(str(light_path))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            full = str(e).strip().replace(str(light_path), name).replace(str(tmp), str(Path(name).parent))
            logger.debug("%s: checker says:\n%s", name, full)
            first = full.splitlines()[0] if full else type(e).__name__
            raise InvalidModelError(f"{name}: fails the ONNX checker: {first}",
                                    "the model is malformed; re-export it or fix the exporter") from None


# --------------------------------------------------------------------------------------------- serialising


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _one_field(msg, fd, value) -> bytes:
    """The wire encoding of one non-message field (via a throwaway message holding only that field)."""
    tmp = type(msg)()
    if _is_repeated(fd):
        getattr(tmp, fd.name).extend(value)
    else:
        setattr(tmp, fd.name, value)
    return tmp.SerializeToString()


class _SizeGuessWrong(Exception):
    """A tensor's serialised size differed from the prediction made from its dims and dtype."""

    def __init__(self, message: str, tensor=None):
        super().__init__(message)
        self.tensor = tensor


def _raw_data_mismatch(t: TensorProto) -> str | None:
    """Why ``t``'s raw_data cannot hold its dims x dtype (truncated or padded weights), or None. Reads the
    bytes' length, which copies them: only for tensors already suspected, or small ones."""
    if not t.HasField("raw_data") or t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED) \
            or t.data_type in _SUB_BYTE_TYPES:
        return None
    try:
        need = math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # noqa: BLE001 - an unknown dtype is the checker's business
        return None
    have = len(t.raw_data)
    if have == need:
        return None
    return f"tensor '{t.name}' holds {have} bytes of data; its dims {list(t.dims)} need {need}"


_SUB_BYTE_TYPES = frozenset(getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1", "UINT2", "INT2",
                                                              "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n))
_GUESS_MIN = 1 << 16  # below this, ByteSize() is cheap enough to be exact
_RAW_DATA_TAG = bytes([TensorProto.RAW_DATA_FIELD_NUMBER << 3 | 2])


def _guess_tensor_size(value) -> int | None:
    """The serialised size of a big raw_data TensorProto, predicted without encoding (or copying) its
    bytes: its other fields' size + the raw_data field for dims x itemsize bytes. None when not applicable
    (not a tensor, small, no raw_data, sub-byte or variable-size dtype)."""
    if value.DESCRIPTOR is not TensorProto.DESCRIPTOR or not value.HasField("raw_data"):
        return None
    if value.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(value.data_type).itemsize
    except Exception:  # noqa: BLE001 - unknown dtype: let ByteSize decide
        return None
    if value.data_type in _SUB_BYTE_TYPES:
        return None
    n = math.prod(value.dims) * itemsize
    if n < _GUESS_MIN:
        return None
    meta = _metadata_copy(value, skip=("raw_data",))
    return meta.ByteSize() + len(_RAW_DATA_TAG) + len(_varint(n)) + n


class _Emitter:
    """Serialise a ModelProto to a file piece by piece, substituting some TensorProtos.

    Structural messages (model, graph, function) and any message on the way to a substituted tensor are
    written field by field (tag, length, contents); everything else is serialised whole, one at a time. The
    output is byte-identical to ``SerializeToString()`` when nothing is substituted (unknown fields of
    messages written field by field are dropped; ONNX files do not use them)."""

    def __init__(self, replacements: dict[TensorPath, TensorProto], *, guess: bool = True):
        self._repl = replacements
        self._inner = {p[:k] for p in replacements for k in range(len(p))}
        self._sizes: dict[TensorPath, int] = {}
        # Sizes of big raw_data tensors are predicted from dims x dtype (``_guess_tensor_size``) instead of
        # ``ByteSize()``, which upb computes by encoding the whole tensor (seconds per 400 MB). ``write``
        # serialises every tensor anyway and raises ``_SizeGuessWrong`` if a prediction was off (a malformed
        # tensor), before anything is committed; the caller then starts over with ``guess=False``.
        self._guess = guess
        self._guessed: dict[TensorPath, int] = {}

    def _descend(self, msg, path: TensorPath) -> bool:
        return msg.DESCRIPTOR in _STRUCTURAL or path in self._inner

    def size(self, msg, path: TensorPath = ()) -> int:
        """Size in bytes of ``msg`` (at ``path``) as ``write`` will write it."""
        if path in self._sizes:
            return self._sizes[path]
        total = 0
        for fd, step, value in _fields(msg):
            if step is None:
                total += len(_one_field(msg, fd, value))
                continue
            sub = path + (step,)
            if sub in self._repl:
                n = self._repl[sub].ByteSize()
            elif value.DESCRIPTOR in _CONTAINERS and self._descend(value, sub):
                n = self.size(value, sub)
            else:
                n = _guess_tensor_size(value) if self._guess else None
                if n is None:
                    n = value.ByteSize()
                else:
                    self._guessed[sub] = n
            total += len(_varint(fd.number << 3 | 2)) + len(_varint(n)) + n
        self._sizes[path] = total
        return total

    def write(self, f: BinaryIO, msg, path: TensorPath = ()) -> None:
        for fd, step, value in _fields(msg):
            if step is None:
                f.write(_one_field(msg, fd, value))
                continue
            sub = path + (step,)
            tag = _varint(fd.number << 3 | 2)
            if sub not in self._repl and value.DESCRIPTOR in _CONTAINERS and self._descend(value, sub):
                f.write(tag + _varint(self.size(value, sub)))
                self.write(f, value, sub)
                continue
            data = (self._repl[sub] if sub in self._repl else value).SerializeToString()
            if sub in self._guessed and len(data) != self._guessed[sub]:
                raise _SizeGuessWrong(f"tensor at {sub}: {len(data)} bytes, predicted {self._guessed[sub]}", value)
            f.write(tag + _varint(len(data)))
            f.write(data)
            del data


def _metadata_copy(tensor: TensorProto, skip=_DATA_FIELDS) -> TensorProto:
    """A copy of ``tensor`` without the fields in ``skip``. Fields are read one by one through the
    descriptor: ``ListFields()`` would materialise (copy) the data fields too."""
    stub = TensorProto()
    for fd in TensorProto.DESCRIPTOR.fields:
        if fd.name in skip:
            continue
        if _is_repeated(fd):
            value = getattr(tensor, fd.name)
            if not len(value):
                continue
        elif not tensor.HasField(fd.name):
            continue
        else:
            value = getattr(tensor, fd.name)
        if _is_repeated(fd):
            field = getattr(stub, fd.name)
            if fd.type == fd.TYPE_MESSAGE:
                for item in value:
                    field.add().CopyFrom(item)
            else:
                field.extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(stub, fd.name).CopyFrom(value)
        else:
            setattr(stub, fd.name, value)
    return stub


def _external_stub(tensor: TensorProto, entries: dict[str, str]) -> TensorProto:
    """A copy of ``tensor``'s metadata (name, dims, type, ...) pointing at external data, without its data."""
    stub = _metadata_copy(tensor)
    for key, val in entries.items():
        entry = stub.external_data.add()
        entry.key, entry.value = key, val
    stub.data_location = TensorProto.EXTERNAL
    return stub


def _inline_copy(tensor: TensorProto, raw: bytes) -> TensorProto:
    """A copy of ``tensor``'s metadata holding ``raw`` inline (for a small tensor read from a data file)."""
    stub = _external_stub(tensor, {})
    del stub.external_data[:]
    stub.ClearField("data_location")
    stub.raw_data = raw
    return stub


def _inline_nbytes(tensor: TensorProto) -> int:
    """Approximate data size of an inline tensor, from its shape (no copy of the data)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # unknown/odd type: decide from the shape alone
        itemsize = 1
    return math.prod(tensor.dims) * itemsize


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

    @property
    def used(self) -> bool:
        return self._f is not None

    def close(self) -> None:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


# --------------------------------------------------------------------------------------------- saving


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
            shutil.copyfileobj(fsrc, fdst, _COPY_CHUNK)
        fdst.flush()
        os.fsync(fdst.fileno())


def _resolve_out(out_path: PathLike) -> Path:
    """OUT, or the file it links to: a symbolic link is written through, as cp does (replacing the link with a
    regular file would leave the file it points to unpatched); see :mod:`onnxpoolfix.outfile`."""
    return resolve_output(out_path).path


def _check_out_path(out: Path) -> Path:
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


def _refuse_input_as_output(out: Path, src: Path | None, in_place: bool) -> None:
    if src is not None and _same_file(out, src) and not in_place:
        raise OutputError(f"{out}: is the input model itself; refusing to overwrite it",
                          "choose another output path, or pass --in-place to replace the input")


def preflight_output(out_path: PathLike, *, source_path: PathLike | None = None, in_place: bool = False) -> None:
    """The checks ``save_model`` makes on OUT before it writes anything, made up front so that a bad OUT
    fails in milliseconds and not after a long patch and check. Writes nothing. ``save_model`` still makes
    them again (and is the real test of writability: permissions can lie, e.g. read-only mounts)."""
    target = resolve_output(out_path)
    out = target.path
    folder = _check_out_path(out)
    _refuse_input_as_output(out, Path(source_path) if source_path is not None else None, in_place)
    if target.special:  # written into, not renamed over: its folder may be read-only (/dev)
        if not os.access(out, os.W_OK):
            raise OutputError(f"{out}: cannot write to it (permission denied)", "choose another output path")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write to folder {folder} (permission denied)",
                          "check the folder's permissions, or choose another output path")


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
    written into once everything has passed, never renamed over (:mod:`onnxpoolfix.outfile`).
    """
    target = resolve_output(out_path)
    out = target.path
    folder = _check_out_path(out)
    src = Path(source_path) if source_path is not None else None
    _refuse_input_as_output(out, src, in_place)
    model_name = str(src) if src is not None else "model"

    refs: dict[TensorPath, _ExternalRef] = {}
    if has_external_data(model):
        if src is None:
            raise ValueError("save_model: source_path is required for a model with external data")
        refs = _external_refs(model, src.parent, model_name)
    source_files = list(dict.fromkeys(r.file for r in refs.values()))
    for file in source_files:
        if _same_file(out, file):
            raise OutputError(f"{out}: is the external data file of the input model; refusing to overwrite it",
                              "choose another output path")

    externalize = save_as_external_data
    estimate = _Emitter({})  # its size memo is reused below when nothing is substituted
    if not externalize and estimate.size(model) > PROTOBUF_LIMIT:
        logger.info("%s: over 2 GiB with inline tensors; saving its tensors to external data", out)
        externalize = True
    same_folder = src is not None and _same_file(folder, src.parent)
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
    replacing_input = in_place and src is not None and _same_file(out, src)
    if mode in ("merge", "copy") and not replacing_input and any(_same_file(data_final, f) for f in source_files):
        raise OutputError(f"{out}: writing {data_final} would overwrite the input model's external data",
                          "choose another output name or folder")
    if target.special and mode in ("merge", "copy"):
        raise OutputError(f"{out}: is not a regular file, and the model's weights would go to a data file "
                          f"{data_final} beside it", "write the model to a regular file")
    logger.debug("saving %s (mode %s)", out, mode)

    try:
        tmp_dir = temp_folder(target)
    except OSError as e:
        raise OutputError(f"{out}: cannot write to folder {folder} ({e.strerror})",
                          "check the folder's permissions and free space, or choose another output path") from None
    tmp_model, tmp_data = tmp_dir / out.name, tmp_dir / data_name
    phase = "write"
    try:
        replacements: dict[TensorPath, TensorProto] = {}
        data_written = False
        if mode == "copy":
            _copy_file(source_files[0], tmp_data)
            data_written = True
            by_path = dict(_walk_tensors(model))
            for tpath, ref in refs.items():
                replacements[tpath] = _external_stub(by_path[tpath], {**ref.entries, "location": data_name})
        elif mode == "merge":
            writer = _DataFileWriter(tmp_data)
            try:
                for tpath, tensor in _walk_tensors(model):
                    ref = refs.get(tpath)
                    if ref is not None and ref.length < size_threshold:
                        # small tensors go inline: onnxruntime cannot use external shape-like inputs
                        # (Slice starts, Reshape shape) during shape inference
                        replacements[tpath] = _inline_copy(tensor, _read_range(ref, model_name))
                        continue
                    if ref is not None:
                        offset = writer.append(lambda f, ref=ref: _copy_range(ref, f, model_name), ref.length)
                        length = ref.length
                    elif externalize and _inline_nbytes(tensor) >= size_threshold:
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
            data_written = writer.used

        emitter = _Emitter(replacements) if replacements else estimate
        for attempt in ("predicted sizes", "exact sizes"):
            size = emitter.size(model)
            if size > PROTOBUF_LIMIT:
                raise OutputError(f"{out}: the model is {size / 2**30:.2f} GiB even with its tensors in external "
                                  "data, over protobuf's 2 GiB limit", "the graph itself is too large for one ONNX file")
            try:
                with open(tmp_model, "wb") as f:
                    emitter.write(f, model)
                    f.flush()
                    os.fsync(f.fileno())
                break
            except _SizeGuessWrong as e:  # a tensor whose data does not match its dims: size it exactly
                why = _raw_data_mismatch(e.tensor) if e.tensor is not None else None
                if why:
                    raise InvalidModelError(f"{model_name}: {why}",
                                            "the model is malformed (truncated weights?); re-export it") from None
                if attempt == "exact sizes":
                    raise
                logger.debug("%s: %s; writing again with exact sizes", out, e)
                emitter = _Emitter(replacements, guess=False)
        written = os.path.getsize(tmp_model)
        if written != size:  # a serialiser bug must never produce a silently corrupt file
            raise OutputError(f"{out}: internal error: wrote {written} bytes, expected {size}",
                              "report this bug; the output was not written")
        try:
            if not target.special:
                os.chmod(tmp_model, stat.S_IMODE(out.stat().st_mode))
        except OSError:
            pass  # new file: keep the umask-derived mode it was created with

        phase = "before_commit"
        if before_commit is not None:
            before_commit(tmp_model)

        phase = "commit"
        committed = [out]
        if data_written:
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
            _fsync_dir(folder)
        logger.info("wrote %s", ", ".join(map(str, committed)))
        return committed
    except OSError as e:
        if phase == "before_commit":
            raise
        detail = e.strerror or str(e)
        raise OutputError(f"{out}: could not write the output ({detail})",
                          "check free disk space and the folder's permissions; nothing was written") from e
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)

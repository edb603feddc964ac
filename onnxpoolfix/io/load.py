"""``load_model``: every way a file can fail to be an ONNX model becomes one ``InvalidModelError`` naming
the file and the problem; external tensors stay references (only tiny ones, values the patch reads, are
brought inline), their files checked to exist and hold the referenced byte ranges."""
from __future__ import annotations

import logging
import stat
from pathlib import Path

from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from ..errors import InvalidModelError
from ..graph import is_repeated
from .tensors import HINT_REEXPORT, PROTOBUF_LIMIT, VALUE_FIELDS, PathLike, external_refs, read_range, walk_tensors

logger = logging.getLogger(__name__)

#: External tensors smaller than this are read and made inline by ``load_model`` even without
#: ``load_external_data``: they are values (output sizes, shapes) that the patch and shape inference read.
SMALL_EXTERNAL_INLINE = 1024


def _invalid_utf8_field(msg, where: str = "") -> str | None:
    """The first string field holding invalid UTF-8 (protobuf's Python runtime hands such proto2 strings back
    as bytes, or raises, far from the load: a corrupt name would become an internal error deep inside the
    patch). Walks every message but never touches tensor data."""
    skip = VALUE_FIELDS if msg.DESCRIPTOR is TensorProto.DESCRIPTOR else ()
    for fd in msg.DESCRIPTOR.fields:
        if fd.name in skip:
            continue
        rep = is_repeated(fd)
        if not rep and not msg.HasField(fd.name):
            continue
        try:
            value = getattr(msg, fd.name)
            items = list(value) if rep else [value]
        except UnicodeDecodeError:
            return f"field {where}{fd.name}"
        if fd.type == fd.TYPE_STRING and any(not isinstance(v, str) for v in items):
            return f"field {where}{fd.name}"
        if fd.type == fd.TYPE_MESSAGE:
            for i, v in enumerate(items):
                bad = _invalid_utf8_field(v, f"{where}{fd.name}[{i}]." if rep else f"{where}{fd.name}.")
                if bad:
                    return bad
    return None


def _all_utf8(msg) -> bool:
    """Whether every string field holds valid UTF-8: :func:`_invalid_utf8_field`'s question without naming the
    field (no path built per message), a few times faster; the named walk runs only where this says no."""
    if msg.DESCRIPTOR is TensorProto.DESCRIPTOR:  # ListFields would copy the tensor's data
        return _invalid_utf8_field(msg) is None
    try:
        fields = msg.ListFields()
    except UnicodeDecodeError:
        return False
    for fd, value in fields:
        items = value if is_repeated(fd) else (value,)
        if fd.type == fd.TYPE_STRING and any(not isinstance(v, str) for v in items):
            return False
        if fd.type == fd.TYPE_MESSAGE and not all(_all_utf8(v) for v in items):
            return False
    return True


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
                                HINT_REEXPORT) from None
    finally:
        del data
    bad_text = None if _all_utf8(model) else _invalid_utf8_field(model)
    if bad_text:
        raise InvalidModelError(f"{name}: is corrupt: {bad_text} is not valid UTF-8 text", HINT_REEXPORT)
    reason = _not_a_model_reason(model)
    if reason:
        raise InvalidModelError(
            f"{name}: is not an ONNX model (it parses as protobuf, but {reason})",
            "pass an ONNX model file; a file holding only a tensor, a graph or a node, or another format, "
            "cannot be patched",
        )
    refs = external_refs(model, p.parent, name)
    if refs:
        logger.debug("%s: %d external tensors in %d file(s)", name, len(refs), len({r.file for r in refs.values()}))
        by_path = dict(walk_tensors(model))
        for tpath, ref in refs.items():
            # tiny external tensors (output sizes, Reshape targets: a few bytes) are values the patch reads,
            # not weights: bring them inline, as save_model does for onnxruntime's sake
            if load_external_data or ref.length < SMALL_EXTERNAL_INLINE:
                tensor = by_path[tpath]
                tensor.raw_data = read_range(ref, name)
                del tensor.external_data[:]
                tensor.ClearField("data_location")
    return model

"""A hand-written protobuf wire serializer for ModelProto.

Why not ``model.SerializeToString()`` / ``onnx.save``: they build one serialised copy of the whole model in
memory (model + copy: twice a 500 MB model), cannot substitute a tensor (an external-data stub for an
inline weight) without modifying or copying the caller's ModelProto, and upb computes ``ByteSize()`` of a
big tensor by encoding it (seconds per 400 MB). ``WireEmitter`` writes the model piece by piece (one
top-level tensor at a time, tag + length + contents), substituting tensors by their path, and predicts big
raw_data tensors' sizes from dims x dtype; ``write`` verifies every prediction before anything is
committed. Peak memory is the model plus its largest tensor; the output is byte-identical to
``SerializeToString()`` when nothing is substituted (tests/test_io.py checks that).
"""
from __future__ import annotations

import io
import math
from typing import BinaryIO

import onnx
from onnx import FunctionProto, GraphProto, ModelProto, TensorProto, TrainingInfoProto

from ..graph import copy_field, is_repeated
from .tensors import CONTAINERS, DATA_FIELDS, TensorPath, message_fields

# Containers that are always written field by field, so no single big serialised copy of them is made.
_STRUCTURAL = frozenset(d.DESCRIPTOR for d in (ModelProto, GraphProto, FunctionProto, TrainingInfoProto))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _one_field(msg, fd, value) -> bytes:
    """The wire encoding of one non-message field (via a throwaway message holding only that field)."""
    tmp = type(msg)()
    if is_repeated(fd):
        getattr(tmp, fd.name).extend(value)
    else:
        setattr(tmp, fd.name, value)
    return tmp.SerializeToString()


class SizeGuessWrong(Exception):
    """A tensor's serialised size differed from the prediction made from its dims and dtype."""

    def __init__(self, message: str, tensor=None):
        super().__init__(message)
        self.tensor = tensor


def _raw_nbytes(t: TensorProto) -> int | None:
    """The bytes raw_data holds for ``t``'s dims x dtype; None for strings, sub-byte types and unknown dtypes."""
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED) or t.data_type in _SUB_BYTE_TYPES:
        return None
    try:
        return math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # noqa: BLE001 - an unknown dtype is the checker's business
        return None


def raw_data_mismatch(t: TensorProto) -> str | None:
    """Why ``t``'s raw_data cannot hold its dims x dtype (truncated or padded weights), or None. Reads the
    bytes' length, which copies them: only for tensors already suspected, or small ones."""
    need = _raw_nbytes(t) if t.HasField("raw_data") else None
    if need is None or (have := len(t.raw_data)) == need:
        return None
    return f"tensor '{t.name}' holds {have} bytes of data; its dims {list(t.dims)} need {need}"


_SUB_BYTE_TYPES = frozenset(getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1", "UINT2", "INT2",
                                                              "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n))


GUESS_MIN = 1 << 16  # below this, ByteSize() is cheap enough to be exact


_RAW_DATA_TAG = bytes([TensorProto.RAW_DATA_FIELD_NUMBER << 3 | 2])


def _guess_tensor_size(value) -> int | None:
    """The serialised size of a big raw_data TensorProto, predicted without encoding (or copying) its
    bytes: its other fields' size + the raw_data field for dims x itemsize bytes. None when not applicable
    (not a tensor, small, no raw_data, sub-byte or variable-size dtype)."""
    if value.DESCRIPTOR is not TensorProto.DESCRIPTOR or not value.HasField("raw_data"):
        return None
    n = _raw_nbytes(value)  # (None: let ByteSize decide)
    if n is None or n < GUESS_MIN:
        return None
    meta = metadata_copy(value, skip=("raw_data",))
    return meta.ByteSize() + len(_RAW_DATA_TAG) + len(_varint(n)) + n


class WireEmitter:
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
        # serialises every tensor anyway and raises ``SizeGuessWrong`` if a prediction was off (a malformed
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
        for fd, step, value in message_fields(msg):
            if step is None:
                total += len(_one_field(msg, fd, value))
                continue
            sub = path + (step,)
            if sub not in self._repl and value.DESCRIPTOR in CONTAINERS and self._descend(value, sub):
                n = self.size(value, sub)
            else:
                value = self._repl.get(sub, value)
                n = _guess_tensor_size(value) if self._guess else None
                if n is None:
                    n = value.ByteSize()
                else:
                    self._guessed[sub] = n
            total += len(_varint(fd.number << 3 | 2)) + len(_varint(n)) + n
        self._sizes[path] = total
        return total

    def write(self, f: BinaryIO, msg, path: TensorPath = ()) -> None:
        for fd, step, value in message_fields(msg):
            if step is None:
                f.write(_one_field(msg, fd, value))
                continue
            sub = path + (step,)
            tag = _varint(fd.number << 3 | 2)
            if sub not in self._repl and value.DESCRIPTOR in CONTAINERS and self._descend(value, sub):
                f.write(tag + _varint(self.size(value, sub)))
                self.write(f, value, sub)
                continue
            data = (self._repl[sub] if sub in self._repl else value).SerializeToString()
            if sub in self._guessed and len(data) != self._guessed[sub]:
                raise SizeGuessWrong(f"tensor at {sub}: {len(data)} bytes, predicted {self._guessed[sub]}", value)
            f.write(tag + _varint(len(data)))
            f.write(data)
            del data


def metadata_copy(tensor: TensorProto, skip=DATA_FIELDS) -> TensorProto:
    """A copy of ``tensor`` without the fields in ``skip``. Fields are read one by one through the
    descriptor: ``ListFields()`` would materialise (copy) the data fields too."""
    stub = TensorProto()
    for fd in TensorProto.DESCRIPTOR.fields:
        if fd.name not in skip and (len(getattr(tensor, fd.name)) if is_repeated(fd) else tensor.HasField(fd.name)):
            copy_field(stub, fd, getattr(tensor, fd.name))
    return stub


def serialize(model: ModelProto, initializers=()) -> bytes:
    """``model`` serialized with ``initializers`` (TensorProtos, typically another model's) appended to its graph's
    initializers, written from where they are: ``model`` holds only a stub of each big one meanwhile (added to
    ``model``, which is the caller's scratch model), so the weights are copied once, into the bytes."""
    base = len(model.graph.initializer)
    replacements: dict[TensorPath, TensorProto] = {}
    for i, t in enumerate(initializers):
        if _guess_tensor_size(t) is None:  # small, or not raw data: copied as it is
            model.graph.initializer.append(t)
            continue
        model.graph.initializer.append(metadata_copy(t, skip=("raw_data",)))
        replacements[((ModelProto.GRAPH_FIELD_NUMBER, 0), (GraphProto.INITIALIZER_FIELD_NUMBER, base + i))] = t
    if not replacements:
        return model.SerializeToString()
    for guess in (True, False):
        f = io.BytesIO()
        try:
            WireEmitter(replacements, guess=guess).write(f, model)
        except SizeGuessWrong:  # a tensor whose data does not match its dims: sized exactly instead
            continue
        return f.getvalue()
    raise AssertionError("unreachable: sizes are exact without guessing")

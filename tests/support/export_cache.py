"""The tests' dynamo exports, made once and kept in fixtures/dynamo/exports/.

``torch.onnx.export(..., dynamo=True)`` takes one to forty seconds per module; redone at every run it was most
of the suite's time. :func:`dynamo_export` looks the export up by a key that describes everything it depends on
(torch's and onnxscript's versions, the source files that define the module's classes, the module's parameters,
buffers and plain attributes, the example inputs' values and every keyword argument): a file recorded under the
same key is what this torch would write again, so the test reads it; any other case (another torch, a test
edited, an argument that cannot be described) exports live, as before, and says so at the session's end.
``make dynamo-exports`` records them again (ONNXPOOLFIX_RECORD_EXPORTS=1). Failed exports are recorded too,
as their error, since some tests check what torch cannot export. What the tests compare OUT with is still
torch itself, run on the live module."""
from __future__ import annotations

import hashlib
import inspect
import logging
import os
import sys
import types
import warnings
from pathlib import Path

import onnx

EXPORTS = Path(__file__).resolve().parents[2] / "fixtures" / "dynamo" / "exports"
RECORD = os.environ.get("ONNXPOOLFIX_RECORD_EXPORTS") == "1"
live_exports: list[str] = []  # what this process exported live (the session's end names them)


class Undescribable(Exception):
    """An argument the key cannot describe exactly: export live."""


class RecordedExportError(RuntimeError):
    """The recorded export failed; its message is torch's."""


def _source_digest(obj) -> str:
    """The digest of the file defining ``obj`` (a class or function), or its qualified name where torch or
    onnxscript define it (their version is in the key)."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    if not path or any(part in path for part in ("/torch/", "/onnxscript/")):
        return name
    return name + ":" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _describe(value, out: list) -> None:
    """Append an exact description of ``value`` to ``out``; raises :class:`Undescribable`."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        out.append(repr(value))
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        out.append(f"tensor{tuple(t.shape)}{t.dtype}:" + hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()
                                                                         if t.numel() else b"").hexdigest())
    elif isinstance(value, (list, tuple)):
        out.append(f"{type(value).__name__}[")
        for v in value:
            _describe(v, out)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        for k in sorted(value, key=repr):
            out.append(repr(k))  # keys: input names, axes, torch ops
            _describe(value[k], out)
        out.append("}")
    elif isinstance(value, torch.nn.Module):
        _describe_module(value, out)
    elif type(value).__module__.startswith("torch.export") or type(value).__name__ == "DimHint":
        root = getattr(value, "root", None)  # a derived dim (32*H): its expression and its root's range
        out.append(f"{value!r}|{getattr(value, 'min', None)}|{getattr(value, 'max', None)}")
        if root is not None:
            _describe(root, out)
    elif inspect.isclass(value):
        out.append(_source_digest(value))
    elif inspect.isfunction(value) or inspect.ismethod(value):
        out.append(_source_digest(getattr(value, "__func__", value)))
        for cell in getattr(value, "__closure__", None) or ():
            _describe(cell.cell_contents, out)
    elif isinstance(value, types.ModuleType):
        out.append(f"module {value.__name__}")
    elif type(value).__module__.split(".")[0] in ("torch", "onnxscript") and " at 0x" not in repr(value):
        out.append(f"{type(value).__qualname__}:{value!r}")  # an opset, a dtype: their version is keyed
    elif type(value).__module__.startswith("onnxscript") and hasattr(value, "name") and hasattr(value, "opset"):
        out.append(f"op {value.opset!r}.{value.name}")  # an opset's op
    else:
        raise Undescribable(f"{type(value).__name__}")


def _describe_module(module, out: list) -> None:
    out.append(repr(module))
    for name, m in module.named_modules():
        out.append(f"{name}:{m.training}:" + ",".join(_source_digest(c) for c in type(m).__mro__
                                                      if c.__module__ not in ("builtins",)))
        for cls in type(m).__mro__:  # what a class's methods close over (a class made inside a test)
            if cls.__module__.startswith("torch"):
                continue
            for fname, f in sorted(vars(cls).items()):
                for cell in getattr(f, "__closure__", None) or ():
                    out.append(fname)
                    _describe(cell.cell_contents, out)
        for attr, v in sorted(vars(m).items()):
            if attr.startswith("_") or attr == "training":
                continue
            out.append(attr)
            _describe(v, out)
    for name, t in sorted(module.state_dict(keep_vars=True).items()):
        out.append(name)
        _describe(t, out)


def export_key(module, args, kwargs) -> str | None:
    """The key of this export, or None where some argument cannot be described exactly."""
    import onnxscript
    import torch

    parts = [torch.__version__, onnxscript.__version__, onnx.__version__]
    try:
        _describe(module, parts)
        _describe(args, parts)
        _describe(kwargs, parts)
    except Undescribable:
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _export_live(module, args, kwargs) -> onnx.ModelProto:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            program = torch.onnx.export(module, args, dynamo=True, verbose=False, **kwargs)
        finally:
            logging.disable(logging.NOTSET)
    return onnx.load_from_string(program.model_proto.SerializeToString())


def _write(path: Path, data: bytes) -> None:
    EXPORTS.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # pytest-xdist workers may record the same export at once


def dynamo_export(module, args: tuple, **kwargs) -> onnx.ModelProto:
    """``torch.onnx.export(module, args, dynamo=True, **kwargs)``'s model, its warnings and log lines silenced;
    read from fixtures/dynamo/exports/ where recorded under the same key. ``module`` is exported as given
    (put it in eval mode first where that matters)."""
    key = export_key(module, args, kwargs)
    model_path = EXPORTS / f"{key}.onnx"
    error_path = EXPORTS / f"{key}.error"
    if key and not RECORD:
        if model_path.exists():
            return onnx.load(model_path)
        if error_path.exists():
            raise RecordedExportError(error_path.read_text())
    try:
        model = _export_live(module, args, kwargs)
    except Exception as e:
        if key and RECORD:
            _write(error_path, f"{type(e).__name__}: {e}".splitlines()[0].encode())
        import torch
        from dynamo_exports import skip_where_another_torch_cannot_export

        skip_where_another_torch_cannot_export(torch, e)  # torch 2.9 to 2.12 cannot export some modules (review54)
        raise
    if key and RECORD:
        _write(model_path, model.SerializeToString())
    else:
        caller = sys._getframe(1)
        live_exports.append(f"{Path(caller.f_code.co_filename).name}:{caller.f_lineno} "
                            f"({type(module).__name__}{'' if key else ', not describable'})")
    return model

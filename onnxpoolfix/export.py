"""``onnxpoolfix.export``: torch.onnx.export (TorchScript path) + patch + save, in one call.

    import onnxpoolfix
    report = onnxpoolfix.export(model, (x,), "model.onnx", input_names=["x"], opset_version=17)

torch is an optional dependency (``pip install '.[torch]'`` in a checkout): it is imported here, lazily, on the
first call, never by ``import onnxpoolfix``.

The export always runs ``dynamo=False, operator_export_type=ONNX_FALLTHROUGH``: that is the exporter that
leaves the adaptive pooling nodes it cannot lower as ``org.pytorch.aten`` nodes, which the patch then
replaces (see README.md, 'What it replaces'). Arguments that would select another exporter or be silently
ignored by this one are refused rather than dropped.
"""
from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Union

from .report import PatchReport

logger = logging.getLogger(__name__)

TORCH_VERSION = "2.13.0"  # what the ``torch`` extra pins, and what the fixtures were exported with
INSTALL_HINT = "pip install '.[torch]' in a checkout of onnxpoolfix"

# torch.onnx.export arguments that only the dynamo exporter reads: with dynamo=False torch ignores them
# silently (or, for dynamic_shapes, fails), so a caller passing one expects something that won't happen.
_DYNAMO_ONLY = {
    "dynamic_shapes": "use dynamic_axes={'x': {2: 'h', 3: 'w'}} with the TorchScript exporter",
    "external_data": "the TorchScript exporter decides by size; onnxpoolfix writes f as one file when it can",
    "custom_translation_table": "use custom_opsets / torch.onnx.register_custom_op_symbolic instead",
    "report": None, "optimize": None, "verify": None, "profile": None, "dump_exported_program": None,
    "artifacts_dir": None,
}


def _import_torch():
    try:
        import torch
        import torch.onnx
    except ImportError as e:
        raise ImportError(
            f"onnxpoolfix.export needs PyTorch, which is not installed ({e}); "
            f"install it with: {INSTALL_HINT} (torch=={TORCH_VERSION}), or export the model yourself with "
            "torch.onnx.export(..., dynamo=False, operator_export_type=OperatorExportTypes.ONNX_FALLTHROUGH) "
            "and run onnxpoolfix.patch on it") from e
    version = torch.__version__.split("+")[0]
    if version != TORCH_VERSION:
        logger.info("torch %s: onnxpoolfix was tested with torch %s", torch.__version__, TORCH_VERSION)
    return torch


def _refuse_conflicts(torch, module, kwargs: dict) -> None:
    if kwargs.get("dynamo", False) is not False:
        raise ValueError(
            "onnxpoolfix.export runs the TorchScript exporter (dynamo=False), the one that leaves adaptive "
            "pooling nodes for onnxpoolfix to replace; drop dynamo=True (or call torch.onnx.export yourself)")
    fallthrough = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
    if "operator_export_type" in kwargs and kwargs["operator_export_type"] != fallthrough:
        raise ValueError(
            f"onnxpoolfix.export sets operator_export_type=ONNX_FALLTHROUGH itself; "
            f"{kwargs['operator_export_type']} would lower (or fail on) other operators differently: drop it")
    for name, hint in _DYNAMO_ONLY.items():
        if name in kwargs:
            raise ValueError(f"torch.onnx.export's '{name}' only applies with dynamo=True, and "
                             f"onnxpoolfix.export uses dynamo=False" + (f": {hint}" if hint else ": drop it"))
    if kwargs.get("export_modules_as_functions"):
        raise ValueError("export_modules_as_functions would put the adaptive pooling nodes inside local "
                         "functions, which onnxpoolfix does not rewrite: drop it")
    exported_program = getattr(getattr(torch, "export", None), "ExportedProgram", None)
    if exported_program is not None and isinstance(module, exported_program):
        raise ValueError("an ExportedProgram always goes through the dynamo exporter; pass the nn.Module")


def export(module: Any, args: Any, f: Union[str, "os.PathLike[str]", BinaryIO], *, check: bool = True,
           strategy: str = "auto", target: str = "onnxruntime", optimize_exporter_pools: bool = False,
           **kwargs: Any) -> PatchReport:
    """Export ``module`` with torch.onnx.export, replace the leftover adaptive pooling nodes, save to ``f``.

    Args:
        module: the ``torch.nn.Module`` (or ScriptModule / function) to export.
        args: its example inputs, as for ``torch.onnx.export`` (a tuple, or one tensor).
        f: where to save: a path, or a binary file object opened for writing.
        check: run the patched model in onnxruntime against the numpy reference
            (:func:`onnxpoolfix.patch`'s ``check``); ``f`` is not written if it fails.
        strategy: ``"auto"`` or a lowering name to force (see :func:`onnxpoolfix.patch`).
        target: ``"onnxruntime"`` or ``"tensorrt"``.
        optimize_exporter_pools: also plan the pools the exporter lowered itself (see
            :func:`onnxpoolfix.patch`).
        **kwargs: passed on to ``torch.onnx.export`` (input_names, output_names, dynamic_axes,
            opset_version, do_constant_folding, kwargs, ...). ``dynamo`` (other than False),
            ``operator_export_type`` (other than ONNX_FALLTHROUGH), ``export_modules_as_functions`` and the
            dynamo-only arguments (dynamic_shapes, external_data, optimize, ...) raise ``ValueError``.

    Returns:
        The :class:`~onnxpoolfix.PatchReport` (``report.nodes`` is empty when the export left nothing to patch).

    Raises:
        ImportError: torch is not installed (``pip install '.[torch]'`` in a checkout).
        TypeError: ``module`` is not a torch module, or ``f`` neither a path nor a file object.
        ValueError: conflicting ``kwargs``, or ``f`` a file object not open for writing.
        PoolFixError: from the patch (e.g. :class:`UnsupportedNodeError` for a node with no exact lowering,
            :class:`CheckFailedError`), or :class:`OutputError` when ``f`` cannot be written. ``f`` is left
            untouched (a path is written atomically).
    """
    torch = _import_torch()
    if not isinstance(module, (torch.nn.Module, torch.jit.ScriptFunction)):
        raise TypeError(f"export() takes a torch.nn.Module (or ScriptModule/ScriptFunction), not "
                        f"{type(module).__name__}")
    if hasattr(f, "write"):
        if isinstance(f, io.TextIOBase):
            raise TypeError("f is a text file object; an ONNX model is bytes: open it with 'wb' (or pass a path)")
        if callable(getattr(f, "writable", None)) and not f.writable():
            raise ValueError("f is a file object not open for writing")
    elif not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"f takes a path or a binary file object opened for writing, not {type(f).__name__}")
    _refuse_conflicts(torch, module, kwargs)
    kwargs["dynamo"] = False
    kwargs["operator_export_type"] = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH

    from .api import patch
    from .io import has_external_data, load_model, save_model

    with tempfile.TemporaryDirectory(prefix="onnxpoolfix-export-") as tmp:
        exported = Path(tmp) / "exported.onnx"
        with warnings.catch_warnings():
            # we chose the TorchScript exporter on purpose: its deprecation notice is not the caller's concern
            warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export",
                                    category=DeprecationWarning)
            torch.onnx.export(module, args, str(exported), **kwargs)
        model = load_model(exported)
        external = has_external_data(model)
        result = patch(model, check=check, strategy=strategy, target=target, inplace=True,
                       model_dir=tmp if external else None, optimize_exporter_pools=optimize_exporter_pools)
        logger.info("%s", result.report.summary())
        if hasattr(f, "write"):
            patched = Path(tmp) / "patched.onnx"
            written = save_model(result.model, patched, source_path=exported)
            if len(written) > 1:
                raise ValueError("the model needs external data (over 2 GB), which cannot go to a file object: "
                                 "pass a path as f")
            with open(patched, "rb") as src:
                shutil.copyfileobj(src, f)
        else:
            save_model(result.model, f, source_path=exported)
    return result.report

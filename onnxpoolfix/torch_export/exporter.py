"""``onnxpoolfix.export``: torch.onnx.export + patch + check against torch + save, in one call (docs/export.md).

    import onnxpoolfix
    report = onnxpoolfix.export(model, (x,), "model.onnx", dynamic_shapes={"x": {2: H, 3: W}})

torch is an optional dependency (``pip install '.[torch]'`` in a checkout): it is imported here, lazily, on the
first call, never by ``import onnxpoolfix``. Two exporters, as in ``torch.onnx.export`` (:func:`export`'s
``dynamo``): the dynamo one with :func:`onnxpoolfix.translation_table`, the TorchScript one with ONNX_FALLTHROUGH;
arguments that would select another exporter or be silently ignored by the chosen one are refused rather than
dropped. Either way the saved file is run in onnxruntime against the torch module (``verify=True``,
:mod:`onnxpoolfix.torch_export.torch_check`) before it is renamed into place.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Union

from ..api import check_choices, check_flags, check_seed, patch_as_written
from ..check import foreign_ops
from ..check.feeds import graph_inputs
from ..errors import PoolFixError, ShapeError, UnsupportedNodeError
from ..graph.size_precision import torch_doubles
from ..io import has_external_data, load_model, preflight_output, save_model
from ..report import PatchReport, WarningNote
from ..words import API, EXPORT, EXPORT_TORCHSCRIPT, render_all
from .declared import declared_dims, dynamic_axes_probe, dynamic_axes_spec, specialised_dims, symbols_declared_at_one
from .guards import guard_points
from .opset import KEEPS_METADATA_FROM, convert_keeping_metadata
from .outside import compare_forms_instead, compared_instead, runs_outside
from .specialised import hint_for
from .symbolic_sizes import program_doubles, symbolic_pool_sizes, symbolic_translations
from .torch_check import torch_sizes, verify_against_torch
from .translation import translation_table

logger = logging.getLogger(__name__)

TORCH_VERSION = "2.13.0"  # what constraints.txt pins for the project's own install, and the fixtures' exporter
TORCH_RANGE = ">=2.9,<2.15"  # what the ``torch`` extra accepts (pyproject.toml; tests/test_packaging.py)
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
            f"install it with: {INSTALL_HINT} (torch{TORCH_RANGE}; tested with torch=={TORCH_VERSION}), "
            "or export the model yourself with "
            "torch.onnx.export(..., dynamo=False, operator_export_type=OperatorExportTypes.ONNX_FALLTHROUGH) "
            "and run onnxpoolfix.patch on it") from e
    version = torch.__version__.split("+")[0]
    if version != TORCH_VERSION:
        logger.info("torch %s: onnxpoolfix was tested with torch %s", torch.__version__, TORCH_VERSION)
    return torch


def _refuse_conflicts(torch, module, kwargs: dict) -> None:
    fallthrough = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
    if "operator_export_type" in kwargs and kwargs["operator_export_type"] != fallthrough:
        raise ValueError(
            f"onnxpoolfix.export sets operator_export_type=ONNX_FALLTHROUGH itself; "
            f"{kwargs['operator_export_type']} would lower (or fail on) other operators differently: drop it")
    for name, hint in _DYNAMO_ONLY.items():
        if name in kwargs:
            raise ValueError(f"torch.onnx.export's '{name}' only applies with dynamo=True, and "
                             f"this call has dynamo=False" + (f": {hint}" if hint else ": drop it"))
    if kwargs.get("export_modules_as_functions"):
        raise ValueError("export_modules_as_functions would put the adaptive pooling nodes inside local "
                         "functions, which onnxpoolfix does not rewrite: drop it")
    if isinstance(module, getattr(getattr(torch, "export", None), "ExportedProgram", ())):
        raise ValueError("an ExportedProgram always goes through the dynamo exporter; pass the nn.Module, "
                         "or drop dynamo=False")


class _QuietUnannotatedTranslations(logging.Filter):
    """torch 2.9's exporter logs a WARNING per parameter of every translation without type annotations
    ("Missing annotation for parameter 'x' from (x, output_size). Treating as an Input.": 28 lines per export
    for onnxpoolfix's own; torch 2.13 logs it at DEBUG). Treating them as inputs is what they are written for
    (``output_size`` is a list of ints and SymInts, no attribute), so only those records of ours are dropped."""

    schemas = "torch.onnx._internal.exporter._schemas"  # the logger, filtered for the export alone

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("Missing annotation for parameter") and record.args
                    and str(record.args[-1]) == "(x, output_size)")

    def __enter__(self) -> None:
        logging.getLogger(self.schemas).addFilter(self)

    def __exit__(self, *exc) -> None:
        logging.getLogger(self.schemas).removeFilter(self)


@contextlib.contextmanager
def _global_max_falls_through(torch):
    """The TorchScript exporter lowers an adaptive max pool to all-ones output as GlobalMaxPool without its
    indices where the input sizes are not all static, and then stops ('returned None for the output 1') if
    they are used: for the export, such a pool falls through as its aten node (a symbolic returning None),
    which the patch lowers with the indices; every other one goes to torch's own symbolic. A caller's own
    symbolic for these ops is left in charge."""
    from torch.onnx import symbolic_helper, symbolic_opset9

    def keep(builtin):
        def symbolic(g, x, output_size):
            try:
                ones = all(m == 1 for m in symbolic_helper._parse_arg(output_size, "is"))
            except Exception:  # noqa: BLE001 - a size that is no constant: torch's symbolic says so itself
                ones = False
            sizes = symbolic_helper._get_tensor_sizes(x)
            if ones and (sizes is None or any(d is None for d in sizes[2:])) and _indices_used(g):
                return None
            return builtin(g, x, output_size)
        return symbolic

    names = [f"aten::adaptive_max_pool{k}d" for k in (1, 2, 3)]
    try:
        from torch.onnx._internal.torchscript_exporter import registration
        owned = [n for n in names if not (registration.registry.get_function_group(n)
                                          and registration.registry.get_function_group(n)._functions.overridden(9))]
    except (ImportError, AttributeError):  # another torch's layout: a caller's symbolic cannot be told, so
        owned = []  # none is registered (torch's own behaviour)
    registered = []
    try:
        for n in owned:
            torch.onnx.register_custom_op_symbolic(n, keep(getattr(symbolic_opset9, n[6:])), 9)
            registered.append(n)
        yield
    finally:
        for n in registered:
            torch.onnx.unregister_custom_op_symbolic(n, 9)


def _indices_used(g) -> bool:
    try:
        return bool(list(g.original_node.outputs())[1].uses())
    except (AttributeError, IndexError, RuntimeError):  # cannot tell: keep them
        return True


def _refuse_dynamo_conflicts(kwargs: dict) -> None:
    if "operator_export_type" in kwargs:
        raise ValueError("operator_export_type applies to the TorchScript exporter only (dynamo=False); "
                         "with dynamo=True drop it: the adaptive pools are kept by onnxpoolfix's translation table")
    if kwargs.get("fallback"):
        raise ValueError("fallback=True would retry with the TorchScript exporter without ONNX_FALLTHROUGH; "
                         "drop it, or pass dynamo=False to use the TorchScript path on purpose")


def in_export_words(err: PoolFixError, dynamo: bool) -> None:
    """``err`` said in the words of ``export``'s own arguments (:mod:`onnxpoolfix.words`: export takes no
    input_shapes= or check_shapes=, it declares dims through dynamic_shapes, or ``dynamo=False``'s
    dynamic_axes, and picks the opset itself), with the opset that would let a forced strategy apply."""
    err.audience = EXPORT if dynamo else EXPORT_TORCHSCRIPT
    needed = err.data.get("opset")
    if needed and "opset_version" not in (err.hint or ""):
        more = f"export with opset_version={needed} or later"
        err.hint = f"{err.hint_text}; or {more}" if err.hint_text else more


def _example_args(torch, args: Any, kwargs: dict, dynamo: bool) -> tuple[tuple, dict]:
    """``module(*args, **kw)`` as torch.onnx.export calls it (a bare tensor is one argument; the TorchScript
    exporter also takes trailing keyword arguments as a dict at the end of ``args``)."""
    call_kwargs = dict(kwargs.get("kwargs") or {})
    if isinstance(args, torch.Tensor):
        return (args,), call_kwargs
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    if not dynamo and args and isinstance(args[-1], dict):
        call_kwargs = {**args[-1], **call_kwargs}
        args = args[:-1]
    return args, call_kwargs


def export(module: Any, args: Any, f: Union[str, "os.PathLike[str]", BinaryIO], *, dynamo: bool = True,
           check: bool = True, verify: bool = True, strategy: str = "auto", target: str = "onnxruntime",
           optimize_exporter_pools: bool = False, allow_specialized_dims: bool = False, seed: int = 0,
           **kwargs: Any) -> PatchReport:
    """Export ``module`` with torch.onnx.export, replace the leftover adaptive pooling nodes, save to ``f``.

    Args:
        module: the ``torch.nn.Module`` (or ScriptModule / function; with ``dynamo=True`` also a
            ``torch.export.ExportedProgram``, compared with torch through its ``.module()``) to export.
        args: its example inputs, as for ``torch.onnx.export`` (a tuple, or one tensor).
        f: where to save: a path, or a binary file object opened for writing.
        dynamo: as in ``torch.onnx.export`` (default True): the torch.export-based exporter with
            :func:`onnxpoolfix.translation_table`; False: the TorchScript exporter with ONNX_FALLTHROUGH.
        check: run the patched model in onnxruntime against the numpy reference
            (:func:`onnxpoolfix.patch`'s ``check``); ``f`` is not written if it fails.
        verify: run the saved file in onnxruntime against ``module`` on the example inputs and, where dims
            are symbolic, at several other sizes inside the declared ranges (pooled windows uniform,
            non-uniform and upsampling); :class:`TorchMismatchError` with the max error if they differ
            beyond float noise, and ``f`` is not written. (torch's own ``verify=`` is not passed on: this
            one covers it.)
        strategy: ``"auto"`` or a lowering name to force (see :func:`onnxpoolfix.patch`).
        target: ``"onnxruntime"``, ``"tensorrt"`` or ``"portable"`` (docs/targets.md).
        optimize_exporter_pools: also plan the pools the exporter lowered itself (see
            :func:`onnxpoolfix.patch`).
        allow_specialized_dims: a dim ``dynamic_shapes`` (or ``dynamic_axes``) declares dynamic (a ``Dim``,
            ``Dim.DYNAMIC``, a name) that torch specialised to the example's size, narrowed, or made one with
            another (torch.onnx.export retries a refused spec with torch's suggested fix, silently) raises
            :class:`ShapeError` naming the dim and torch's reason; True exports it anyway, with a
            logged warning and a warning note in the report (``check_note``).
        seed: seed of every random input drawn: the patch's (its check, the dynamo proof) and the
            comparison with torch's.
        **kwargs: passed on to ``torch.onnx.export`` (input_names, output_names, dynamic_shapes,
            dynamic_axes, opset_version, kwargs, external_data, optimize, ...). With ``dynamo=True``,
            ``operator_export_type`` and ``fallback=True`` raise ``ValueError``; ``external_data`` (default
            True, as in torch) writes the weights to ``f.data`` beside ``f``. With ``dynamo=False``,
            ``operator_export_type`` (other than ONNX_FALLTHROUGH), ``export_modules_as_functions`` and the
            dynamo-only arguments (dynamic_shapes, external_data, optimize, ...) raise ``ValueError``.

    Returns:
        The :class:`~onnxpoolfix.PatchReport` (``report.nodes`` is empty when the export left nothing to patch).

    Raises:
        ImportError: torch is not installed (``pip install '.[torch]'`` in a checkout).
        TypeError: ``module`` is not a torch module, or ``f`` neither a path nor a file object.
        ValueError: conflicting ``kwargs``, or ``f`` a file object not open for writing; an unknown ``target``
            or ``strategy`` is an :class:`ArgumentError` (a ValueError), raised before the export.
        ShapeError: a dim declared dynamic came out static (see ``allow_specialized_dims``); nothing written.
        TorchMismatchError: (a :class:`CheckFailedError`) ``verify`` found the file differing from torch.
        PoolFixError: from the patch (e.g. :class:`UnsupportedNodeError` for a node with no exact lowering,
            :class:`CheckFailedError`), or :class:`OutputError` when ``f`` cannot be written. ``f`` is left
            untouched (a path is written atomically).
    """
    check_seed(seed)
    check_flags(dynamo=dynamo, check=check, verify=verify, optimize_exporter_pools=optimize_exporter_pools,
                allow_specialized_dims=allow_specialized_dims)
    check_choices(target, strategy)  # before the export, not after it (patch would say it only then)
    torch = _import_torch()
    exported_program = getattr(getattr(torch, "export", None), "ExportedProgram", ())
    if not isinstance(module, (torch.nn.Module, torch.jit.ScriptFunction, exported_program)):
        raise TypeError(f"export() takes a torch.nn.Module (or ScriptModule/ScriptFunction, or with dynamo=True "
                        f"a torch.export.ExportedProgram), not {type(module).__name__}")
    if hasattr(f, "write"):
        if isinstance(f, io.TextIOBase):
            raise TypeError("f is a text file object; an ONNX model is bytes: open it with 'wb' (or pass a path)")
        if callable(getattr(f, "writable", None)) and not f.writable():
            raise ValueError("f is a file object not open for writing")
    elif not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"f takes a path or a binary file object opened for writing, not {type(f).__name__}")
    else:
        preflight_output(f)  # as the CLI does: a bad path fails now, not after a long export, patch and check
    if not isinstance(dynamo, bool):
        raise TypeError(f"dynamo takes True or False, not {dynamo!r}")
    if dynamo:
        _refuse_dynamo_conflicts(kwargs)
        external = bool(kwargs.pop("external_data", True))
        user_table = dict(kwargs.pop("custom_translation_table", None) or {})
    else:
        _refuse_conflicts(torch, module, kwargs)
        kwargs["operator_export_type"] = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH
        external = False
    call_args, call_kwargs = _example_args(torch, args, kwargs, dynamo)

    with tempfile.TemporaryDirectory(prefix="onnxpoolfix-export-") as tmp:
        exported = Path(tmp) / "exported.onnx"
        declared, specialised, at_one, doubles, kept, outside, guarded = None, [], [], (), False, {}, {}
        if dynamo:
            ours = translation_table()
            table = {**ours, **symbolic_translations(), **user_table}
            # every adaptive pool kept as a node: no frozen decomposition (but in an ExportedProgram, or overridden)
            kept = not isinstance(module, exported_program) and not set(ours) & set(user_table)
            # below opset 18 torch exports at 18, converts (dropping the metadata the dynamo front end reads)
            # and optimizes: the same steps here, the metadata given back
            convert_to, optimize = kwargs.get("opset_version"), kwargs.get("optimize", True)
            convert_to = convert_to if convert_to is not None and convert_to < KEEPS_METADATA_FROM else None
            if convert_to is not None:
                kwargs = {**kwargs, "opset_version": KEEPS_METADATA_FROM, "optimize": False}
            captured = io.StringIO()
            # the exporter prints its progress (the library never does); sizes computed from symbolic ones kept
            with contextlib.redirect_stdout(captured), symbolic_pool_sizes(), _QuietUnannotatedTranslations():
                # weights beside the temporary file, unless f is to hold them (external_data=False, a file object)
                program = torch.onnx.export(module, args, str(exported), dynamo=True,
                                            external_data=external and not hasattr(f, "write"),
                                            custom_translation_table=table, **kwargs)
            logger.debug("torch.onnx.export: %s", captured.getvalue().strip())
            if convert_to is not None:
                convert_keeping_metadata(program, convert_to)
                if optimize:
                    program.optimize()
                program.save(str(exported), external_data=external and not hasattr(f, "write"))
            declared = declared_dims(torch, program)
        else:
            with warnings.catch_warnings(), _global_max_falls_through(torch):
                # we chose the TorchScript exporter on purpose: its deprecation notice is not the caller's concern
                warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export",
                                        category=DeprecationWarning)
                torch.onnx.export(module, args, str(exported), dynamo=False, **kwargs)
        model = load_model(exported)
        inputs = graph_inputs(model)
        spec = kwargs  # dynamic_axes (every size) gets the same checks, from torch.export's guards on its dims
        if kwargs.get("dynamic_axes") and not kwargs.get("dynamic_shapes"):
            spec = {"dynamic_shapes": dynamic_axes_spec(torch, call_args, call_kwargs, inputs)}
        probe = program if dynamo else None if not spec.get("dynamic_shapes") or isinstance(
            module, (torch.jit.ScriptModule, torch.jit.ScriptFunction)) else dynamic_axes_probe(
            torch, module, call_args, spec["dynamic_shapes"])
        if probe is not None and not isinstance(module, exported_program):
            traced = declared if dynamo else declared_dims(torch, probe)
            specialised = specialised_dims(torch, module, call_args, call_kwargs, probe, model, spec)
            if dynamo:  # a form (2*s): compared with torch off the form where torch runs there (verify)
                specialised, declared, outside = compare_forms_instead(
                    torch, module, call_args, call_kwargs, inputs, declared, specialised, seed)
            specialised = [sp for sp in specialised if sp.value is not None or runs_outside(
                torch, module, call_args, call_kwargs, inputs, traced, sp, seed)]
            # sizes torch decides otherwise than the trace did: 1 (a dynamo export's dims declared down to 1, every
            # dim of a TorchScript file), and where a guard of torch.export is false
            at_one = symbols_declared_at_one(torch, module, call_args, call_kwargs, probe, model, spec) if dynamo else [
                d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param]
            guarded = guard_points(torch, module, call_args, call_kwargs, probe, model, spec, dynamo)
            for sp in specialised if spec is not kwargs else ():
                sp.declared = "dynamic_axes"
            if not dynamo:  # the TorchScript file is the tracer's: compared with torch there instead (verify)
                specialised, outside = compared_instead(specialised, inputs, verify)
        if probe is not None:  # the TorchScript file's scales are the Python floats torch.export's probe holds
            doubles = program_doubles(probe)
        if dynamo:
            del program
        if specialised and not allow_specialized_dims:
            more = f" (and {len(specialised) - 1} more)" if len(specialised) > 1 else ""
            raise ShapeError(specialised[0].describe() + more, hint_for(specialised, spec is not kwargs))
        for sp in specialised:
            logger.warning("%s", sp.describe())
        has_data = has_external_data(model)
        runnable = module.module() if isinstance(module, exported_program) else module
        check_shapes = None
        if check and declared is not None and declared.related:  # W = 2*h, 32*h: the graph alone cannot tell
            check_shapes = torch_sizes(model, runnable, call_args, call_kwargs, declared, seed=seed) or None
        try:
            with torch_doubles(doubles):  # a float32 scale in the file read as the double torch held
                result = render_all(patch_as_written(
                    model, check=check, strategy=strategy, target=target, inplace=True,
                    model_dir=tmp if has_data else None, optimize_exporter_pools=optimize_exporter_pools,
                    check_shapes=check_shapes, seed=seed, kept_by_table=kept), API)
        except PoolFixError as e:  # patch's hints name patch's arguments; export takes other ones
            in_export_words(e, dynamo)
            raise
        # allowed (allow_specialized_dims): the report says so too, as a warning
        result.report.notes[:0] = [WarningNote(f"allowed: {sp.describe()}", "specialised-dims") for sp in specialised]
        result.report.notes[:] = [n for n in result.report.notes if not (verify and n.code == "constant-output-size")]
        logger.info("%s", result.report.summary())

        foreign = foreign_ops(result.model) if verify else {}
        if foreign:  # onnxruntime cannot load the file: there is nothing to compare with torch
            raise UnsupportedNodeError(
                f"the exported file keeps {sum(foreign.values())} node(s) onnxruntime has no kernels in "
                f"({', '.join(sorted(foreign)[:3])}), none of them an adaptive pool onnxpoolfix replaces, so it "
                "cannot be run against torch", "change the module so that torch exports that part in standard "
                "ONNX ops, or pass verify=False to write the file as it is")

        def against_torch(path: Path) -> None:
            if not verify:
                return
            checked = verify_against_torch(path, runnable, call_args, call_kwargs, declared=declared, at_one=at_one,
                                           outside=outside, guarded=guarded, seed=seed,
                                           audience=EXPORT if dynamo else EXPORT_TORCHSCRIPT)
            logger.info("%s", checked.note())
            result.report.notes += checked.records()

        if hasattr(f, "write"):
            patched = Path(tmp) / "patched.onnx"
            written = save_model(result.model, patched, source_path=exported, before_commit=against_torch)
            if len(written) > 1:
                raise ValueError("the model needs external data (over 2 GB), which cannot go to a file object: "
                                 "pass a path as f")
            with open(patched, "rb") as src:
                shutil.copyfileobj(src, f)
        else:
            save_model(result.model, f, source_path=exported, save_as_external_data=external,
                       before_commit=against_torch)
    return result.report

"""The exported file against the torch module itself, end to end (``onnxpoolfix.export(..., verify=True)``).

:func:`onnxpoolfix.patch`'s check compares each replaced node with the numpy reference; this one runs the
whole saved file in onnxruntime against ``module(*args)`` and so also catches what the exporter got wrong
around the pools (a decomposition frozen at the traced size, a dim the exporter specialised). torch's own
``torch.onnx.export(..., verify=True)`` compares at the example input only: exactly where a frozen
decomposition still looks right.

Where the file's inputs have symbolic dims it also runs at other sizes inside the declared ranges, chosen
by :mod:`.sizes` so that the adaptive pools see uniform, non-uniform and upsampling windows.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ..check.differential import half_type
from ..check.feeds import graph_inputs
from ..check.sizes import WINDOW_KINDS, window_kind
from ..errors import TorchMismatchError
from ..report import Note, WarningNote
from ..sessions import ort_session, ort_value
from ..words import API, REPORT_IT
from .declared import DeclaredDims
from .guards import SizePoint
from .sizes import TorchRunner, choose_dims

logger = logging.getLogger(__name__)

# what to change when the file and torch part at a size the comparison chose inside the declared dims
MISMATCH_HINT = ("if the module is not meant to run at this size, declare that in dynamic_shapes (a Dim's "
                 "min/max, or an expression such as 2*h for a dim tied to another or 32*h for multiples of 32; "
                 "with dynamic_axes every size counts) and the comparison keeps to it; otherwise the export is "
                 f"wrong at this size: {REPORT_IT} (verify=False skips the comparison)")
SHAPE_HINT = ("the export is wrong at this size: if it is not the example's, re-export with this size as the "
              f"example; otherwise {REPORT_IT}")

GUARD_HINT = ("the exported graph holds only the branch taken at the example's size: write the branch as a "
              "tensor op (torch.where) or torch.cond, or keep this size out of dynamic_shapes (a Dim's min/max)")

FLOAT_HINT = ("compute the size in integers, which both compute alike (size=(h * 7 // 10, w * 7 // 10) for "
              "scale_factor=0.7), keep this size out of dynamic_shapes (a Dim's min/max), or export static sizes")

# allowed |onnxruntime - torch| per output, relative to the output's largest magnitude (no floor of 1: _compare): float
# noise of the whole network (different summation orders in convolutions and matmuls), far below what a
# window one element off does to an average (tenths of the value range)
_RTOL = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 6e-2}


@dataclass
class TorchCheck:
    """What :func:`verify_against_torch` ran: the input shapes, the window kinds reached, the max error."""

    shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    max_error: float = 0.0
    # the symbols of the inputs' symbolic dims compared at their example value alone: no other value inside their
    # ranges ran in torch (review62: transformers' MobileViT, only the batch varied; its file crashed elsewhere)
    unvaried: list[str] = field(default_factory=list)

    def note(self) -> str:
        sizes = "; ".join(" ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in s.items()) for s in self.shapes)
        kinds = ", ".join(k for k in (*WINDOW_KINDS, "kept") if k in self.kinds)
        return (f"matched torch at {len(self.shapes)} input size(s) (max error {self.max_error:.1e}"
                + (f"; pooled windows: {kinds}" if kinds else "") + f"): {sizes}")

    def records(self) -> list[Note]:
        """The report's notes: the sizes compared, and a warning where a symbol was compared at one value alone
        (the file declares its dims symbolic: OUT accepts sizes nothing compared)."""
        out = [Note(self.note(), "matched-torch")]
        if self.unvaried:
            out.append(WarningNote(
                f"compared with torch at the example's value of {', '.join(self.unvaried)} alone: the module ran at "
                "no other value inside the range torch.export allows (it may have narrowed it), so OUT, which "
                "declares those dims symbolic, is unchecked at other sizes", "unvaried-sizes", symbols=self.unvaried))
        return out


def _to_numpy(torch, t) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _compare(torch, names, outputs_onnx, outputs_torch, where: str, half: str | None = None) -> float:
    if len(outputs_onnx) != len(outputs_torch):
        raise TorchMismatchError(
            f"the exported file has {len(outputs_onnx)} output(s), the torch module returns {len(outputs_torch)} "
            f"tensor(s) {where}: cannot match them", "pass verify=False to skip the comparison with torch")
    worst = 0.0
    for name, got, ref in zip(names, outputs_onnx, outputs_torch):
        want = _to_numpy(torch, ref)
        got = np.asarray(got)
        if want.dtype.name == "bfloat16":
            got = got.astype(want.dtype)  # exact: the Cast to float32 above, back
        if tuple(got.shape) != tuple(want.shape):
            raise TorchMismatchError(f"output '{name}' {where}: onnxruntime gives shape {list(got.shape)}, "
                                     f"torch {list(want.shape)}", SHAPE_HINT)
        kind = want.dtype.name
        if kind in _RTOL and half is not None:
            kind = max(kind, half, key=_RTOL.__getitem__)
        if kind in _RTOL:
            g, w = got.astype(np.float64), want.astype(np.float64)
            finite = np.isfinite(w)
            if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[~finite & ~np.isnan(w)],
                                                                                    w[~finite & ~np.isnan(w)]):
                raise TorchMismatchError(f"output '{name}' {where}: NaN/inf differ from torch's",
                                         "the export is wrong at this size; report it")
            err = float(np.max(np.abs(g[finite] - w[finite]))) if finite.any() else 0.0
            # relative to the output's own scale: a floor of 1.0 let an output of scale 1e-9 (torchvision's
            # mobilenet_v3_small with weights=None) match anything within 1e-4, all zeros included
            scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
            allowed = _RTOL[kind] * max(scale, float(np.finfo(np.float32).tiny))
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
            allowed = 0.0
        if err > allowed:
            raise TorchMismatchError(
                f"the exported file differs from torch at output '{name}' {where}: max error {err:.3g} "
                f"(allowed {allowed:.1g})",
                MISMATCH_HINT)
        worst = max(worst, err)
    return worst


def verify_against_torch(path: str | Path, module: Any, args: tuple, kwargs: Mapping | None = None, *,
                         ranges: Mapping[tuple[int, int], tuple[int, int | None]] | None = None,
                         declared: DeclaredDims | None = None, at_one: Sequence[str] = (),
                         outside: Mapping[str, Sequence[int]] | None = None,
                         guarded: Mapping[str, Sequence[tuple[int, SizePoint]]] | None = None, seed: int = 0,
                         audience: str = API) -> TorchCheck:
    """Run the ONNX file at ``path`` in onnxruntime and ``module`` in torch on the same inputs; raise
    :class:`TorchMismatchError` (with the max error) where they differ beyond float noise.

    ``ranges``: (flat input index, axis) -> (min, max or None) of the symbolic dims, as declared to
    torch.export. ``declared``: the dims as torch.export declared them (:func:`.declared.declared_dims`):
    the sizes then keep to their expressions and ranges. ``at_one``: symbols of ``declared`` also compared at
    1 (each alone, and all together), outside torch's range (:func:`.declared.symbols_declared_at_one`), where
    torch runs the module there and onnxruntime the file. ``outside``: symbol -> sizes compared each alone, where
    torch runs, onnxruntime failing there included (a range torch.export narrowed, which a TorchScript file need
    not keep to). ``guarded``: symbol -> (size, why) where a guard of torch.export is false, or a size torch
    computes in double may round otherwise in float32 (:func:`.guards.guard_points`). The inputs are the
    example's tensor leaves, in order, matched to the file's inputs. ``audience``: whose words the error speaks
    (:mod:`onnxpoolfix.words`; ``export-torchscript``: a mismatch's hint names the dynamo exporter too).
    """
    try:
        return _verify(path, module, args, kwargs, ranges=ranges, declared=declared, at_one=at_one,
                       outside=outside or {}, guarded=guarded or {}, seed=seed)
    except TorchMismatchError as e:
        e.audience = audience
        if getattr(module, "training", False):  # dropout/batch-norm statistics differ run to run
            e.hint = ("the module is in training mode: call module.eval() before exporting; if that is not why: "
                      + e.hint_text)
        raise


def _verify(path, module, args, kwargs, *, ranges, declared, at_one=(), outside, guarded, seed) -> TorchCheck:
    import torch

    model = onnx.load(str(path), load_external_data=False)
    model_inputs = graph_inputs(model)
    out_names = [o.name for o in model.graph.output]
    # a float32 output of a model that pools in half (``pool(conv(x).half()).float()``) holds values rounded to
    # half, once in torch and once in the file: compared with half's tolerance
    half = half_type(model)
    bf16 = [o for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16]
    for o in bf16:  # fetched through an exact Cast to float32: numpy (and so onnxruntime's numpy()) has no bfloat16
        model.graph.node.append(onnx.helper.make_node("Cast", [o.name], [o.name + "__as_float"],
                                                      to=onnx.TensorProto.FLOAT))
        o.name += "__as_float"
        o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    sess = ort_session(model, str(Path(path).parent)) if bf16 else ort_session(str(path))
    fetch = [o.name for o in model.graph.output]
    del model
    runner = TorchRunner(torch, module, tuple(args), dict(kwargs or {}), model_inputs, seed, declared)
    example, sym_ranges = runner.symbols(ranges)  # the symbols, their example values and declared ranges

    check = TorchCheck()
    base = runner.run(runner.inputs(example))
    if base is None:
        raise TorchMismatchError(f"the torch module fails on the example inputs ({runner.last_error})",
                                 "check the example inputs, or pass verify=False to skip the comparison with torch")
    runs = [(dict(example), base)] + choose_dims(runner, base[2], sym_ranges, example)  # (none without symbols)
    at_one = [name for name in at_one if name in example]  # each alone, then all together (a branch on H == W == 1)
    together = [{**example, **dict.fromkeys(at_one, 1)}] if len(at_one) > 1 else []
    # outside a range torch.export narrowed, where torch runs: the file must run there too (strict)
    runs += [(d, got) for d in [{**example, name: v} for name, sizes in outside.items() if name in example
                                for v in sizes] if (got := runner.run(runner.inputs(d))) is not None]
    ones = [(d, got) for d in [{**example, name: 1} for name in at_one] + together
            if (got := runner.run(runner.inputs(d))) is not None]
    # where a guard of torch.export is false (torch takes another branch than the one the file holds), and
    # where a size torch computes in double from a float may round otherwise in the file's float32
    why = {}
    for name, points in guarded.items():
        for v, point in points if name in example else ():
            dims = {**example, name: v}
            if (got := runner.run(runner.inputs(dims))) is not None:
                why[id(dims)] = point
                (ones if point.kind == "guard" else runs).append((dims, got))
    varied: set[str] = set()
    for strict, (dims, (tensors, want, calls)) in [(True, r) for r in runs] + [(False, r) for r in ones]:
        shapes = {n: tuple(int(d) for d in t.shape) for n, t in zip(runner.names, tensors)}
        where = "at " + " ".join(f"{n}:{'x'.join(map(str, s))}" for n, s in shapes.items())
        feed = {n: ort_value(_to_numpy(torch, t)) for n, t in zip(runner.names, tensors)}
        try:
            got = [v.numpy() for v in sess.run_with_ort_values(fetch, feed)]
        except Exception as e:  # noqa: BLE001 - onnxruntime failing where torch runs is the finding itself
            if not strict:  # at 1, which torch traced as at least 2: a file that stops there says so itself
                logger.debug("onnxruntime fails %s, outside torch's range: %s", where, e)
                continue
            raise TorchMismatchError(f"onnxruntime fails {where}, where the torch module runs: "
                                     f"{' '.join(str(e).split())[:200]}",
                                     MISMATCH_HINT) from None
        try:
            check.max_error = max(check.max_error, _compare(torch, out_names, got, want, where, half))
        except TorchMismatchError as e:
            # an output that cancels, where OUT is as near torch's float64 as torch's own float32 is, passes
            if half is not None or not float32_noise(torch, runner, tensors, got, want):
                if id(dims) not in why:
                    raise
                point = why[id(dims)]
                if point.kind == "guard":
                    raise TorchMismatchError(f"{e.text}: torch.export's guard `{point.text}` is false there, so "
                                             "torch runs another branch than the one the trace wrote",
                                             GUARD_HINT) from None
                raise TorchMismatchError(f"{e.text}: torch computes the size `{point.text}` in double from a "
                                         "float, the file in float32, and they round apart there",
                                         FLOAT_HINT) from None
        check.shapes.append(shapes)
        check.kinds |= {window_kind(n, m) for ns, ms in calls for n, m in zip(ns, ms)}
        varied.update(name for name, v in dims.items() if v != example.get(name))
    check.unvaried = [_uses(runner, name) for name in example if name not in varied]
    return check


def _uses(runner: TorchRunner, name: str) -> str:
    """Symbol ``name`` with the input dims declared with it: ``s39 (x dim 2: 32*s39)``."""
    exprs = runner.declared.exprs if runner.declared is not None else {}
    uses = [f"{runner.names[i]} dim {a}: {e}" for (i, a), e in exprs.items()
            if i < len(runner.names) and name in {str(s) for s in e.free_symbols}]
    return f"{name} ({', '.join(uses)})" if uses else name


#: OUT may be this many times as far from torch's float64 result as float32's noise moves it
_NOISE_FACTOR = 8


def float32_noise(torch, runner: TorchRunner, tensors: list, got: list, want: list) -> bool:
    """Whether every float32 output of OUT lies within ``_NOISE_FACTOR`` times float32's noise of torch's float64
    result (the module and its float inputs run again in float64; the noise: torch's own float32 error, or how far
    the result moves with every input moved by up to float32's rounding, the larger). The comparison's 1e-4 of an
    output's scale fails on an output that cancels (a mean of random data, ~1e-5, off by float32 rounding), where
    a window one element off is still far outside. False where torch cannot run the module in float64, or where
    it draws random numbers (two float64 runs differ: dropout in training mode)."""
    saved = runner.module
    if any(_to_numpy(torch, w).dtype != np.float32 for w in want):
        return False
    gen = torch.Generator().manual_seed(0)
    exact = [t.double() if t.is_floating_point() else t for t in tensors]
    # each float input moved by up to float32's rounding: how far that moves the result is float32's noise
    nudged = [t * (1 + (torch.rand(t.shape, generator=gen, dtype=t.dtype) * 2 - 1) * float(np.finfo(np.float32).eps))
              if t.is_floating_point() else t for t in exact]
    try:
        runner.module = copy.deepcopy(saved).double()
        runs = [runner.run(exact), runner.run(exact), runner.run(nudged)]
    except Exception:  # noqa: BLE001 - a module that does not go to float64: no verdict
        return False
    finally:
        runner.module = saved
    if any(r is None or len(r[1]) != len(want) for r in runs) or not all(
            torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1])):
        return False  # a module that draws random numbers: no verdict
    for g, w32, w64, moved in zip(got, want, runs[0][1], runs[2][1]):
        w64, w32 = (np.asarray(_to_numpy(torch, v), np.float64) for v in (w64, w32))
        g = np.asarray(g, np.float64)
        if g.shape != w64.shape or w32.shape != w64.shape:
            return False
        own = float(np.max(np.abs(w32 - w64), initial=0.0))
        noise = max(own, float(np.max(np.abs(np.asarray(_to_numpy(torch, moved), np.float64) - w64), initial=0.0)))
        if np.max(np.abs(g - w64), initial=0.0) > _NOISE_FACTOR * noise or noise > 1e-4 * max(
                1.0, float(np.max(np.abs(w64), initial=0.0))):
            return False
    return True


def torch_sizes(model, module: Any, args: tuple, kwargs: Mapping | None, declared: DeclaredDims,
                seed: int = 0) -> list[dict[str, tuple[int, ...]]]:
    """The input shapes the comparison with torch would run at (the example's first), as ``check_shapes``
    for the patch's own check: where the declared dims are expressions (``2*h``, ``32*h``), sizes probed
    on the ONNX graph alone would break them. ``model``: the exported file's ModelProto (its inputs only
    are read). Empty when torch fails on the example (the comparison then says why)."""
    import torch

    runner = TorchRunner(torch, module, tuple(args), dict(kwargs or {}), graph_inputs(model), seed, declared)
    example, sym_ranges = runner.symbols()
    base = runner.run(runner.inputs(example))
    if base is None:
        return []
    runs = [base] + [got for _, got in choose_dims(runner, base[2], sym_ranges, example)]
    return [{n: tuple(int(d) for d in t.shape) for n, t in zip(runner.names, tensors)} for tensors, _, _ in runs]

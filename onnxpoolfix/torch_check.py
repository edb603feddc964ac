"""The exported file against the torch module itself, end to end (``onnxpoolfix.export(..., verify=True)``).

:func:`onnxpoolfix.patch`'s check compares each replaced node with the numpy reference; this one runs the
whole saved file in onnxruntime against ``module(*args)`` and so also catches what the exporter got wrong
around the pools (a decomposition frozen at the traced size, a dim the exporter specialised). torch's own
``torch.onnx.export(..., verify=True)`` compares at the example input only: exactly where a frozen
decomposition still looks right.

Where the file's inputs have symbolic dims, it also runs at other sizes inside the declared ranges
(``torch.export.Dim`` min/max), chosen so that the adaptive pools see uniform, non-uniform and upsampling
windows: torch runs the module at the example size and at one step more on each symbolic dim, the pooled
lengths are recorded (a dispatch mode that sees every adaptive pooling call), and the input size that
gives each kind of window is aimed at from that linear fit, keeping to multiples of the smallest step the
network accepts (a stride-32 skip connection runs only at multiples of 32).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import windows as W
from .errors import CheckFailedError

logger = logging.getLogger(__name__)

_STEPS = (1, 2, 4, 8, 16, 32, 64)
_KINDS = ("uniform", "non-uniform", "upsampling")
# allowed |onnxruntime - torch| per output, relative to the output's largest magnitude (at least 1): float
# noise of the whole network (different summation orders in convolutions and matmuls), far below what a
# window one element off does to an average (tenths of the value range)
_RTOL = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 6e-2}


class TorchMismatchError(CheckFailedError):
    """The exported file, run in onnxruntime, differs from the torch module (or fails where torch runs)."""


@dataclass
class TorchCheck:
    """What :func:`verify_against_torch` ran: the input shapes, the window kinds reached, the max error."""

    shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    max_error: float = 0.0

    def note(self) -> str:
        sizes = "; ".join(" ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in s.items()) for s in self.shapes)
        kinds = ", ".join(k for k in (*_KINDS, "kept") if k in self.kinds)
        return (f"matched torch at {len(self.shapes)} input size(s) (max error {self.max_error:.1e}"
                + (f"; pooled windows: {kinds}" if kinds else "") + f"): {sizes}")


def _window_kind(n: int, m: int) -> str:
    if n == m:
        return "kept"
    if n < m:
        return "upsampling"
    return "uniform" if W.uniform_windows(n, m) else "non-uniform"


def _target(kind: str, m: int) -> int | None:
    """A pooled input length giving ``kind`` of windows for output length ``m`` (None: impossible)."""
    if kind == "uniform":
        return 2 * m
    if kind == "non-uniform":
        return next((n for n in range(m + 1, 3 * m + 3) if W.uniform_windows(n, m) is None), None)
    return (m - 1 if m >= 3 else 1) if m > 1 else None


class _PoolRecorder:
    """Records (pooled input lengths, output lengths) of every adaptive pooling call torch runs."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        calls = self.calls = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = func.__name__ if hasattr(func, "__name__") else str(func)
                if "adaptive_" in name and "pool" in name and "backward" not in name:
                    k = 3 if "3d" in name else 2 if "2d" in name else 1
                    y = out[0] if isinstance(out, (tuple, list)) else out
                    calls.append((tuple(args[0].shape[-k:]), tuple(y.shape[-k:])))
                return out

        self.mode = Mode()


def _tensor_leaves(torch, tree) -> list:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _to_numpy(torch, t) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


class _Runner:
    """Runs the torch module on example-shaped inputs with chosen sizes for the symbolic dims."""

    def __init__(self, torch, module, args: tuple, kwargs: dict, model_inputs: Sequence, seed: int):
        from torch.utils._pytree import tree_flatten

        self.torch, self.module = torch, module
        self.leaves, self.spec = tree_flatten((args, kwargs))
        self.tensor_positions = [i for i, t in enumerate(self.leaves) if isinstance(t, torch.Tensor)]
        if len(self.tensor_positions) != len(model_inputs):
            raise TorchMismatchError(
                f"the exported file has {len(model_inputs)} input(s) but the example inputs hold "
                f"{len(self.tensor_positions)} tensor(s): cannot match them to compare with torch",
                "pass verify=False to skip the comparison with torch, or export every input tensor")
        self.names = [vi.name for vi in model_inputs]
        self.symbolic = _symbolic_dims(model_inputs)
        self.gen = torch.Generator().manual_seed(seed)

    def inputs(self, dims: Mapping[str, int], batch: int | None = None) -> list:
        """The example tensors resized: symbolic dim ``d`` of an input takes ``dims[d]``."""
        torch = self.torch
        out = []
        for pos, symbolic in zip(self.tensor_positions, self.symbolic):
            example = self.leaves[pos]
            if not symbolic:
                out.append(example)
                continue
            shape = [dims.get(name, size) if name is not None else size
                     for name, size in zip(symbolic, example.shape)]
            if list(shape) == list(example.shape):
                out.append(example)
            elif example.is_floating_point():
                out.append(torch.randn(shape, generator=self.gen, dtype=torch.float32).to(example.dtype))
            elif example.dtype == torch.bool:
                out.append(torch.rand(shape, generator=self.gen) < 0.5)
            else:  # ids and the like: keep to the values the example uses
                lo, hi = (int(example.min()), int(example.max())) if example.numel() else (0, 1)
                out.append(torch.randint(lo, hi + 1, shape, generator=self.gen, dtype=example.dtype))
        return out

    def run(self, tensors: list, recorder: _PoolRecorder | None = None):
        """``module`` on these tensors: (the tensors, flat tensor outputs, pooling calls), or None when torch
        fails."""
        from torch.utils._pytree import tree_unflatten

        torch = self.torch
        leaves = list(self.leaves)
        for pos, t in zip(self.tensor_positions, tensors):
            leaves[pos] = t
        args, kwargs = tree_unflatten(leaves, self.spec)
        rec = recorder or _PoolRecorder()
        try:
            with torch.no_grad(), rec.mode:
                out = self.module(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a size the network cannot take (too small for its convs)
            logger.debug("torch fails at %s: %s", [tuple(t.shape) for t in tensors], e)
            return None
        return tensors, _tensor_leaves(torch, out), list(rec.calls)


def _symbolic_dims(model_inputs) -> list[list[str | None]]:
    """Per input, per axis: the symbolic dim's name (unnamed ones get one of their own), None if static."""
    out = []
    for i, vi in enumerate(model_inputs):
        dims = []
        for a, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                dims.append(None)
            else:
                dims.append(d.dim_param or f"{vi.name}[{a}]")
        out.append(dims)
    return out


def choose_dims(runner: _Runner, example_calls, ranges: Mapping[str, tuple[int, int | None]],
                example: Mapping[str, int]) -> list[tuple[dict[str, int], object]]:
    """Sizes of the symbolic dims to compare at (besides the example), each with torch's run there."""
    chosen: list[tuple[dict[str, int], object]] = []

    def attempt(dims: dict[str, int]):
        if any(dims == c for c, _ in chosen) or dims == dict(example):
            return None
        for name, v in dims.items():
            lo, hi = ranges.get(name, (1, None))
            if v < max(lo, 1) or (hi is not None and v > hi):
                return None
        got = runner.run(runner.inputs(dims))
        return got

    def in_range(name: str, v: int) -> bool:
        lo, hi = ranges.get(name, (1, None))
        return v >= max(lo, 1) and (hi is None or v <= hi)

    # per symbol: the smallest step that runs, then the smallest multiple of it that moves a pooled length
    # (a stride-32 network moves it only every 32): the slope of pooled length against input size
    fits: dict[str, tuple[int, int, list]] = {}  # name -> (step, delta, pooling calls at example + delta)
    for name, e in example.items():
        step = None
        for s in _STEPS:
            for v in (e + s, e - s):
                if in_range(name, v) and (got := runner.run(runner.inputs({**example, name: v}))) is not None \
                        and len(got[2]) == len(example_calls):
                    step = s
                    chosen.append(({**example, name: v}, got))
                    fits[name] = (s, v - e, got[2])
                    break
            if step is not None:
                break
        if step is None:
            continue
        delta = step
        while fits[name][2] == example_calls and delta < 8 * max(e, 8):
            delta *= 2
            v = e + delta if in_range(name, e + delta) else e - delta
            if not in_range(name, v):
                break
            got = runner.run(runner.inputs({**example, name: v}))
            if got is not None and len(got[2]) == len(example_calls):
                fits[name] = (step, v - e, got[2])

    def aim(name: str, kind: str) -> int | None:
        """The size of symbol ``name`` aimed at ``kind`` on the first pooled axis it moves."""
        if name not in fits:
            return None
        step, delta, calls = fits[name]
        for (n0s, ms), (n1s, _) in zip(example_calls, calls):
            for n0, m, n1 in zip(n0s, ms, n1s):
                if n1 == n0:
                    continue
                target = _target(kind, m)
                if target is None:
                    return None
                rate = (n1 - n0) / delta  # pooled length per unit of input size
                v = example[name] + round((target - n0) / rate / step) * step
                lo, hi = ranges.get(name, (1, None))
                lo = max(lo, 1)
                if v < lo:
                    v = lo + (-(lo - example[name]) % step if step > 1 else 0)
                if hi is not None and v > hi:
                    v = hi - ((hi - example[name]) % step)
                return v
        return None

    names = list(example)
    for r in range(len(_KINDS)):
        dims = dict(example)
        for j, name in enumerate(names):
            v = aim(name, _KINDS[(r + j) % len(_KINDS)])
            if v is not None:
                dims[name] = v
            elif name not in fits or fits[name][2] == example_calls:
                # a dim no pool depends on (the batch): 2 in one run
                lo, hi = ranges.get(name, (1, None))
                if r == 1 and lo <= 2 and (hi is None or hi >= 2):
                    dims[name] = 2
        got = attempt(dims)
        if got is not None:
            chosen.append((dims, got))
    # one more away from everything above: twice the example plus a step (capped by the range)
    dims = {}
    for name, e in example.items():
        step = fits[name][0] if name in fits else 1
        lo, hi = ranges.get(name, (1, None))
        v = 2 * e + step
        dims[name] = v if hi is None or v <= hi else hi - ((hi - e) % step)
    got = attempt(dims)
    if got is not None:
        chosen.append((dims, got))
    return chosen


def _compare(torch, names, outputs_onnx, outputs_torch, where: str) -> float:
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
                                     f"torch {list(want.shape)}", "the export is wrong at this size; "
                                     "re-export with this size as the example, or report it")
        kind = want.dtype.name
        if kind in _RTOL:
            g, w = got.astype(np.float64), want.astype(np.float64)
            finite = np.isfinite(w)
            if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[~finite & ~np.isnan(w)],
                                                                                    w[~finite & ~np.isnan(w)]):
                raise TorchMismatchError(f"output '{name}' {where}: NaN/inf differ from torch's",
                                         "the export is wrong at this size; report it")
            err = float(np.max(np.abs(g[finite] - w[finite]))) if finite.any() else 0.0
            allowed = _RTOL[kind] * max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
            allowed = 0.0
        if err > allowed:
            raise TorchMismatchError(
                f"the exported file differs from torch at output '{name}' {where}: max error {err:.3g} "
                f"(allowed {allowed:.1g})",
                "the ONNX graph is not what the module computes at this size; with symbolic dims, re-export "
                "through onnxpoolfix.export (dynamo=True) so every adaptive pool is lowered exactly, or report it")
        worst = max(worst, err)
    return worst


def verify_against_torch(path: str | Path, module: Any, args: tuple, kwargs: Mapping | None = None, *,
                         ranges: Mapping[tuple[int, int], tuple[int, int | None]] | None = None,
                         seed: int = 0) -> TorchCheck:
    """Run the ONNX file at ``path`` in onnxruntime and ``module`` in torch on the same inputs; raise
    :class:`TorchMismatchError` (with the max error) where they differ beyond float noise.

    ``ranges``: (flat input index, axis) -> (min, max or None) of the symbolic dims, as declared to
    torch.export. The inputs are the example's tensor leaves, in order, matched to the file's inputs.
    """
    try:
        return _verify(path, module, args, kwargs, ranges=ranges, seed=seed)
    except TorchMismatchError as e:
        if getattr(module, "training", False):  # dropout/batch-norm statistics differ run to run
            raise TorchMismatchError(e.message, "the module is in training mode: call module.eval() before "
                                     "exporting (or pass verify=False)") from None
        raise


def _verify(path, module, args, kwargs, *, ranges, seed) -> TorchCheck:
    import onnx
    import onnxruntime as ort
    import torch

    from .verify import _ort_value

    model = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    model_inputs = [vi for vi in model.graph.input if vi.name not in init]
    out_names = [o.name for o in model.graph.output]
    bf16 = [o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16]
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if bf16:  # fetched through an exact Cast to float32: numpy (and so onnxruntime's numpy()) has no bfloat16
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(Path(path).parent))
        for o in model.graph.output:
            if o.name in bf16:
                model.graph.node.append(onnx.helper.make_node("Cast", [o.name], [o.name + "__as_float"],
                                                              to=onnx.TensorProto.FLOAT))
                o.name += "__as_float"
                o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        fetch = [o.name for o in model.graph.output]
    else:
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        fetch = out_names
    del model
    runner = _Runner(torch, module, tuple(args), dict(kwargs or {}), model_inputs, seed)
    # the symbols, their example values and declared ranges
    example: dict[str, int] = {}
    sym_ranges: dict[str, tuple[int, int | None]] = {}
    for i, (dims, pos) in enumerate(zip(runner.symbolic, runner.tensor_positions)):
        for a, name in enumerate(dims):
            if name is None:
                continue
            example.setdefault(name, int(runner.leaves[pos].shape[a]))
            lo, hi = (ranges or {}).get((i, a), (1, None))
            old = sym_ranges.get(name, (1, None))
            sym_ranges[name] = (max(lo, old[0]), hi if old[1] is None else old[1] if hi is None else min(hi, old[1]))

    check = TorchCheck()
    base = runner.run(runner.inputs(example))
    if base is None:
        raise TorchMismatchError("the torch module fails on the example inputs", "check the example inputs")
    runs = [(dict(example), base)]
    if example:
        runs += choose_dims(runner, base[2], sym_ranges, example)
    for dims, (tensors, want, calls) in runs:
        shapes = {n: tuple(int(d) for d in t.shape) for n, t in zip(runner.names, tensors)}
        where = "at " + " ".join(f"{n}:{'x'.join(map(str, s))}" for n, s in shapes.items())
        feed = {n: _ort_value(_to_numpy(torch, t)) for n, t in zip(runner.names, tensors)}
        try:
            got = [v.numpy() for v in sess.run_with_ort_values(fetch, feed)]
        except Exception as e:  # noqa: BLE001 - onnxruntime failing where torch runs is the finding itself
            raise TorchMismatchError(f"onnxruntime fails {where}, where the torch module runs: "
                                     f"{' '.join(str(e).split())[:200]}",
                                     "the export does not hold at this size; with symbolic dims, export through "
                                     "onnxpoolfix.export (dynamo=True), or report it") from None
        check.max_error = max(check.max_error, _compare(torch, out_names, got, want, where))
        check.shapes.append(shapes)
        check.kinds |= {_window_kind(n, m) for ns, ms in calls for n, m in zip(ns, ms)}
    return check

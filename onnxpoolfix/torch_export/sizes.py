"""Input sizes to compare the exported file with torch at, inside the declared ranges (:mod:`.torch_check`;
docs/export.md). torch runs the module at the example size and one step more on each symbolic dim, a dispatch
mode records every adaptive pooling call's lengths, and the input size that gives each kind of window (uniform,
non-uniform, upsampling) is aimed at from that linear fit, in multiples of the smallest step the network accepts
(a stride-32 skip connection runs only at multiples of 32): :mod:`onnxpoolfix.check.sizes`'s aim, on the torch
module instead of the ONNX graph. With a dynamo export the sizes are chosen over torch's free symbols
(:class:`.declared.DeclaredDims`: ``W = 2*h`` stays twice H, ``32*h`` a multiple of 32, every declared range
holds); without (the TorchScript path) each symbolic dim of the file is free.
"""
from __future__ import annotations

import logging
from typing import Mapping, Sequence

from ..check.sizes import WINDOW_KINDS, window_targets
from ..errors import TorchMismatchError
from .declared import DeclaredDims, within

logger = logging.getLogger(__name__)

_STEPS = (1, 2, 4, 8, 16, 32, 64)


class PoolRecorder:
    """Records (pooled input lengths, output lengths) of every adaptive pooling call torch runs."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        calls = self.calls = []

        class Mode(TorchDispatchMode):
            # torch.cond / while_loop refuse a mode that does not declare this; they are passed to
            # __torch_dispatch__ then, and run as they are (the pools inside them are not recorded)
            supports_higher_order_operators = True

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = func.__name__ if hasattr(func, "__name__") else str(func)
                if "adaptive_" in name and "pool" in name and "backward" not in name:
                    k = 3 if "3d" in name else 2 if "2d" in name else 1
                    y = out[0] if isinstance(out, (tuple, list)) else out
                    calls.append((tuple(args[0].shape[-k:]), tuple(y.shape[-k:])))
                return out

        self.mode = Mode()


class TorchRunner:
    """Runs the torch module on example-shaped inputs with chosen sizes for the symbolic dims."""

    def __init__(self, torch, module, args: tuple, kwargs: dict, model_inputs: Sequence, seed: int,
                 declared: DeclaredDims | None = None):
        from torch.utils._pytree import tree_flatten

        self.torch, self.module = torch, module
        self.leaves, self.spec = tree_flatten((args, kwargs))
        self.tensor_positions = [i for i, t in enumerate(self.leaves) if isinstance(t, torch.Tensor)]
        # a ScriptModule's Python bool/int/float arguments (an If's flag, a Loop's count) are graph inputs too
        self.scalar_positions: set[int] = set()
        scalars = [i for i, v in enumerate(self.leaves) if isinstance(v, (bool, int, float))]
        if scalars and len(self.tensor_positions) + len(scalars) == len(model_inputs):
            self.scalar_positions = set(scalars)
            for i in scalars:
                self.leaves[i] = torch.tensor(self.leaves[i])
            self.tensor_positions = sorted(self.tensor_positions + scalars)
        if len(self.tensor_positions) != len(model_inputs):
            raise TorchMismatchError(
                f"the exported file has {len(model_inputs)} input(s) but the example inputs hold "
                f"{len(self.tensor_positions)} tensor(s): cannot match them to compare with torch",
                "pass verify=False to skip the comparison with torch, or export every input tensor")
        self.names = [vi.name for vi in model_inputs]
        self.symbolic = _symbolic_dims(model_inputs)
        self.declared = declared
        self.gen = torch.Generator().manual_seed(seed)
        self.last_error = ""  # why the module last failed to run (run() returned None)

    def key(self, i: int, axis: int) -> tuple[int, int] | None:
        """The declared dim of flat input ``i``, axis ``axis`` (None: the file's dim name stands for itself)."""
        d = self.declared
        return (i, axis) if d is not None and (i, axis) in d.exprs else None

    def symbols(self, ranges: Mapping[tuple[int, int], tuple[int, int | None]] | None = None
                ) -> tuple[dict[str, int], dict[str, tuple[int, int | None]]]:
        """The symbols the sizes are chosen over, with their example values and ranges: torch's free symbols
        of the declared dims, and the file's own dim names for the symbolic dims torch does not declare
        (``ranges``: (flat input, axis) -> (min, max) for those)."""
        example: dict[str, int] = {}
        sym_ranges: dict[str, tuple[int, int | None]] = {}
        for i, (dims, pos) in enumerate(zip(self.symbolic, self.tensor_positions)):
            for a, name in enumerate(dims):
                if name is None:
                    continue
                if self.key(i, a) is not None:
                    for s in self.declared.exprs[(i, a)].free_symbols:
                        example.setdefault(str(s), self.declared.example[str(s)])
                        sym_ranges.setdefault(str(s), self.declared.ranges.get(str(s), (1, None)))
                    continue
                example.setdefault(name, int(self.leaves[pos].shape[a]))
                lo, hi = (ranges or {}).get((i, a), (1, None))
                old = sym_ranges.get(name, (1, None))
                sym_ranges[name] = (max(lo, old[0]),
                                    hi if old[1] is None else old[1] if hi is None else min(hi, old[1]))
        return example, sym_ranges

    def allows(self, dims: Mapping[str, int]) -> bool:
        """Every declared constraint holds at these symbol values (always, without declared dims)."""
        return self.declared is None or self.declared.allows(dims)

    def inputs(self, dims: Mapping[str, int]) -> list:
        """The example tensors resized: symbolic dim ``d`` of an input takes ``dims[d]``, a declared one
        its expression at the symbols' values in ``dims``."""
        torch = self.torch
        out = []
        for i, (pos, symbolic) in enumerate(zip(self.tensor_positions, self.symbolic)):
            example = self.leaves[pos]
            if not symbolic:
                out.append(example)
                continue
            shape = [size if name is None else self.declared.size((i, a), dims) if self.key(i, a) is not None
                     else dims.get(name, size) for a, (name, size) in enumerate(zip(symbolic, example.shape))]
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

    def run(self, tensors: list, recorder: PoolRecorder | None = None):
        """``module`` on these tensors: (the tensors, flat tensor outputs, pooling calls), or None when torch
        fails."""
        from torch.utils._pytree import tree_leaves, tree_unflatten

        torch = self.torch
        leaves = list(self.leaves)
        for pos, t in zip(self.tensor_positions, tensors):
            leaves[pos] = t.item() if pos in self.scalar_positions else t
        args, kwargs = tree_unflatten(leaves, self.spec)
        rec = recorder or PoolRecorder()
        try:
            with torch.no_grad(), rec.mode:
                out = self.module(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a size the network cannot take (too small for its convs)
            logger.debug("torch fails at %s: %s", [tuple(t.shape) for t in tensors], e)
            self.last_error = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            return None
        return tensors, [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)], list(rec.calls)


def _symbolic_dims(model_inputs) -> list[list[str | None]]:
    """Per input, per axis: the symbolic dim's name (unnamed ones get one of their own), None if static."""
    return [[None if d.HasField("dim_value") else d.dim_param or f"{vi.name}[{a}]"
             for a, d in enumerate(vi.type.tensor_type.shape.dim)]
            for vi in model_inputs]


def choose_dims(runner: TorchRunner, example_calls, ranges: Mapping[str, tuple[int, int | None]],
                example: Mapping[str, int]) -> list[tuple[dict[str, int], object]]:
    """Sizes of the symbolic dims to compare at (besides the example), each with torch's run there."""
    chosen: list[tuple[dict[str, int], object]] = []

    def attempt(dims: dict[str, int]):
        if any(dims == c for c, _ in chosen) or dims == dict(example):
            return None
        if not all(within(v, ranges.get(name, (1, None))) for name, v in dims.items()) or not runner.allows(dims):
            return None
        return runner.run(runner.inputs(dims))

    def in_range(name: str, v: int) -> bool:
        return within(v, ranges.get(name, (1, None))) and runner.allows({**example, name: v})

    # per symbol: the smallest step that runs, then the smallest multiple of it that moves a pooled length
    # (a stride-32 network moves it only every 32): the slope of pooled length against input size
    fits: dict[str, tuple[int, int, list]] = {}  # name -> (step, delta, pooling calls at example + delta)
    for name, e in example.items():
        first = next(((s, v, got) for s in _STEPS for v in (e + s, e - s) if in_range(name, v)
                      and (got := runner.run(runner.inputs({**example, name: v}))) is not None
                      and len(got[2]) == len(example_calls)), None)
        if first is None:
            continue
        step, v, got = first
        chosen.append(({**example, name: v}, got))
        fits[name] = (step, v - e, got[2])
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
                target = window_targets(m)[kind]
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
    for r in range(len(WINDOW_KINDS)):
        dims = dict(example)
        for j, name in enumerate(names):
            v = aim(name, WINDOW_KINDS[(r + j) % len(WINDOW_KINDS)])
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

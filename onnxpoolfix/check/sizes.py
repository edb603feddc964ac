"""Choosing the input sizes the check runs at: static inputs as they are, symbolic ones bound, and a
symbolic pooled axis probed for sizes that give uniform, non-uniform and upsampling windows."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import onnx

from .. import windows as W
from ..errors import ShapeError
from ..graph.shapes import PoolSpec
from ..lowering.dynamic_max import IN_PLACE_MIN_ELEMENTS
from ..report import Note, dim_label
from ..spec import RuntimeDim
from ..words import CHECK_OR_INPUT_SHAPES, CHECK_SHAPES_REPEATABLE, NO_CHECK
from .feeds import declared_step, symbolic_inputs, tie_named
from .probe import Prober
from .windows_proof import BOUND, yielded_sizes


def default_check_shapes(model: onnx.ModelProto, specs: Sequence[PoolSpec], *,
                         check_shapes: Sequence[Mapping[str, Sequence[int]]] | None = None,
                         input_shapes: Mapping[str, Sequence[int]] | None = None,
                         model_dir: str | None = None, seed: int = 0,
                         ) -> tuple[list[dict[str, tuple[int, ...]]], str]:
    """The input shapes to run the check at, and a note saying what they are.

    Static inputs need nothing. Symbolic dims: ``check_shapes`` if given, else the ``input_shapes``
    binding, else batch-like dims (axis 0) are bound to 2 (a batch > 1 catches lowerings that mix planes)
    and, where every pooled axis is static, the other symbolic dims to the first probe size the model runs at.
    When a pooled axis is still symbolic (the 'dynamic' lowering), one size proves little: the model is
    probed (see :func:`_probe_dynamic_sizes`) for input sizes that give uniform, non-uniform and
    upsampling windows on every pooled axis, one of them with batch 2.
    """
    if check_shapes:
        return ([{k: tuple(v) for k, v in s.items()} for s in check_shapes],
                f"checked at {len(check_shapes)} input shape(s)")
    sym = symbolic_inputs(model)
    if not sym:
        return [{}], "static input shapes"
    binding = {k: tuple(v) for k, v in (input_shapes or {}).items()}
    if any(not s.static for s in specs) and any(k not in binding for k in sym):
        return _probe_dynamic_sizes(model, specs, sym, binding, model_dir=model_dir, seed=seed)
    unresolved = []
    for name, dims in sym.items():
        if name in binding:
            continue
        if dims is None:
            unresolved.append(name)
            continue
        binding[name] = tuple(d if isinstance(d, int) else 2 if axis == 0 else None for axis, d in enumerate(dims))
        unresolved += [f"{name}[{axis}]" for axis, d in enumerate(binding[name]) if d is None]
    how = ""
    if unresolved and all(name in binding for name in sym):  # only spatial dims of inputs of known rank
        found = _first_size_that_runs(model, specs, binding, model_dir=model_dir, seed=seed)
        if found is not None:
            binding, unresolved = found, []
            how = " (the pooled axes are static: the first size tried that the model runs at)"
        else:
            unresolved[-1] += (f" (the model ran at none of the sizes tried: {', '.join(map(str, _PROBE_BASES))} "
                               "on those dims)")
    if unresolved:
        raise ShapeError(
            f"cannot choose sizes for the check: symbolic dims {', '.join(unresolved)}",
            f"give them with {CHECK_OR_INPUT_SHAPES}, or skip the check with {NO_CHECK}")
    return [binding], ("symbolic dims bound to " + ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in binding.items())
                       + how)


def _first_size_that_runs(model, specs, binding, *, model_dir, seed) -> dict[str, tuple[int, ...]] | None:
    """``binding`` with its unbound (None) spatial dims set to the first of :data:`_PROBE_BASES` (multiples
    of the declared step) the model runs at: static pooled axes behind symbolic input dims (a resize to a
    fixed size before the pool) are checked at one size the graph accepts, as the pools are the same at all."""
    free = {name: dims for name, dims in binding.items() if None in dims}
    spatial = {name: [a for a, d in enumerate(dims) if d is None] for name, dims in free.items()}
    declared = declared_step(symbolic_inputs(model), spatial)
    probe = Prober(model, {s.node.input: s.dtype for s in specs}, model_dir, seed)
    try:
        for b in sorted({-(-b // declared) * declared for b in _PROBE_BASES}):
            shapes = tie_named(symbolic_inputs(model), {**binding, **{name: tuple(b if d is None else d for d in dims)
                                                                      for name, dims in free.items()}},
                               [n for n in binding if n not in free])
            if probe.pooled(shapes) is not None:
                return shapes
    finally:
        probe.close()
    return None


# first sizes tried for the symbolic non-batch input dims when probing; the first that runs is the base
_PROBE_BASES = (16, 32, 64, 128, 256, 512)


_MIN_DYNAMIC_CHECKS = 3


WINDOW_KINDS = ("uniform", "non-uniform", "upsampling")
# where the output size is computed by the graph (RuntimeDim), the kinds aimed at instead, in the same rotation
RUNTIME_KINDS = ("downsampling", "equal", "upsampling")


def runtime_kinds(model, dyn, k: int) -> list[dict[int, str] | None]:
    """Per pooled position (as the probe counts them, from the last), for the first dynamic spec whose output
    size there is computed by the graph: the kind its output length takes at each input length n <= 512
    (its size subgraph run alone); None elsewhere or where that subgraph cannot run alone."""
    out: list[dict[int, str] | None] = []
    for from_end in range(k, 0, -1):
        s = next((s for s in dyn if s.k >= from_end and isinstance(s.node.output_size[s.k - from_end], RuntimeDim)),
                 None)
        pairs = None if s is None else yielded_sizes(model, s, s.k - from_end, BOUND)
        out.append(None if pairs is None else {n: RUNTIME_KINDS[0] if m < n else RUNTIME_KINDS[2] if m > n
                                               else RUNTIME_KINDS[1] for n, m in pairs})
    return out


def window_targets(m: int) -> dict[str, int | None]:
    """Pooled input lengths that give each kind of window for output length ``m`` (None: impossible; every
    kind where ``m`` is 0, torch's empty output of ``floor(20 / 32)``)."""
    if m < 1:
        return {"uniform": None, "non-uniform": None, "upsampling": None}
    nonuniform = next((n for n in range(m + 1, 3 * m + 3) if W.uniform_windows(n, m) is None), None)
    return {"uniform": 2 * m, "non-uniform": nonuniform, "upsampling": (m - 1 if m >= 3 else 1) if m > 1 else None}


def window_kind(n: int, m: int) -> str:
    """The kind of windows an adaptive pool of length ``n`` -> ``m`` has (what the checks report as covered);
    "empty" where either is 0 (torch's floor(2 * 0.25) for a scale_factor: no window at all)."""
    if n < 1 or m < 1:
        return "empty"
    if n == m:
        return "kept"
    if n < m:
        return "upsampling"
    return "uniform" if W.uniform_windows(n, m) else "non-uniform"


def _probe_dynamic_sizes(model, specs, sym, binding, *, model_dir, seed):
    """Choose graph-input sizes for a model whose pooled axes are symbolic.

    The pooled tensor is usually not a graph input (convolutions in between), so the relation between an
    input size ``S`` and a pooled length ``n`` is measured: the model runs at two base sizes and
    ``n = n0 + (S - S0) / r`` is fitted per pooled axis. A network may run only at multiples of some step
    (stride-32 skip connections: 32); the step is probed too and every size chosen is a multiple of it.
    From the fit, sizes are aimed at uniform, non-uniform and upsampling windows (rotated over the axes so
    each axis sees each kind, one run with batch 2 where the batch is symbolic), the closest that the step
    allows; every candidate is run once and kept only if the model accepts it; at least 3 must run.
    Symbolic axis 0 is the batch (1, or 2); every other symbolic dim is spatial, matched to the pooled axes
    from the last one back.
    """
    dyn = [s for s in specs if not s.static]
    unresolved = [name for name, dims in sym.items() if name not in binding and dims is None]
    if unresolved:
        raise ShapeError(
            f"cannot choose sizes for the check: input(s) {', '.join(unresolved)} have no known rank",
            f"give them with {CHECK_SHAPES_REPEATABLE}, or skip the check with {NO_CHECK}")
    free = {name: dims for name, dims in sym.items() if name not in binding}
    spatial = {name: [a for a, d in enumerate(dims) if not isinstance(d, int) and a != 0]
               for name, dims in free.items()}
    k = max(s.k for s in dyn)

    def shapes_for(sizes: Sequence[int], batch: int) -> dict[str, tuple[int, ...]]:
        """``sizes``: one size per pooled axis (last k); an input's last symbolic dims take them in order."""
        out = dict(binding)
        for name, dims in free.items():
            axes = spatial[name]
            shape = [d if isinstance(d, int) else batch for d in dims]
            for j, a in enumerate(axes):
                from_end = len(axes) - j  # 1 = last symbolic dim <-> last pooled axis
                shape[a] = sizes[k - from_end] if from_end <= k else sizes[0]
            out[name] = tuple(shape)
        return tie_named(sym, out, list(binding))

    declared = declared_step(free, spatial)  # dims declared as multiples ('32*h'): only those sizes are valid
    probe = Prober(model, {s.node.input: s.dtype for s in dyn}, model_dir, seed)
    try:
        found = _base_runs(probe, shapes_for, k, declared)
        if found is None:
            raise ShapeError(
                "cannot choose sizes for the check: the model ran at none of the input sizes tried "
                f"({', '.join(map(str, _PROBE_BASES))} on the symbolic dims)",
                f"give them with {CHECK_SHAPES_REPEATABLE}, or skip the check with {NO_CHECK}")
        base, got0, moved = found

        def moving(S: int) -> list[int]:  # S on the pooled axes the model runs at other sizes on, base elsewhere
            return [base if moved[j] is None else S for j in range(k)]

        step = declared  # base and 2*base (or 3*base) run on the moved axes: some power of two up to base does
        while step < base and any(moved) and probe.pooled(shapes_for(moving(base + step), 1)) is None:
            step *= 2
        # per pooled axis position j (counted from the last, as shapes_for does): n = n0 + (S - S0) / r, fitted
        # on the first dynamic spec that pools a size-dependent axis there (specs pool different numbers
        # of axes: a 2d pool's last axes are a 3d pool's last axes, its first has no counterpart)
        fits: list[tuple[int, float | None, object]] = []  # (n0, rate, output length) per position
        for j in range(k):
            from_end = k - j
            fit = None
            S1, got1 = moved[j] or (base, got0)
            for s in dyn:
                if s.k < from_end:
                    continue
                axis, m = s.axes[s.k - from_end], s.out_sizes[s.k - from_end]
                n0, n1 = got0[s.node.input][axis], got1[s.node.input][axis]
                if fit is None:
                    fit = (n0, None, m)
                if n1 != n0:
                    fit = (n0, (S1 - base) / (n1 - n0), m)
                    break
            fits.append(fit)

        computed = runtime_kinds(model, dyn, k)  # per position: {n: kind of m(n)} where the graph computes m

        def size_for(j: int, kind: str, fallback: int) -> int:
            """The input size (a multiple of ``step``) nearest the one aimed at ``kind`` on pooled axis j."""
            n0, rate, m = fits[j]
            if moved[j] is None:  # held: the model runs at no other size tried there
                return base
            kind_of = computed[j]
            if kind_of is not None:  # an output size the graph computes: aim at n where m(n) is of that kind
                kind = RUNTIME_KINDS[WINDOW_KINDS.index(kind)]
                target = min((n for n, kd in kind_of.items() if kd == kind), key=lambda n: abs(n - n0), default=None)
            else:
                target = window_targets(m)[kind] if isinstance(m, int) else None
            if target is None or rate is None:
                return fallback
            aim = base + (target - n0) * rate
            sizes = sorted(range(step, max(8 * base, 2 * round(abs(aim))) + step, step), key=lambda S: abs(S - aim))
            return next((S for S in sizes if (n := n0 + (S - base) / rate) >= 1 and n == int(n)
                         and (kind_of.get(int(n)) if kind_of is not None else window_kind(int(n), m)) == kind),
                        sizes[0])

        candidates = [shapes_for([size_for(j, WINDOW_KINDS[(r + j) % len(WINDOW_KINDS)], base + (r + 1) * step)
                                  for j in range(k)], 2 if r == 1 else 1) for r in range(len(WINDOW_KINDS))]
        candidates += [shapes_for([base] * k, 2), shapes_for(moving(2 * base + step), 1),
                       shapes_for(moving(3 * base), 1), shapes_for(moving(2 * base), 1)]
        chosen: list[dict[str, tuple[int, ...]]] = []
        pooled: list[dict[str, tuple[int, ...]]] = []
        for c in candidates:
            if c in chosen:
                continue
            got = probe.pooled(c)
            if got is None:
                continue
            chosen.append(c)
            pooled.append(got)
            if len(chosen) >= 4:
                break
        layouts = _both_max_layouts(dyn, pooled, lambda mult: shapes_for(moving(max(step, round(mult * base))), 1),
                                    probe)
        if layouts is not None:
            chosen.append(layouts[0])
            pooled.append(layouts[1])
    finally:
        probe.close()
    if len(chosen) < _MIN_DYNAMIC_CHECKS:
        raise ShapeError(
            f"cannot choose sizes for the check: the model ran at only {len(chosen)} of the input sizes tried "
            f"(a symbolic pooled axis needs {_MIN_DYNAMIC_CHECKS})",
            f"give them with {CHECK_SHAPES_REPEATABLE}, or skip the check with {NO_CHECK}")
    kinds = {window_kind(got[s.node.input][a], m) for got in pooled for s in dyn
             for a, m in zip(s.axes, s.out_sizes) if isinstance(m, int)}
    batches = sorted({v[0] for c in chosen for name, v in c.items()
                      if name in free and not isinstance(free[name][0], int)})
    outs = "x".join(dim_label(m) for m in dyn[0].out_sizes)
    desc = ", ".join(f"{' '.join(f'{n}:' + 'x'.join(map(str, v)) for n, v in c.items())} (pooled "
                     + "/".join("x".join(str(got[s.node.input][a]) for a in s.axes) for s in dyn) + ")"
                     for c, got in zip(chosen, pooled))
    covered = ", ".join(kd for kd in (*WINDOW_KINDS, "kept") if kd in kinds) or "output sizes computed at run time"
    if declared > 1:
        covered += f"; sizes multiples of {declared}, as the input's dims declare"
    # the input dims on a held pooled axis position (shapes_for's matching): the file itself runs only at base there
    held = [{"input": name, "axis": a, "size": base} for name, axes in spatial.items() for i, a in enumerate(axes)
            if moved[k - (len(axes) - i) if len(axes) - i <= k else 0] is None]
    if held:
        covered += ("; " + ", ".join(f"{h['input']}[{h['axis']}]" for h in held) + f" held at {base}: the input "
                    f"file itself ran at no other size tried there ({2 * base}, {3 * base})")
    return chosen, Note(f"symbolic pooled axes checked at {len(chosen)} sizes (-> {outs}; windows: {covered}"
                        + (f"; batch {' and '.join(map(str, batches))}" if batches else "") + f"): {desc}",
                        "checked-sizes", **({"held": held} if held else {}))


def _base_runs(probe, shapes_for, k: int, declared: int):
    """The base size S0 (one of :data:`_PROBE_BASES` on every pooled axis) for the fit, its run, and per pooled
    axis position a second size S1 and its run: 2*S0 on every axis, at the first S0 where the model runs at both;
    else, where it runs at some S0 only (an op the exporter froze at the traced size of one axis: timm's BAT
    attention runs only at its traced height), each axis moved alone to 2*S0 then 3*S0, the others held at S0,
    None where neither runs (the axis is held at S0). None where the model runs at no S0. At most
    2 * len(_PROBE_BASES) + 2 * k runs."""
    first = None
    for b in sorted({-(-b // declared) * declared for b in _PROBE_BASES}):
        got0 = probe.pooled(shapes_for([b] * k, 1))
        if got0 is None:
            continue
        got1 = probe.pooled(shapes_for([2 * b] * k, 1))
        if got1 is not None:
            return b, got0, [(2 * b, got1)] * k
        first = first or (b, got0)
    if first is None:
        return None
    b, got0 = first
    moved = []
    for j in range(k):
        runs = ((S, probe.pooled(shapes_for([S if i == j else b for i in range(k)], 1))) for S in (2 * b, 3 * b))
        moved.append(next(((S, got) for S, got in runs if got is not None), None))
    return b, got0, moved


def _both_max_layouts(dyn, pooled, shapes_at, probe):
    """The dynamic max lowering picks its layout by the pooled tensor's element count at run time
    (lowering/dynamic_max.py, IN_PLACE_MIN_ELEMENTS): where every size chosen falls on one side, a size on the
    other side (larger or smaller inputs, as the model accepts), so that the check runs both branches. None
    where both are covered already, or no size the model accepts reaches the other side."""
    maxes = [s for s in dyn if s.kind == "max"]
    if not maxes or not pooled:
        return None

    def large(got) -> bool:
        return any(math.prod(got[s.node.input]) >= IN_PLACE_MIN_ELEMENTS for s in maxes)

    sides = {large(got) for got in pooled}
    if len(sides) == 2:
        return None
    mults = (2, 3, 4, 6, 8, 12, 16, 24, 32) if sides == {False} else (0.5, 0.25, 0.125)
    for mult in mults:
        c = shapes_at(mult)
        got = probe.pooled(c)
        if got is not None and large(got) not in sides:
            return c, got
    return None

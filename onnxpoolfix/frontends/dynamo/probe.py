"""The unroll probe of the dynamo search (:mod:`.search`): where a region traced at a large size
fails at every small size tried, find its traced classes from where it stops failing
(:func:`probe_unrolled_windows`)."""
from __future__ import annotations

import itertools
from math import prod

from .search import SizeSpace, branch_class

#: tries the unroll probe may take per region (a binary search per axis, then the classes at its bound), and
#: the classes per axis it searches (a traced size up to ~200 times the output size)
PROBE_TRIES = 120
PROBE_CLASSES = 400
#: the largest pooled tensor the probe runs the region on (each try runs it on three inputs)
PROBE_MAX_ELEMENTS = 1 << 20


def probe_unrolled_windows(space: SizeSpace, run) -> None:
    """Find the traced classes of a region whose window sums torch unrolled at the traced size, where the
    per-axis search of the smallest classes first would not reach them (a 19x26 map pooled to 3x3: classes
    ~15 and ~22 on its axes, behind ~700 pairs). Within one family of an axis's classes (the same branches:
    divisible, adaptive) the longest window grows with the size, and the graph reads window elements up to
    the traced one: onnxruntime fails on it (an index out of bounds) where the axis's windows are shorter,
    or its branch formulas reach past the axis. So: a size where every axis runs (each at the largest size
    of some family); then per axis and family, the others kept there, a binary search for the smallest
    size where it stops failing; then those sizes are tried together. ``run(env)``: the try's why (None:
    proven; ``"failed"``: onnxruntime failed; other text: it ran and differed), or "skip" where the size
    is not one. At most :data:`PROBE_TRIES` runs (a count: the same verdict on any machine); sizes beyond
    :data:`PROBE_MAX_ELEMENTS` are not run."""
    k = len(space.output_size)
    syms = space.axis_symbols
    if k < 2 or not all(syms) or len(set(syms)) != k or not all(isinstance(m, int) for m in space.output_size):
        return
    families: list[list[list[tuple[int, int]]]] = []  # per axis, per family: (symbol value, longest window)
    for a in range(k):
        by_flags: dict[tuple, list] = {}
        for v, n, length in space.pooling_classes(a, PROBE_CLASSES):
            by_flags.setdefault(branch_class(n, space.output_size[a])[:2], []).append((v, length))
        families.append(list(by_flags.values()))
    tries = [0]

    def fails(env) -> bool | str | None:
        if tries[0] >= PROBE_TRIES:
            return None
        got = space.at(env)
        if got is not None and prod(got[0]) > PROBE_MAX_ELEMENTS:
            return "large"
        tries[0] += 1
        why = run(env)
        if why is not None and "too large" in why:
            return "large"
        return None if why in ("skip", None) else why == "failed"

    def at_top(env_at, ends: list[int]) -> tuple[bool | str | None, list[int], dict[str, int]]:
        """:func:`fails` at the sizes ``env_at(ends)`` (per axis an index into a family) each cut by a third while
        too large for the proof ("large" after 8 cuts), the indices where it was not and the sizes there."""
        for _ in range(8):
            env = env_at(ends)
            got = fails(env)
            if got != "large":
                return got, ends, env
            ends = [i * 2 // 3 for i in ends]
        return "large", ends, env

    # a size where every axis runs: each at the largest size of some family
    base: dict[str, int] | None = None
    for combo in itertools.product(*families):
        got, _, env = at_top(lambda ends: {syms[a]: fam[i][0] for a, (fam, i) in enumerate(zip(combo, ends))},
                             [len(fam) - 1 for fam in combo])
        if got is None:
            return
        if got is False:
            base = env
            break
    if base is None:
        return
    # per axis and family, with the other axes where they run: the smallest size where it stops failing
    bounds: list[list[int]] = []
    for a, fams in enumerate(families):
        bounds.append([])
        for fam in fams:
            got, (hi,), _ = at_top(lambda ends: {**base, syms[a]: fam[ends[0]][0]}, [len(fam) - 1])
            if got is None:
                return
            if got:
                continue  # fails at its largest sizes (or is too large there): not the traced family
            lo = 0
            while lo < hi:
                mid = (lo + hi) // 2
                got = fails({**base, syms[a]: fam[mid][0]})
                if got is None:
                    return
                lo, hi = (mid + 1, hi) if got is True else (lo, mid)
            bounds[a].append(fam[lo][0])
    for combo in itertools.product(*bounds):
        if fails(dict(zip(syms, combo))) is None:
            return

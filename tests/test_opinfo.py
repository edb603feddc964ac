"""PyTorch's own OpInfo samples for adaptive pooling and area interpolation (tests/support/opinfo_adaptive.py),
exported with FALLTHROUGH at their shape and with every dim dynamic, patched, run in onnxruntime and compared
with torch.

Nothing may come out wrong, or be returned by the API unrunnable, and nothing be refused but area interpolation
by a scale a double cannot hold (1.7, 0.6) under dynamic dims: the file holds the scale in float32, which does
not say which double torch held, and the doubles beside 1.7 floor otherwise at some length
(tests/graph/test_size_precision.py). Where torch's exporter lowered
an unbatched pool itself into pools onnxruntime cannot run, the API raises the InvalidModelError the CLI
exits 3 with ("invalid"); only the runnable ones over the wrong axes are excused, since the graph does not
record what they should have pooled (README, "The exporter's own pools"), and the dynamic exports torch
itself refuses (global max pooling with indices and symbolic sizes). Area interpolation by ``scale_factor``
under dynamic dims: an output size the graph computes at run time. The fast tests run every third float64 sample
of each of the six pools (the dtype with the most exporter repairs) and every second float32 sample of area
interpolation; the slow one all of float32/float64/float16.
"""
from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal imports it

from opinfo_adaptive import run_sample, samples


def _sweep(torch, dtypes, area: bool | None = None, every: int = 1):
    """``area``: only area interpolation (True), only the six pools (False), or both (None); ``every``: every
    n-th sample of each op (a fixed subset: the samples come in OpInfo's order)."""
    chosen, seen = [], Counter()
    for op, dt, s in samples(torch, dtypes):
        if area is None or (op.name == "nn.functional.interpolate") == area:
            seen[op.name, dt] += 1
            if (seen[op.name, dt] - 1) % every == 0:
                chosen.append((op, dt, s))
    outcomes = [run_sample(torch, op, dt, s, mode) for op, dt, s in chosen for mode in ("static", "dynamic")]
    counts = Counter((o.mode, o.status) for o in outcomes)
    bad = [str(o) for o in outcomes if o.status in ("refused", "wrong", "unrunnable") and not _scale_refusal(o)]
    assert not bad, "\n".join(bad[:20])
    # torch's exporter refuses these itself (no model to patch); nothing else may fail to export
    for o in outcomes:
        if o.status == "export_fails":
            assert o.mode == "dynamic" and "returned None for the output 1" in o.detail, str(o)
    # the excused ones are unbatched pools the exporter wrote itself, never a leftover onnxpoolfix lowered:
    # runnable ones over the wrong axes, or ones the API refuses with the CLI's error and hint
    for o in outcomes:
        if o.status == "no_intent":
            assert len(o.shape) == int(o.op[-2]) + 1 and "exporter wrote" in o.detail, str(o)
        if o.status == "invalid":
            assert len(o.shape) == int(o.op[-2]) + 1 and "unbatched input" in o.detail, str(o)
    return counts


def _scale_refusal(o) -> bool:
    return (o.status == "refused" and o.mode == "dynamic" and o.op.startswith("interpolate")
            and any(f"'scale_factor': {v}" in o.args for v in (1.7, 0.6)) and "in float32, torch in double" in o.detail)


def test_opinfo_samples_float64_every_third(torch_mod):
    """Every third float64 sample of each of the six pools (all of them: the slow test below)."""
    counts = _sweep(torch_mod, ("float64",), area=False, every=3)
    # (torch 2.13: all float64 samples, 57 static and 68 dynamic exact; before the exporter-pool repair, the
    # batched float64 AveragePool/GlobalAveragePool/GlobalMaxPool and the (C, L) global pools stopped in
    # onnxruntime)
    assert counts[("static", "ok")] >= 19 and counts[("dynamic", "ok")] >= 23, counts


def test_opinfo_area_interpolation_float32_every_second(torch_mod):
    """Every second sample exact, static and dynamic (all 22: the slow test below), but the dynamic ones by
    scale_factor 1.7 or 0.6 (their size computed at run time), refused."""
    counts = _sweep(torch_mod, ("float32",), area=True, every=2)
    assert counts == {("static", "ok"): 11, ("dynamic", "ok"): 5, ("dynamic", "refused"): 6}, counts


@pytest.mark.slow
def test_opinfo_samples_every_dtype(torch_mod):
    counts = _sweep(torch_mod, ("float32", "float64", "float16"))
    # (the six pools: >= 165 static and 200 dynamic exact; area interpolation: all 66 static, and the 30 dynamic
    # ones by size; the 36 by scale_factor refused)
    assert counts[("static", "ok")] >= 165 + 66 and counts[("dynamic", "ok")] >= 200 + 30, counts
    assert counts[("dynamic", "refused")] == 36, counts

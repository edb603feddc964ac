"""PyTorch's own OpInfo samples for adaptive pooling (tests/support/opinfo_adaptive.py), exported with FALLTHROUGH at
their shape and with every dim dynamic, patched, run in onnxruntime and compared with torch.

Nothing may be refused, come out wrong or be left unrunnable, except where torch's exporter lowered an
unbatched pool itself without recording what it should have pooled (README, "The exporter's own pools"),
and the dynamic exports torch itself refuses (global max pooling with indices and symbolic sizes).
The fast test runs the float64 samples (the dtype with the most exporter repairs); the slow one all of
float32/float64/float16.
"""
from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal imports it

from opinfo_adaptive import run_sample, samples


def _sweep(torch, dtypes):
    outcomes = [run_sample(torch, op, dt, s, mode) for op, dt, s in samples(torch, dtypes)
                for mode in ("static", "dynamic")]
    counts = Counter((o.mode, o.status) for o in outcomes)
    bad = [str(o) for o in outcomes if o.status in ("refused", "wrong", "unrunnable")]
    assert not bad, "\n".join(bad[:20])
    # torch's exporter refuses these itself (no model to patch); nothing else may fail to export
    for o in outcomes:
        if o.status == "export_fails":
            assert o.mode == "dynamic" and "returned None for the output 1" in o.detail, str(o)
    # the excused ones are unbatched pools the exporter wrote itself, never a leftover onnxpoolfix lowered
    for o in outcomes:
        if o.status == "no_intent":
            assert len(o.shape) == int(o.op[-2]) + 1 and "exporter wrote" in o.detail, str(o)
    return counts


def test_opinfo_samples_float64(torch_mod):
    counts = _sweep(torch_mod, ("float64",))
    # (torch 2.13: 57 static and 68 dynamic exact; before the exporter-pool repair, the batched float64
    # AveragePool/GlobalAveragePool/GlobalMaxPool and the (C, L) global pools stopped in onnxruntime)
    assert counts[("static", "ok")] >= 55 and counts[("dynamic", "ok")] >= 65, counts


@pytest.mark.slow
def test_opinfo_samples_every_dtype(torch_mod):
    counts = _sweep(torch_mod, ("float32", "float64", "float16"))
    assert counts[("static", "ok")] >= 165 and counts[("dynamic", "ok")] >= 200, counts

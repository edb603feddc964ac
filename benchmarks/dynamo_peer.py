"""The peer: torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``), cached on disk."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
import torch
from runners import OPSET, quiet

# dynamo's decomposition of adaptive_avg_pool2d (torch/_decomp/decompositions.py) unrolls a sum over
# maxlen_h * maxlen_w window offsets when window lengths vary: ~2 nodes per term, and the export time grows
# faster than linearly (361 terms: 17 s, 1369 terms: 80 s on this machine). Beyond this many terms the
# export is not attempted (1024 -> 7 is 148 x 148 = 21904 terms: tens of minutes).
MAX_DYNAMO_TERMS = 2500
CACHE = Path(os.environ.get("ONNXPOOLFIX_BENCH_CACHE", Path(tempfile.gettempdir()) / "onnxpoolfix-bench-cache"))


def dynamo_unroll_terms(shape, out_size) -> int:
    """How many window offsets dynamo's decomposition sums (1 when it takes a shortcut)."""
    k = len(out_size)
    if k != 2:
        return 1
    terms, adaptive_any = 1, False
    for n, m in zip(shape[-2:], out_size):
        maxlen, mod = n // m + 1, n % m
        adaptive = not (mod == 0 or m % mod == 0)
        maxlen += 1 if adaptive else (-1 if mod == 0 else 0)
        adaptive_any |= adaptive
        terms *= maxlen
    return terms if adaptive_any else 1


def export_dynamo(module, x, dynamic_axes=None, key: str | None = None) -> tuple[onnx.ModelProto | None, str]:
    """The dynamo export, or (None, the reason it failed). ``key`` caches it on disk (exports are slow)."""
    cached = CACHE / f"{key}-torch{torch.__version__}.onnx" if key else None
    if cached is not None and cached.exists():
        return onnx.load(str(cached)), ""
    try:
        with quiet():
            kw = {}
            if dynamic_axes:
                kw["dynamic_axes"] = dynamic_axes
                kw["input_names"] = ["x"]
            prog = torch.onnx.export(module, (x,), dynamo=True, opset_version=max(OPSET, 18), verbose=False,
                                     **kw)
        model = prog.model_proto
    except Exception as e:  # noqa: BLE001 - any failure is a result ("n/a")
        msg = str(e).strip().splitlines()
        cause = e.__cause__
        line = next((m for m in msg if m.strip()), type(e).__name__)
        if cause is not None:
            cmsg = next((m for m in str(cause).splitlines() if m.strip()), type(cause).__name__)
            line = f"{type(cause).__name__}: {cmsg}"
        return None, line[:160]
    if cached is not None:
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            onnx.save(model, str(cached))
        except OSError:
            pass
    return model, ""


"""Tuning: the planner's choice by timing the exact candidates in onnxruntime, as TensorRT times its tactics.

Off by default (the cost model's choice is deterministic); ``--tune`` (API ``tune=True``) turns it on, with
onnxruntime's default thread count unless ``--tune-threads N`` says how many intra-op threads the
model will run with (the ranking can depend on it: MatMul scales with threads better than pooling). Each exact
lowering of a node with static sizes is built alone into a one-node model, run on a random input of the
node's shape (symbolic leading dims as 1), interleaved with the others for a few rounds; the fastest call
of each round counts, the median over rounds decides. Nodes whose input exceeds ``MAX_BYTES``, dtypes
numpy cannot draw (bfloat16) and symbolic pooled axes keep the estimate's choice.
"""
from __future__ import annotations

import statistics
import time
from typing import Sequence

import numpy as np
from onnx import TensorProto

from ..graph.emit import np_dtype
from ..graph.shapes import PoolSpec
from ..lowering.base import lowering_model
from ..sessions import ort_session

MAX_BYTES = 256 << 20
ROUNDS = 7
CALLS = 3
TUNABLE = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


def tunable(spec: PoolSpec) -> bool:
    if not spec.static or spec.dtype not in TUNABLE:
        return False
    shape = [d if isinstance(d, int) else 1 for d in spec.input_shape]
    return int(np.prod(shape)) * np.dtype(np_dtype(spec.dtype)).itemsize <= MAX_BYTES


def measure(spec: PoolSpec, lowerings: Sequence, threads: int | None = None) -> dict[str, float]:
    """Median over rounds of the fastest of ``CALLS`` calls, per lowering name (seconds)."""
    shape = [d if isinstance(d, int) else 1 for d in spec.input_shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np_dtype(spec.dtype))
    runs = {}
    for lw in lowerings:
        sess = ort_session(lowering_model(lw, spec, shape, None, "tune")[0], threads=threads, log_level=3)
        sess.run(None, {"x": x})  # warm-up
        runs[lw.name] = sess
    per: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[: r % len(names)]:
            best = float("inf")
            for _ in range(CALLS):
                t = time.perf_counter()
                runs[name].run(None, {"x": x})
                best = min(best, time.perf_counter() - t)
            per[name].append(best)
    return {name: statistics.median(v) for name, v in per.items()}

"""Building the models (the TorchScript FALLTHROUGH export), onnxruntime and torch runners, the timing.

How (the project design notes on measuring speed on shared machines): 2 intra-op threads everywhere,
onnxruntime with ``session.intra_op.allow_spinning=0``; every candidate warmed up; per round every candidate
runs a small batch in a rotating order and its round value is the fastest call of the batch (a 2-thread
torch kernel stalls for a scheduler slice, ~8 ms, whenever another tenant holds a core: the fastest call
is the kernel's own speed); rounds where the floor was unusually slow (another tenant) are discarded;
results are medians over rounds, and ratios are medians of per-round ratios.
"""
from __future__ import annotations

import contextlib
import io
import logging
import statistics
import time
import warnings
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph.shapes import model_opset, resolve_specs
from onnxpoolfix.plan.planner import candidates

THREADS = 2
OPSET = 17


@contextlib.contextmanager
def quiet():
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        warnings.simplefilter("ignore")
        yield buf


def _out_names(module, x):
    with torch.no_grad():
        y = module(x)
    n = len(y) if isinstance(y, tuple) else 1
    return ["y"] if n == 1 else [f"y{i}" for i in range(n)]


def export_fallthrough(module, x, dynamic_axes=None) -> onnx.ModelProto:
    f = io.BytesIO()
    with quiet():
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=OPSET,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          input_names=["x"], output_names=_out_names(module, x), dynamic_axes=dynamic_axes,
                          do_constant_folding=True)
    return onnx.load_from_string(f.getvalue())


# dynamo's decomposition of adaptive_avg_pool2d (torch/_decomp/decompositions.py) unrolls a sum over


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_runner(model: onnx.ModelProto, x: np.ndarray) -> Callable[[], object]:
    sess = session(model)
    feed = {sess.get_inputs()[0].name: x}
    outs = [o.name for o in sess.get_outputs()]
    return lambda: sess.run(outs, feed)


def torch_runner(module: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def run():
        with torch.inference_mode():
            return module(x)
    return run


def planned(model: onnx.ModelProto) -> dict[str, float]:
    """The planner's estimate per lowering, summed over the model's nodes (only lowerings exact for all)."""
    opset = model_opset(model)
    specs = resolve_specs(model, find_pool_nodes(model.graph), opset=opset, target="onnxruntime")
    total: dict[str, float] = {}
    bad: set[str] = set()
    for s in specs:
        for c in candidates(s):
            if c.reason is not None:
                bad.add(c.name)
            else:
                total[c.name] = total.get(c.name, 0.0) + c.cost
    return {k: v for k, v in total.items() if k not in bad}


def _calls_for(fn: Callable[[], object], target_s: float) -> tuple[int, float]:
    """Warm up ``fn`` and return (calls per batch, seconds per call)."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    n = 1
    while dt * n < target_s and n < 200:
        n *= 2
    # a second warm-up pass the size of one batch
    for _ in range(min(n, 8)):
        fn()
    return n, dt


def time_interleaved(cands: dict[str, Callable[[], object]], rounds: int, batch_s: float, budget_s: float,
                     floor_key: str = "floor") -> tuple[dict[str, list[float]], int, int]:
    """Per round, per candidate (rotating order): the fastest call of a batch. Returns the per-round values,
    the rounds kept and the rounds discarded as busy."""
    names = list(cands)
    batch = {}
    for k in names:
        batch[k], _ = _calls_for(cands[k], batch_s)
    vals: dict[str, list[float]] = {k: [] for k in names}
    start = time.perf_counter()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for k in order:
            fn = cands[k]
            ts = []
            for _ in range(batch[k]):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            vals[k].append(min(ts))
        if r >= 2 and time.perf_counter() - start > budget_s:
            break
    done = len(vals[names[0]])
    # discard busy rounds: the floor (a pure streaming read) was much slower than its usual
    keep = list(range(done))
    if floor_key in vals and done >= 4:
        med = statistics.median(vals[floor_key])
        ok = [i for i in keep if vals[floor_key][i] <= 1.35 * med]
        if len(ok) >= max(3, done // 2):
            keep = ok
    return {k: [v[i] for i in keep] for k, v in vals.items()}, len(keep), done - len(keep)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ratio(vals, a, b):
    """Median over rounds of vals[a] / vals[b]."""
    if a not in vals or b not in vals:
        return None
    return med([x / y for x, y in zip(vals[a], vals[b])])


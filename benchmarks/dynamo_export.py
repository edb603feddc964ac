#!/usr/bin/env python
"""The plain dynamo export against the same module through ``onnxpoolfix.export(dynamo=True)``.

    python benchmarks/dynamo_export.py                  # every case, writes benchmarks/RESULTS_dynamo_export.md
    python benchmarks/dynamo_export.py --quick          # two small cases, few rounds, writes nothing unless --out
    python benchmarks/dynamo_export.py --cases alexnet_300,avg_128to3 [--out FILE]

Per case and exporter: the export's wall time (onnxpoolfix's includes its patch, its onnxruntime check and
its comparison with torch at several sizes), the node count of the saved graph, the onnxruntime latency at the
traced size, and the max error against the torch module at the traced size and away from it (the sizes
listed per case; "fails" where onnxruntime refuses to run a size torch runs). Plain dynamo cannot export
adaptive max pooling or 3D average pooling at all ("n/a" and why).

Timing follows benchmarks/bench.py's method: 2 intra-op threads, spinning off, both models warmed up, run
in rotating order per round, the fastest call of each round's batch, medians over rounds.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import onnxpoolfix  # noqa: E402

THREADS = 2


def alexnet(channels=(64, 192, 384, 256, 256)) -> nn.Module:
    """torchvision's AlexNet layout, its classifier shortened (the pool is what is compared)."""
    torch.manual_seed(0)
    c1, c2, c3, c4, c5 = channels
    return nn.Sequential(
        nn.Conv2d(3, c1, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(c2, c3, 3, padding=1), nn.ReLU(), nn.Conv2d(c3, c4, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c4, c5, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(), nn.Linear(c5 * 36, 100)).eval()


def pool(module: nn.Module, channels: int, conv: int = 2) -> nn.Module:
    torch.manual_seed(0)
    Conv = nn.Conv3d if isinstance(module, (nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool3d)) else nn.Conv2d
    return nn.Sequential(Conv(3, channels, 3, padding=1), module).eval()


@dataclass
class Case:
    name: str
    make: object
    shape: tuple
    away: list  # other input shapes to compare at
    dynamic: dict | None = None  # dynamic_shapes for both exporters
    what: str = ""


def _dims(lo, hi):
    return {"input": {2: torch.export.Dim("H", min=lo, max=hi), 3: torch.export.Dim("W", min=lo, max=hi)}}


CASES = [
    Case("alexnet_300", alexnet, (1, 3, 300, 300), [], None, "AlexNet at 300x300 (8 -> 6)"),
    Case("alexnet_dyn", alexnet, (1, 3, 300, 300), [(1, 3, 224, 224), (1, 3, 512, 384), (1, 3, 100, 100)],
         _dims(64, 512), "AlexNet, Dim H/W traced at 300x300"),
    Case("avg_9to7", lambda: pool(nn.AdaptiveAvgPool2d((7, 7)), 64), (1, 3, 9, 9), [], None, "1x64x9x9 -> 7x7"),
    Case("avg_128to3", lambda: pool(nn.AdaptiveAvgPool2d((3, 3)), 16), (1, 3, 128, 128), [], None,
         "1x16x128x128 -> 3x3"),
    Case("avg_dyn_7", lambda: pool(nn.AdaptiveAvgPool2d((7, 7)), 32), (1, 3, 10, 10),
         [(1, 3, 20, 20), (1, 3, 33, 33), (1, 3, 64, 64)], _dims(4, 128), "-> 7x7, Dim H/W traced at 10x10"),
    Case("max_dyn_5x7", lambda: pool(nn.AdaptiveMaxPool2d((5, 7)), 32), (1, 3, 10, 11),
         [(1, 3, 20, 20), (1, 3, 4, 5)], _dims(2, 64), "max -> 5x7, Dim H/W"),
    Case("avg3d", lambda: pool(nn.AdaptiveAvgPool3d((2, 3, 5)), 8), (1, 3, 5, 9, 11), [], None,
         "3D 1x8x5x9x11 -> 2x3x5"),
]


@dataclass
class Result:
    export_s: float | None = None
    nodes: int | None = None
    latency_us: float | None = None
    err_traced: float | None = None
    away: list = field(default_factory=list)  # (shape, error or message)
    why: str = ""


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 4
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _error(sess, module, shape) -> float | str:
    x = torch.randn(*shape)
    with torch.no_grad():
        want = module(x).numpy()
    try:
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    except Exception as e:  # noqa: BLE001 - the finding: onnxruntime cannot run a size torch runs
        return "fails: " + " ".join(str(e).split())[:60]
    if got.shape != want.shape:
        return f"shape {list(got.shape)}"
    return float(np.max(np.abs(got - want)))


def export_case(case: Case, exporter: str, folder: Path) -> tuple[Result, Path | None]:
    module = case.make()
    x = torch.randn(*case.shape)
    path = folder / f"{case.name}_{exporter}.onnx"
    r = Result()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if exporter == "dynamo":
                torch.onnx.export(module, (x,), str(path), dynamo=True, dynamic_shapes=case.dynamic,
                                  external_data=False)
            else:
                onnxpoolfix.export(module, (x,), path, dynamic_shapes=case.dynamic, external_data=False)
    except Exception as e:  # noqa: BLE001 - plain dynamo refuses max pooling and 3D average pooling
        # torch's message ends in boilerplate; its "Exception summary" names the root cause first
        causes = [ln for ln in str(e).splitlines() if ln.startswith("<class")]
        r.why = type(e).__name__ + ": " + " ".join((causes[0] if causes else str(e)).split())[:100]
        return r, None
    r.export_s = time.perf_counter() - t0
    r.nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    sess = _session(path)
    r.err_traced = _error(sess, module, case.shape)
    r.away = [(s, _error(sess, module, s)) for s in case.away]
    return r, path


def time_pair(paths: dict[str, Path], shape, rounds: int, batch: int) -> dict[str, float]:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    runs = {}
    for k, p in paths.items():
        sess = _session(p)
        feed = {sess.get_inputs()[0].name: x}
        runs[k] = (lambda s=sess, f=feed: s.run(None, f))
        for _ in range(3):
            runs[k]()
    vals = {k: [] for k in runs}
    names = list(runs)
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            ts = []
            for _ in range(batch):
                t0 = time.perf_counter()
                runs[k]()
                ts.append(time.perf_counter() - t0)
            vals[k].append(min(ts))
    return {k: statistics.median(v) * 1e6 for k, v in vals.items()}


def _fmt_err(e) -> str:
    if e is None:
        return "-"
    return e if isinstance(e, str) else f"{e:.1e}"


def run(cases, rounds: int, batch: int, log=print) -> list[tuple[Case, dict[str, Result]]]:
    torch.set_num_threads(THREADS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # the first export of a process builds torch's op registry (seconds): not the case's cost
        warm = Case("warmup", lambda: pool(nn.AdaptiveAvgPool2d((3, 3)), 2), (1, 3, 5, 5), [])
        for exporter in ("dynamo", "onnxpoolfix"):
            export_case(warm, exporter, Path(tmp))
        for case in cases:
            results, paths = {}, {}
            for exporter in ("dynamo", "onnxpoolfix"):
                results[exporter], p = export_case(case, exporter, Path(tmp))
                if p is not None:
                    paths[exporter] = p
            for k, us in time_pair(paths, case.shape, rounds, batch).items():
                results[k].latency_us = us
            rows.append((case, results))
            log(f"{case.name}: " + "; ".join(
                f"{k} {r.export_s or 0:.1f}s {r.nodes} nodes {r.latency_us or 0:.0f}us err {_fmt_err(r.err_traced)}"
                + "".join(f" | {'x'.join(map(str, s[2:]))}: {_fmt_err(e)}" for s, e in r.away) + (f" ({r.why})" if r.why else "")
                for k, r in results.items()))
    return rows


COLUMNS = ("case", "exporter", "export s", "nodes", "latency us", "err at traced", "err away from traced")


def markdown(rows, argv) -> str:
    L = ["# The dynamo exporter alone vs through onnxpoolfix\n",
         f"Generated by `python benchmarks/dynamo_export.py {' '.join(argv)}`".rstrip() + f" on {time.strftime('%Y-%m-%d')}: "
         f"torch {torch.__version__}, onnxruntime {ort.__version__}, {THREADS} threads, fp32, "
         f"{os.cpu_count()} CPU cores shared with other jobs. **dynamo** = `torch.onnx.export(..., dynamo=True)`; "
         "**onnxpoolfix** = `onnxpoolfix.export(...)` (dynamo with onnxpoolfix's translation table, patched, "
         "checked, compared with torch at several sizes: its export time includes all of that). Latency: "
         "onnxruntime at the traced size, median over rounds of the fastest call per batch. Errors: max "
         "|onnxruntime - torch| on random input; away from traced: at the sizes named (H x W).\n",
         "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for case, results in rows:
        for k, r in results.items():
            if r.export_s is None:
                L.append(f"| {case.name} ({case.what}) | {k} | n/a | | | | {r.why} |")
                continue
            away = ", ".join(f"{'x'.join(map(str, s[2:]))}: {_fmt_err(e)}" for s, e in r.away) or "-"
            L.append(f"| {case.name} ({case.what}) | {k} | {r.export_s:.1f} | {r.nodes} | "
                     f"{r.latency_us:.0f} | {_fmt_err(r.err_traced)} | {away} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two small cases, few rounds")
    ap.add_argument("--cases", help="comma-separated case names")
    ap.add_argument("--out", help="markdown file to write (default benchmarks/RESULTS_dynamo_export.md for a full run)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cases = CASES
    if args.cases:
        wanted = args.cases.split(",")
        unknown = set(wanted) - {c.name for c in CASES}
        if unknown:
            ap.error(f"unknown case(s) {sorted(unknown)}; known: {[c.name for c in CASES]}")
        cases = [c for c in CASES if c.name in wanted]
    elif args.quick:
        cases = [c for c in CASES if c.name in ("avg_9to7", "avg_dyn_7")]
    rows = run(cases, rounds=3 if args.quick else 15, batch=3 if args.quick else 10)
    out = args.out or (None if (args.quick or args.cases) else str(ROOT / "benchmarks" / "RESULTS_dynamo_export.md"))
    if out:
        Path(out).write_text(markdown(rows, argv))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The default target's choice for static averages against every exact lowering forced, in onnxruntime.

    python benchmarks/default_choice.py [--rounds 11] [--shapes "[((8,256,64,64),(3,3)), ...]"]

Per shape: one leftover (tests/support/helpers.make_leftover), patched by the planner and forced to each of
``kronecker``, ``matmul``, ``window_slices``, ``pool`` and ``mixed`` where it applies (check off), every file run
in one process (onnxruntime, 2 threads, fp32), the runs of one round shuffled; prints the medians, the chosen
lowering's median over the fastest one's, and the same for the minima. The default shapes are batched large
inputs, where one window's copy exceeds the cache (benchmarks/RESULTS.md, "The default target's window copies
out of cache"), and large planes at batch 1 (review67's window Slices)."""
from __future__ import annotations

import argparse
import ast
import random
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from helpers import make_leftover  # noqa: E402

import onnxpoolfix  # noqa: E402
from onnxpoolfix.errors import UnsupportedNodeError  # noqa: E402

SHAPES = [((32, 64, 128, 128), (3, 3)), ((8, 256, 64, 64), (3, 3)), ((8, 512, 56, 56), (3, 3)),
          ((8, 64, 224, 224), (6, 6)), ((32, 64, 128, 128), (7, 7)), ((1, 3, 128, 128, 128), (7, 7, 7)),
          ((4, 3, 1024, 1024), (7, 7)), ((1, 64, 224, 224), (6, 6)), ((1, 3, 1024, 1024), (7, 7))]
FORCED = ("kronecker", "matmul", "window_slices", "pool", "mixed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--shapes", type=ast.literal_eval, default=SHAPES)
    args = ap.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    shuffle = random.Random(0).shuffle
    print("| input -> out | chosen | chosen: median | fastest | chosen/fastest (median) | (minimum) | medians, ms |")
    print("|---|---|---|---|---|---|---|")
    for shape, size in args.shapes:
        base = make_leftover("avg", shape, size)
        chosen = onnxpoolfix.patch(base, check=False).report.nodes[0].lowering
        sessions = {}
        for name in FORCED:
            try:
                model = onnxpoolfix.patch(base, check=False, strategy=name).model
            except UnsupportedNodeError:  # the lowering does not apply
                continue
            sessions[name] = ort.InferenceSession(model.SerializeToString(), options,
                                                  providers=["CPUExecutionProvider"])
        x = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        times = {name: [] for name in sessions}
        for s in sessions.values():
            s.run(None, x)
        for _ in range(args.rounds):
            order = list(sessions)
            shuffle(order)
            for name in order:
                start = time.perf_counter()
                sessions[name].run(None, x)
                times[name].append(time.perf_counter() - start)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        low = {k: float(min(v)) * 1e3 for k, v in times.items()}
        fastest = min(med, key=med.get)
        print(f"| {list(shape)} -> {'x'.join(map(str, size))} | {chosen} | {med[chosen]:.2f} ms | {fastest} | "
              f"{med[chosen] / med[fastest]:.2f}x | {low[chosen] / min(low.values()):.2f}x | "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(med.items())) + " |", flush=True)


if __name__ == "__main__":
    main()

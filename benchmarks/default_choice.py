#!/usr/bin/env python
"""The default target's choice for static averages against every exact lowering forced, in onnxruntime.

    python benchmarks/default_choice.py [--rounds 11] [--shapes "[((8,256,64,64),(3,3)), ...]"]

Per shape: one leftover (tests/support/helpers.make_leftover), patched by the planner and forced to each of
``kronecker``, ``matmul``, ``window_slices``, ``pool`` and ``mixed`` where it applies (check off), every file run
in one process beside the read-once floor (runners.time_interleaved: onnxruntime, 2 threads, fp32, busy rounds
discarded); prints the medians, the chosen lowering's median over the fastest one's, and the same for the
minima. The default shapes are large inputs, where one window's copy exceeds the cache (benchmarks/RESULTS.md,
"The default target's window copies out of cache"), and large planes at batch 1 (review67's window Slices)."""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from floor import floor_model  # noqa: E402
from helpers import make_leftover  # noqa: E402
from runners import med, ort_runner, time_interleaved  # noqa: E402

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
    print("| input -> out | chosen | chosen: median | fastest | chosen/fastest (median) | (minimum) | medians, ms |")
    print("|---|---|---|---|---|---|---|")
    for shape, size in args.shapes:
        base = make_leftover("avg", shape, size)
        chosen = onnxpoolfix.patch(base, check=False).report.nodes[0].lowering
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        runners = {"floor": ort_runner(floor_model(shape), x)}
        for name in FORCED:
            try:
                runners[name] = ort_runner(onnxpoolfix.patch(base, check=False, strategy=name).model, x)
            except UnsupportedNodeError:  # the lowering does not apply
                continue
        vals, _, _ = time_interleaved(runners, args.rounds, 0.02, 60.0)
        vals.pop("floor")
        mid = {k: med(v) * 1e3 for k, v in vals.items()}
        low = {k: min(v) * 1e3 for k, v in vals.items()}
        fastest = min(mid, key=mid.get)
        print(f"| {list(shape)} -> {'x'.join(map(str, size))} | {chosen} | {mid[chosen]:.2f} ms | {fastest} | "
              f"{mid[chosen] / mid[fastest]:.2f}x | {low[chosen] / min(low.values()):.2f}x | "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(mid.items())) + " |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The portable target's lowerings against the default target's, in onnxruntime (issue 33).

    python benchmarks/portable_speed.py [--rounds 15] [--cases avg_9to7,...] [--results]

Per average case of cases.py, each static max case without its indices read (the portable target's NaN/-inf
guard is always evaluated, where the default target's If skips it for finite inputs), and each dynamic-H/W case of cases_dynamic.py without an indices output, run at
a size it was not traced at): the FALLTHROUGH export patched with the default target (``onnxruntime``:
MatMul against constant 1/len pooling matrices where windows are not uniform) and with ``--target portable``
(window Slices averaged by AveragePool runs or ReduceMeans, window sums beyond 64 windows; no weights: exact
after int8 quantization and fp16 storage, NaN kept in its windows), timed interleaved with runners.time_interleaved beside the read-once floor (busy
rounds discarded). The ratio is the median of per-round ratios portable/default. ``--results`` writes the
table into benchmarks/RESULTS.md as the section under HEADING (every other section kept byte for byte).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES  # noqa: E402
from cases_dynamic import DYNAMIC_CASES  # noqa: E402
from floor import floor_model  # noqa: E402
from results_md import table_args, write_table  # noqa: E402
from runners import THREADS, export_fallthrough, med, ort_runner, ratio, time_interleaved  # noqa: E402

import onnxpoolfix  # noqa: E402
from onnxpoolfix.inspection.model import inspect_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## The portable target's lowerings vs the default's (portable_speed.py)"


def static_cases(names: list[str] | None):
    """The static cases without an indices output (with it, both targets write the same Gathers)."""
    out = []
    for c in CASES:
        if c.dynamic_axes or c.name.startswith(("maxidx", "dyn")):
            continue
        if names is None or c.name in names:
            out.append(c)
    return out


def symbolic_cases(names: list[str] | None):
    """The dynamic-H/W cases without an indices output (the portable target refuses a read indices output
    under symbolic sizes): the default target's ``dynamic`` lowering vs the portable ``window_slices``."""
    return [c for c in DYNAMIC_CASES if "maxidx" not in c.name and (names is None or c.name in names)]


def lowerings(model) -> str:
    return "+".join(sorted({n.lowering for n in model.report.nodes})) or "(exporter)"


def run(case, rounds: int) -> dict:
    torch.manual_seed(0)
    module = case.make().eval()
    base = export_fallthrough(module, torch.randn(*case.shape), case.dynamic_axes)
    x = torch.randn(*(case.run_shape or case.shape))  # a symbolic case runs at a size it was not traced at
    default = onnxpoolfix.patch(base, check=False)
    port = onnxpoolfix.patch(base, check=False, target="portable")
    xn = x.numpy()
    cands = {"default": ort_runner(default.model, xn), "portable": ort_runner(port.model, xn),
             "floor": ort_runner(floor_model(tuple(x.shape)), xn)}
    gathers = portable_gathers(base, port)
    if gathers is not None:  # what the portable target wrote before it ranked the forms ncnn takes first
        cands["gathers"] = ort_runner(gathers.model, xn)
    with torch.no_grad():
        want = module(x)
    want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
    err = max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(cands["portable"](), want))
    vals, kept, _ = time_interleaved(cands, rounds, 0.02, 30.0)
    return dict(case=case.name, desc=case.desc, default=lowerings(default), portable=lowerings(port),
                t_default=med(vals["default"]), t_portable=med(vals["portable"]),
                ratio=ratio(vals, "portable", "default"), rounds=kept, error=err,
                gathers=ratio(vals, "portable", "gathers") if "gathers" in vals else None)


def portable_gathers(base, port):
    """A one-node file with the portable target's cheapest estimated lowering forced, where that is not what it
    writes (it ranks first the forms ncnn has a layer for every op of: plan/planner.py), else None."""
    if len(port.report.nodes) != 1:
        return None
    (node,) = inspect_model(base, target="portable").nodes
    cheapest = min((c for c in node.candidates if c.reason is None), key=lambda c: c.cost_s)
    if cheapest.name == port.report.nodes[0].lowering:
        return None
    return onnxpoolfix.patch(base, check=False, target="portable", strategy=cheapest.name)

def us(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-2 else f"{s * 1e3:.1f} ms"


def main():
    args = table_args(__doc__, "comma-separated case names (default: every static case without indices)")
    lines = ["| case | default: lowering | default | portable: lowering | portable | portable/default | "
             "portable's error vs torch | portable/its Gathers |", "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for case in static_cases(args.cases) + symbolic_cases(args.cases):
        r = run(case, args.rounds)
        lines.append(f"| {r['case']} {r['desc']} | {r['default']} | {us(r['t_default'])} | {r['portable']} | "
                     f"{us(r['t_portable'])} | {r['ratio']:.2f}x | {r['error']:.1e} | "
                     + (f"{r['gathers']:.2f}x |" if r["gathers"] is not None else " |"))
        print(lines[-1], flush=True)
    if args.results:
        intro = (f"`python benchmarks/portable_speed.py --rounds {args.rounds}` on {time.strftime('%Y-%m-%d')}, "
                 f"onnxruntime, {THREADS} threads, fp32, interleaved (runners.time_interleaved), on a machine shared "
                 "with other jobs. The default target takes the window Slices itself where its cost model estimates "
                 "them faster than its MatMuls (long windows, large planes: RESULTS.md, section \"The default "
                 "target's choice between MatMul and window Slices\"); elsewhere `--target portable` pays the ratio below "
                 "for averages that survive int8 quantization (quantize_dynamic: float32-exact; quantize_static: "
                 "at most the dynamo export's error), fp16 weight storage (exact) and NaN/inf (confined to their "
                 "windows as in torch); where every axis has uniform windows or integer upsampling both targets "
                 "write the same AveragePool/Resize. The static `max_` cases: the portable target's NaN/-inf guard is "
                 "always evaluated (no If; the default target's If skips it for finite inputs), and it writes a form "
                 "ncnn has layers for wherever one applies; the last column times that against the portable target's "
                 "cheapest estimated lowering, forced (Gathers and comparisons: what it wrote before). The `dyn_` cases keep H and W symbolic: the default target's "
                 "`dynamic` lowering (runtime pooling matrices and window tables) against the portable "
                 "`window_slices` (a Slice per window), run at a size they were not traced at.")
        write_table(RESULTS, HEADING, intro, lines)


if __name__ == "__main__":
    main()

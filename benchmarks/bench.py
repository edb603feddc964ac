#!/usr/bin/env python
"""Speed of onnxpoolfix's patched graphs against torch's kernel, the dynamo exporter and a read-once floor.

    python benchmarks/bench.py                      # every case, writes benchmarks/RESULTS.md (~10 min)
    python benchmarks/bench.py --quick              # few rounds (smoke test), writes nothing unless --out
    python benchmarks/bench.py --cases avg_9to7,max_10to7 [--out FILE] [--no-lowerings]

Per case: build the module in torch, export it with the TorchScript exporter and ONNX_FALLTHROUGH, patch it
(check off; the lowering the planner chose is recorded), export it with dynamo=True (adaptive max pooling
fails there: "n/a" and why), and time in ONE interleaved run:

- ``ours``: onnxruntime on the patched model,
- ``dynamo``: onnxruntime on the dynamo export,
- ``torch``: the module itself (torch's native kernel), ``torch.set_num_threads(2)``,
- ``floor``: onnxruntime ReduceSum over the same input tensor (reading the input once),
- ``lw:<name>``: onnxruntime on the model patched with ``strategy=<name>``, for every lowering that is exact
  for the case (to see whether the planner picked the fastest),
- ``calibrated``: where the planner chooses otherwise with the cost constants ``onnxpoolfix calibrate``
  measures on this machine at the start of the run (``--costs``), that model; where it chooses the
  same, the two choices share one time.

One script per job, beside this one: cases.py (the cases; cases_dynamic.py the dynamic ones), runners.py
(exports, onnxruntime/torch runners, the interleaved timing: how it measures), dynamo_peer.py (the dynamo
exporter), floor.py (the read-once floor), tables.py (console table and RESULTS.md), notes.py (the analysis
under the tables). This script runs the cases and writes the results.

Dynamic cases (the hook): a :class:`Case` may carry ``dynamic_axes`` (passed to both exporters, as in
``torch.onnx.export``) and ``run_shape`` (the input shape actually fed at run time; the trace uses
``shape``). ``patch_kwargs`` are passed to :func:`onnxpoolfix.patch` (e.g. ``input_shapes``).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts below

from cases import CASES, Case, Pyramid, adaptive_avg, adaptive_max, all_cases  # noqa: E402,F401
from dynamo_peer import MAX_DYNAMO_TERMS, dynamo_unroll_terms, export_dynamo  # noqa: E402
from floor import floor_model  # noqa: E402
from runners import (  # noqa: E402,F401
    THREADS,
    export_fallthrough,
    med,
    ort_runner,
    planned,
    quiet,
    ratio,
    session,
    time_interleaved,
    torch_runner,
)
from tables import COLUMNS, markdown, print_table, sections_owned_elsewhere, table_row, targets, us  # noqa: E402,F401

import onnxpoolfix  # noqa: E402
from onnxpoolfix.frontends.leftovers import find_pool_nodes  # noqa: E402
from onnxpoolfix.lowering import calibration  # noqa: E402
from onnxpoolfix.plan.planner import STRATEGIES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WITHIN = 0.15  # the planner's choice counts as right when within 15% of the fastest measured lowering
_avg, _max = adaptive_avg, adaptive_max  # the names the smoke test and older callers use


# ----------------------------------------------------------------------------------------------
# one case


def run_case(case: Case, rounds: int = 15, batch_s: float = 0.02, budget_s: float = 30.0,
             lowerings: bool = True, log=print, no_cache: bool = False, costs: str | None = None) -> dict:
    """One case's row; ``costs``: a file of calibrated cost constants (:func:`calibrate`) whose choice is
    judged too."""
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    module = case.make().eval()
    trace_x = torch.randn(*case.shape)
    x = torch.randn(*case.input_shape)
    xn = x.numpy()

    base = export_fallthrough(module, trace_x, case.dynamic_axes)
    n_left = len(find_pool_nodes(base.graph))
    row: dict = dict(case=case.name, desc=case.desc, input_mb=xn.nbytes / 2**20, leftover=n_left)
    # ours: the tool as its fastest use runs it (--optimize-exporter-pools: the exporter's own pools of
    # adaptive windows are planned too); "default" (without the flag) is timed as well where it differs
    res = onnxpoolfix.patch(base, check=False, optimize_exporter_pools=True, **case.patch_kwargs)
    row["exporter_nodes"] = sum(n.encoding == "standard" for n in res.report.nodes)
    if res.report.nodes:
        ours = res.model
        row["chosen"] = "+".join(sorted({n.lowering for n in res.report.nodes}))
        row["ops"] = sorted({o for n in res.report.nodes for o in n.ops})
        est = planned(base) if n_left and not case.patch_kwargs else {}
    else:  # nothing for us to do: the exporter's nodes are already the fastest exact form
        ours = base
        row["chosen"] = "(exporter)"
        row["ops"] = sorted({n.op_type for n in base.graph.node})
        est = {}
    row["estimates"] = est

    sizes = [tuple(n.output_size) for n in find_pool_nodes(base.graph)] if n_left else []
    terms = max([dynamo_unroll_terms(case.shape, o) for o in sizes if o and all(isinstance(d, int) for d in o)]
                or [1])
    t0 = time.perf_counter()
    if terms > MAX_DYNAMO_TERMS:
        dyn, why = None, (f"not run: its decomposition unrolls {terms} window terms (~{2 * terms} nodes); "
                          f"the export alone takes tens of minutes")
    else:
        key = f"{case.name}-{'x'.join(map(str, case.shape))}" + ("-dyn" if case.dynamic_axes else "")
        dyn, why = export_dynamo(module, trace_x, case.dynamic_axes, key=None if no_cache else key)
    row["dynamo_export_s"] = time.perf_counter() - t0
    row["dynamo_why"] = why
    row["dynamo_ops"] = None
    if dyn is not None:
        ops = [n.op_type for n in dyn.graph.node]
        row["dynamo_ops"] = ops
        row["dynamo_plain"] = all(o in ("AveragePool", "GlobalAveragePool", "ReduceMean", "MaxPool",
                                        "GlobalMaxPool", "Constant", "Identity", "Reshape") for o in ops)

    cands: dict[str, Callable] = {"ours": ort_runner(ours, xn)}
    if row["exporter_nodes"]:  # without the flag: only the leftovers patched (or nothing at all)
        default = onnxpoolfix.patch(base, check=False, **case.patch_kwargs).model if n_left else base
        cands["default"] = ort_runner(default, xn)
    if dyn is not None:
        try:
            cands["dynamo"] = ort_runner(dyn, xn)
            cands["dynamo"]()
        except Exception as e:  # noqa: BLE001 - e.g. the dynamo graph fails at a size it was not traced at
            cands.pop("dynamo", None)
            row["dynamo_why"] = f"onnxruntime failed: {str(e).splitlines()[0][:120]}"
    cands["torch"] = torch_runner(module, x)
    cands["floor"] = ort_runner(floor_model(case.input_shape), xn)
    if case.dynamic_axes:
        # the same module exported and patched statically at the run size: what the dynamic lowering costs
        static = onnxpoolfix.patch(export_fallthrough(module, x), check=False)
        row["static_chosen"] = "+".join(sorted({n.lowering for n in static.report.nodes})) or "(exporter)"
        cands["static"] = ort_runner(static.model, xn)
        with torch.no_grad():
            want = [t.numpy() for t in _as_tuple(module(x))]
        row["ours_error"] = _max_error(session(ours).run(None, {"x": xn}), want)
        if "dynamo" in cands:
            row["dynamo_error"] = _max_error(session(dyn).run(None, {"x": xn}), want)

    calibrated = None
    if costs and n_left:
        cal = onnxpoolfix.patch(base, check=False, optimize_exporter_pools=True, costs=costs, **case.patch_kwargs)
        calibrated = "+".join(sorted({n.lowering for n in cal.report.nodes}))
        row["chosen_calibrated"] = calibrated
        if cal.model.SerializeToString() != ours.SerializeToString():
            cands["calibrated"] = ort_runner(cal.model, xn)

    forced: list[str] = []
    if lowerings and n_left:
        for name in STRATEGIES[1:]:
            try:
                m = onnxpoolfix.patch(base, check=False, strategy=name, **case.patch_kwargs).model
            except onnxpoolfix.PoolFixError:
                continue
            except Exception as e:  # noqa: BLE001
                log(f"  [{case.name}] strategy {name} failed: {type(e).__name__}: {e}")
                continue
            try:
                cands[f"lw:{name}"] = ort_runner(m, xn)
                forced.append(name)
            except Exception as e:  # noqa: BLE001
                log(f"  [{case.name}] strategy {name}: onnxruntime refused: {str(e).splitlines()[0][:120]}")

    vals, kept, dropped = time_interleaved(cands, rounds, batch_s, budget_s)
    row.update(rounds=kept, busy_rounds=dropped)
    t = {k: med(v) for k, v in vals.items()}
    row["t"] = t
    row["ours_vs_torch"] = ratio(vals, "ours", "torch")
    row["dynamo_vs_ours"] = ratio(vals, "dynamo", "ours")
    row["ours_vs_floor"] = ratio(vals, "ours", "floor")
    if case.dynamic_axes:
        row["ours_vs_static"] = ratio(vals, "ours", "static")
    row["lowerings"] = {n: t[f"lw:{n}"] for n in forced}
    if forced:
        fastest = min(forced, key=lambda n: t[f"lw:{n}"])
        row["fastest"] = fastest
        chosen_single = row["chosen"] if row["chosen"] in forced else None
        if chosen_single:
            r = ratio(vals, f"lw:{chosen_single}", f"lw:{fastest}")
        elif row["chosen"] == "pyramid":  # the group plan against every node forced to one lowering
            r = ratio(vals, "ours", f"lw:{fastest}")
        else:
            r = None
        row["chosen_vs_fastest"] = r
        row["choice_ok"] = None if r is None else r <= 1 + WITHIN
        if calibrated is not None:
            rc = ratio(vals, "calibrated", f"lw:{fastest}") if "calibrated" in cands else r
            row["calibrated_vs_fastest"] = rc
            row["calibrated_ok"] = None if rc is None else rc <= 1 + WITHIN
    else:
        row["fastest"], row["chosen_vs_fastest"], row["choice_ok"] = None, None, None
    return row


def calibrate(path: Path) -> dict[str, float]:
    """``onnxpoolfix calibrate --threads THREADS --out path``: this machine's cost constants."""
    constants = calibration.measure(threads=THREADS)
    calibration.save(constants, path, threads=THREADS)
    return constants


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _max_error(got, want) -> float:
    return max(float(np.abs(g.astype(np.float64) - w).max()) for g, w in zip(got, want))


# ----------------------------------------------------------------------------------------------
# the real-network fixture


def _load_make_fixtures():
    path = ROOT / "fixtures" / "make_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_fixtures", path)
    mod = importlib.util.module_from_spec(spec)
    with quiet():
        spec.loader.exec_module(mod)
    return mod


def run_fixture(rounds: int = 15, batch_s: float = 0.02, budget_s: float = 20.0, log=print) -> dict:
    """fixtures/small_convnet.onnx patched vs a dynamo export of the same architecture (same seed)."""
    mf = _load_make_fixtures()
    name = "small_convnet"
    c = next(c for c in mf.CASES if c["name"] == name)
    torch.manual_seed(mf.seed_for(name))
    module = c["make_module"]().eval()
    shape = tuple(c["inputs"]["x"])
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(mf.seed_for(name) + 1))
    xn = x.numpy()
    base = onnx.load(str(ROOT / "fixtures" / "small_convnet.onnx"))
    res = onnxpoolfix.patch(base, check=False)
    row = dict(case=name, desc=f"fixtures/small_convnet.onnx, input {list(shape)}",
               chosen="+".join(n.lowering for n in res.report.nodes))
    # the fixture and the rebuilt module must be the same network
    ref = res.model
    y_ours = ort_runner(ref, xn)()[0]
    with torch.no_grad():
        y_torch = module(x).numpy()
    row["same_network_max_diff"] = float(np.abs(y_ours - y_torch).max())
    dyn, why = export_dynamo(module, x, key=f"{name}-fixture")
    row["dynamo_why"] = why
    cands = {"ours": ort_runner(ref, xn)}
    if dyn is not None:
        cands["dynamo"] = ort_runner(dyn, xn)
        row["dynamo_nodes"] = len(dyn.graph.node)
    row["ours_nodes"] = len(ref.graph.node)
    cands["torch"] = torch_runner(module, x)
    cands["floor"] = ort_runner(floor_model(shape), xn)
    vals, kept, dropped = time_interleaved(cands, rounds, batch_s, budget_s)
    row.update(rounds=kept, busy_rounds=dropped, t={k: med(v) for k, v in vals.items()},
               ours_vs_torch=ratio(vals, "ours", "torch"), dynamo_vs_ours=ratio(vals, "dynamo", "ours"))
    return row


# ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few rounds, short batches (smoke test)")
    ap.add_argument("--cases", help="comma-separated case names (default: all; 'list' lists them)")
    ap.add_argument("--rounds", type=int, help="rounds per case (default 15, --quick 3)")
    ap.add_argument("--no-lowerings", action="store_true", help="skip timing every forced lowering")
    ap.add_argument("--no-fixture", action="store_true", help="skip the end-to-end fixture")
    ap.add_argument("--no-cache", action="store_true", help="re-export with dynamo (default: cached in "
                    "$ONNXPOOLFIX_BENCH_CACHE or the temp dir)")
    ap.add_argument("--out", help="markdown file to write (default benchmarks/RESULTS.md for a full run)")
    ap.add_argument("--no-calibrate", action="store_true", help="judge only the built-in costs' choices (default: "
                    "also those of the costs `onnxpoolfix calibrate` measures at the start)")
    args = ap.parse_args(argv)
    cases_all = all_cases()
    if args.cases == "list":
        for c in cases_all:
            print(f"{c.name:18s} {c.desc}")
        return 0
    cases = cases_all
    if args.cases:
        want = args.cases.split(",")
        unknown = [w for w in want if w not in {c.name for c in cases_all}]
        if unknown:
            ap.error(f"unknown case(s): {', '.join(unknown)} (try --cases list)")
        cases = [c for c in cases_all if c.name in want]
    rounds = args.rounds or (3 if args.quick else 15)
    batch_s = 0.005 if args.quick else 0.02
    budget_s = 5.0 if args.quick else 30.0
    rows = []
    t_start = time.perf_counter()
    costs, constants = None, None
    if not args.no_calibrate and not args.no_lowerings:
        costs = str(Path(tempfile.mkdtemp(prefix="onnxpoolfix-bench-")) / "costs.json")
        constants = calibrate(Path(costs))
        print("calibrated: " + ", ".join(f"{k} {v:.3g} ({v / calibration.BUILT_IN[k]:.2f}x built-in)"
                                         for k, v in constants.items()), flush=True)
    for c in cases:
        t0 = time.perf_counter()
        row = run_case(c, rounds=rounds, batch_s=batch_s, budget_s=budget_s, lowerings=not args.no_lowerings,
                       no_cache=args.no_cache, costs=costs)
        rows.append(row)
        lw = ", ".join(f"{n} {us(v)}" for n, v in sorted(row["lowerings"].items(), key=lambda kv: kv[1]))
        print(f"[{c.name}] {c.desc}: chose {row['chosen']}; ours {us(row['t']['ours'])}, "
              f"dynamo {us(row['t'].get('dynamo'))}, torch {us(row['t']['torch'])}, floor {us(row['t']['floor'])}"
              f"{' (' + row['dynamo_why'] + ')' if row['dynamo_why'] else ''}; lowerings: {lw or '-'}; {row['rounds']} rounds (+{row['busy_rounds']} busy), "
              f"{time.perf_counter() - t0:.0f}s", flush=True)
    fixture = None
    if not args.no_fixture and not args.cases:
        fixture = run_fixture(rounds=rounds, batch_s=batch_s, budget_s=budget_s / 2)
        print(f"[small_convnet] ours {us(fixture['t']['ours'])}, dynamo {us(fixture['t'].get('dynamo'))}, "
              f"torch {us(fixture['t']['torch'])}")
    print()
    print_table(rows)
    print(f"\n{time.perf_counter() - t_start:.0f}s in all")
    out = args.out or (None if (args.quick or args.cases) else str(ROOT / "benchmarks" / "RESULTS.md"))
    if out:
        text = markdown(rows, fixture, list(argv if argv is not None else sys.argv[1:]), constants)
        Path(out).write_text(text + sections_owned_elsewhere(Path(out)))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""What the default target's NaN/inf guard on MatMul averages costs in onnxruntime (issue 33).

    python benchmarks/guard_speed.py [--rounds 15] [--cases avg_9to7,...] [--results]

Per average case of cases.py and each dynamic-H/W average case of cases_dynamic.py (run at a size it was not
traced at): the FALLTHROUGH export patched with the default target, whose MatMul averages sit behind an If
("is the pooled output finite?": its then-branch, or under symbolic sizes a Where after it, hands the MatMul's
result on, its else-branch recomputes with NaN/inf kept in their windows), against the same file with each guard replaced by the plain result
(what the default target wrote before the guard), and beside the portable target's weight-free averages.
Timed interleaved with runners.time_interleaved beside the read-once floor (busy rounds discarded); each
ratio is the median of per-round ratios. Only cases whose default lowering carries a guard are listed.
``--results`` writes the table into benchmarks/RESULTS.md as the section under HEADING.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from floor import floor_model  # noqa: E402
from portable_speed import lowerings, static_cases, symbolic_cases, us  # noqa: E402
from results_md import table_args, write_table  # noqa: E402
from runners import THREADS, export_fallthrough, med, ort_runner, ratio, time_interleaved  # noqa: E402

import onnxpoolfix  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## The default target's NaN/inf guard on MatMul averages (guard_speed.py)"


def without_guards(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` with every guard (an If, and the Where after it picking the plain result where finite) replaced
    by an Identity of the plain result, and the nodes only the guard read dropped; None when it has no guard."""
    out = onnx.ModelProto.FromString(model.SerializeToString())
    g = out.graph
    guards = [n for n in g.node if n.op_type == "If"
              and any(a.g.name.rsplit("/", 1)[-1].startswith("finite_pooled") for a in n.attribute)]
    if not guards:
        return None
    picks = {n.input[2]: n for n in g.node if n.op_type == "Where" and len(n.input) == 3}
    for n in guards:
        if n.output[0] in picks:  # symbolic sizes: the Where after the If picks the plain result (its input 1)
            where = picks[n.output[0]]
            where.op_type, where.input[:] = "Identity", [where.input[1]]
            continue
        then = next(a.g for a in n.attribute if a.name == "then_branch")
        (only,) = then.node  # static: the If's finite branch hands the plain result on
        n.op_type, n.input[:] = "Identity", [only.input[0]]
        del n.attribute[:]
    live, keep = {o.name for o in g.output}, []
    for n in reversed(g.node):  # nodes are in topological order: walk back from the outputs
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(n.input)
    del g.node[:]
    g.node.extend(reversed(keep))
    used = {i for n in g.node for i in n.input}
    kept_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    return out


def run(case, rounds: int) -> dict | None:
    torch.manual_seed(0)
    module = case.make().eval()
    base = export_fallthrough(module, torch.randn(*case.shape), case.dynamic_axes)
    x = torch.randn(*(case.run_shape or case.shape)).numpy()
    default = onnxpoolfix.patch(base, check=False)
    plain = without_guards(default.model)
    if plain is None:
        return None
    port = onnxpoolfix.patch(base, check=False, target="portable")
    cands = {"guarded": ort_runner(default.model, x), "plain": ort_runner(plain, x),
             "portable": ort_runner(port.model, x), "floor": ort_runner(floor_model(tuple(x.shape)), x)}
    vals, kept, _ = time_interleaved(cands, rounds, 0.02, 30.0)
    return dict(case=case.name, desc=case.desc, lowering=lowerings(default), portable=lowerings(port),
                t_plain=med(vals["plain"]), t_guarded=med(vals["guarded"]), t_portable=med(vals["portable"]),
                guard=ratio(vals, "guarded", "plain"), port=ratio(vals, "portable", "guarded"), rounds=kept)


def main():
    args = table_args(__doc__, "comma-separated case names (default: every average case)")
    lines = ["| case | default: lowering | without guard | with guard | guarded/plain | portable: lowering | "
             "portable | portable/guarded |", "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for case in static_cases(args.cases) + symbolic_cases(args.cases):
        if case.name.startswith(("max", "dyn_max")):
            continue
        r = run(case, args.rounds)
        if r is None:
            continue
        lines.append(f"| {r['case']} {r['desc']} | {r['lowering']} | {us(r['t_plain'])} | {us(r['t_guarded'])} | "
                     f"{r['guard']:.2f}x | {r['portable']} | {us(r['t_portable'])} | {r['port']:.2f}x |")
        print(lines[-1], flush=True)
    if args.results:
        intro = (f"`python benchmarks/guard_speed.py --rounds {args.rounds}` on {time.strftime('%Y-%m-%d')}, "
                 f"onnxruntime, {THREADS} threads, fp32, interleaved, on a machine shared with other jobs. "
                 "\"without guard\" is the same patched file with each guard replaced by the plain result: "
                 "what the default target wrote before the guard existed. The guard's finite path adds one "
                 "ReduceSum over the pooled output and an If (and under symbolic sizes a Where).")
        write_table(RESULTS, HEADING, intro, lines)


if __name__ == "__main__":
    main()

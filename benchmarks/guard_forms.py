#!/usr/bin/env python
"""The default target's average guard under symbolic sizes: the If handing out a one-element zero and a Where
after it picking the pooled tensor (what OpenVINO computes right) against the If whose finite branch passes the
pooled tensor through (before: garbage on OpenVINO's first run), in onnxruntime.

    python benchmarks/guard_forms.py [ROUNDS] [case,case,...]

Per dynamic-H/W average case of cases_dynamic.py (run at a size it was not traced at): the FALLTHROUGH export
patched with the default target, the same file rewritten to the old form, and without the guard, timed
interleaved with runners.time_interleaved; outputs asserted equal. Static files keep the old form.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from guard_speed import without_guards  # noqa: E402
from onnx import helper  # noqa: E402
from portable_speed import symbolic_cases, us  # noqa: E402
from runners import export_fallthrough, med, ort_runner, ratio, time_interleaved  # noqa: E402

import onnxpoolfix  # noqa: E402


def old_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each guard written as before: the If's finite branch an Identity of the pooled tensor."""
    out = onnx.ModelProto.FromString(model.SerializeToString())
    g = out.graph
    picks = {n.input[2]: n for n in g.node if n.op_type == "Where" and len(n.input) == 3}
    drop = []
    for n in g.node:
        if n.op_type == "If" and any(a.g.name.rsplit("/", 1)[-1].startswith("finite_pooled") for a in n.attribute):
            where = picks.get(n.output[0])
            if where is None:
                continue
            then = next(a.g for a in n.attribute if a.name == "then_branch")
            del then.node[:]
            then.node.extend([helper.make_node("Identity", [where.input[1]], [then.output[0].name])])
            n.output[0] = where.output[0]
            drop.append(where)
    for w in drop:
        g.node.remove(w)
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    print("| case | without guard | If hands y on (before) | If + Where (now) | now/before | now/without |")
    print("|---|---|---|---|---|---|")
    for case in symbolic_cases(names):
        if case.name.startswith("dyn_max"):
            continue
        torch.manual_seed(0)
        module = case.make().eval()
        base = export_fallthrough(module, torch.randn(*case.shape), case.dynamic_axes)
        x = torch.randn(*(case.run_shape or case.shape)).numpy()
        new = onnxpoolfix.patch(base, check=False).model
        plain = without_guards(new)
        if plain is None:
            continue
        old = old_form(new)
        for u, v in zip(ort_runner(old, x)(), ort_runner(new, x)()):
            assert np.array_equal(u, v)
        runs = {"old": ort_runner(old, x), "new": ort_runner(new, x), "plain": ort_runner(plain, x)}
        vals, _, _ = time_interleaved(runs, rounds, 0.02, 30.0, floor_key="plain")
        print(f"| {case.name} {case.desc} | {us(med(vals['plain']))} | {us(med(vals['old']))} | "
              f"{us(med(vals['new']))} | {ratio(vals, 'new', 'old'):.2f}x | {ratio(vals, 'new', 'plain'):.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Files the dynamo exporter already wrote, before and after ``onnxpoolfix IN OUT``: node count, GatherND
count, onnxruntime latency at the traced size, and the max error against torch at other sizes.

    python benchmarks/dynamo_posthoc.py [--rounds 30] [--results]

``--results`` (what ``make bench`` runs) also writes the table into benchmarks/RESULTS.md, as the section
under HEADING (replaced where it is there; every other section kept byte for byte).

Cases: a torchvision-style AlexNet (AdaptiveAvgPool2d((6, 6)), 64 channels after features) exported static
at 1x3x256x256 and with symbolic H/W traced at 256; a PSP pyramid of F.interpolate(mode="area") (bins
1, 2, 3, 6 of a 1x256xHxW map) static and symbolic, traced at 1x3x64x64. Latency: median over rounds of the
median of 20 calls, 2 threads, unpatched and patched interleaved. Errors: "crash" where onnxruntime fails.
"""
from __future__ import annotations

import logging
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from results_md import table_args, write_table
from torch import nn

import onnxpoolfix

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Dynamo exports repaired after the fact (dynamo_posthoc.py)"


class AlexNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Linear(64 * 36, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AreaPyramid(nn.Module):
    def __init__(self):
        super().__init__()
        self.reduce = nn.Conv2d(3, 256, 1)

    def forward(self, x):
        y = self.reduce(x)
        h, w = y.shape[-2:]
        return torch.cat([y] + [F.interpolate(F.interpolate(y, size=(b, b), mode="area"), size=(h, w),
                                              mode="bilinear") for b in (1, 2, 3, 6)], 1)


def export(module, hw, symbolic):
    dims = {"x": {2: torch.export.Dim("H", min=2, max=2048), 3: torch.export.Dim("W", min=2, max=2048)}} \
        if symbolic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        program = torch.onnx.export(module, (torch.randn(1, 3, *hw),), dynamo=True, dynamic_shapes=dims,
                                    input_names=["x"])
        logging.disable(logging.NOTSET)
    return onnx.load_from_string(program.model_proto.SerializeToString())


def session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def error(sess, module, x):
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    try:
        (got,) = sess.run(None, {"x": x})
    except Exception:  # noqa: BLE001
        return "crash"
    return "shape" if got.shape != want.shape else f"{float(np.max(np.abs(got - want))):.1e}"


def main():
    args = table_args(__doc__, None, rounds=30)
    lines = []
    torch.manual_seed(0)
    cases = [("AlexNet-like", AlexNetLike().eval(), (256, 256), [(224, 224), (512, 384), (300, 200)]),
             ("area pyramid", AreaPyramid().eval(), (64, 64), [(60, 60), (96, 80), (33, 47)])]
    lines.append("| case | export | nodes | GatherND | latency at traced size | max error vs torch off the traced "
                 "size (before -> after) |")
    lines.append("|---|---|---|---|---|---|")
    print("\n".join(lines), flush=True)
    for name, module, hw, others in cases:
        for symbolic in (False, True):
            model = export(module, hw, symbolic)
            patched = onnxpoolfix.patch(model, input_shapes={"x": [1, 3, *hw]} if symbolic else None).model
            a, b = session(model), session(patched)
            x = np.random.default_rng(0).standard_normal((1, 3, *hw)).astype(np.float32)
            times = {id(a): [], id(b): []}
            for r in range(args.rounds):
                for s in ((a, b) if r % 2 else (b, a)):
                    calls = []
                    for _ in range(20):
                        t = time.perf_counter()
                        s.run(None, {"x": x})
                        calls.append(time.perf_counter() - t)
                    times[id(s)].append(statistics.median(calls))
            ta, tb = (statistics.median(times[id(s)]) * 1e6 for s in (a, b))
            errs = "n/a (static)"
            if symbolic:
                errs = "; ".join(f"{h}x{w}: {error(a, module, xx)} -> {error(b, module, xx)}" for h, w in others
                                 for xx in [np.random.default_rng(1).standard_normal((1, 3, h, w)).astype(np.float32)])
            gnd = [sum(n.op_type == "GatherND" for n in m.graph.node) for m in (model, patched)]
            lines.append(f"| {name} | {'symbolic' if symbolic else 'static'} {hw[0]}x{hw[1]} | "
                         f"{len(model.graph.node)} -> {len(patched.graph.node)} | {gnd[0]} -> {gnd[1]} | "
                         f"{ta:.0f} us -> {tb:.0f} us | {errs} |")
            print(lines[-1], flush=True)
    if args.results:
        intro = (f"`python benchmarks/dynamo_posthoc.py --rounds {args.rounds}` on {time.strftime('%Y-%m-%d')}: "
                 "real `torch.onnx.export(..., dynamo=True)` files before and after `onnxpoolfix IN OUT` (symbolic "
                 "ones bound to the traced size for the proof). Latency: median over rounds of the median of 20 "
                 "calls, 2 threads; \"crash\": onnxruntime fails on the export at that size.")
        write_table(RESULTS, HEADING, intro, lines)


if __name__ == "__main__":
    main()

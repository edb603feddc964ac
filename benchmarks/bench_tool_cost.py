"""What the tool itself costs on a big model: wall time and peak memory of `onnxpoolfix IN OUT --no-check`
against the floor any ONNX tool pays (onnx.load + onnx.save of the same model), each in its own process.

    python benchmarks/bench_tool_cost.py [--rounds 3] [--width 1.0] [--keep] [--no-results]

The model is generated here (not committed): a VGG16-class network (13 convs, 3 FC layers, 138 M float32
parameters, ~553 MB at --width 1) for a 300x300 input, whose 9x9 feature map is pooled to 7x7 by a leftover
``adaptive_avg_pool2d`` node encoded exactly as torch 2.13's FALLTHROUGH export writes it (the Constant and
the node are copied from fixtures/small_convnet.onnx). Weights are random (incompressible).

Measured, interleaved over --rounds rounds (medians; the machine is shared):

1. inline weights: (a) ``python -c 'onnx.save(onnx.load(IN), OUT)'`` vs (b) ``onnxpoolfix IN OUT --no-check``.
   Targets: (b)/(a) <= 1.2 in time and <= 1.1 in peak RSS.
2. external weights (--width 0.3, ~50 MB, vs --width 1, ~553 MB): ``onnxpoolfix IN OUT --no-check`` with OUT
   next to IN (the data file is shared, not copied) and in another folder (the data file is copied beside
   OUT, in the kernel); the patch itself must not grow with the weights.

Peak RSS is the child's ru_maxrss (each measured process is the only child of a small launcher). Results
are appended to benchmarks/RESULTS.md under "Tool cost" (other sections of that file are left alone).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from results_md import write_section

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "small_convnet.onnx"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HEADING = "## Tool cost: onnxpoolfix vs onnx.load + onnx.save (bench_tool_cost.py)"
VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]

# runs one command as its only child; prints wall seconds and the child's peak RSS (MiB)
LAUNCHER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t
if p.returncode:
    sys.exit(f"exit {p.returncode}: {p.stderr[-2000:]}")
print(json.dumps({"wall_s": wall, "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""
BASELINE = "import sys, onnx; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"


def leftover_nodes(x: str, y: str) -> list[onnx.NodeProto]:
    """The Constant + adaptive_avg_pool2d pair of the fixture, renamed onto x -> y, size (7, 7)."""
    fixture = onnx.load(FIXTURE)
    pool = next(n for n in fixture.graph.node if n.op_type == "adaptive_avg_pool2d")
    const = next(n for n in fixture.graph.node if pool.input[1] in n.output)
    const, pool = onnx.NodeProto.FromString(const.SerializeToString()), onnx.NodeProto.FromString(pool.SerializeToString())
    assert numpy_helper.to_array(const.attribute[0].t).tolist() == [7, 7], "fixture changed"
    pool.input[0], pool.output[0] = x, y
    return [const, pool]


def make_vgg(width: float = 1.0, seed: int = 0) -> onnx.ModelProto:
    """VGG16 at a 300x300 input; ``width`` scales every channel count and the FC widths (params ~ width^2)."""
    rng = np.random.default_rng(seed)
    nodes, graph = [], helper.make_graph([], "vgg16_leftover",
                                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 300, 300])],
                                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1000])])

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        arr = rng.standard_normal(shape, dtype=np.float32)
        arr *= np.float32((2.0 / fan_in) ** 0.5)
        graph.initializer.add().CopyFrom(numpy_helper.from_array(arr, name))
        return name

    cur, c_in, i = "x", 3, 0
    for v in VGG16:
        i += 1
        if v == "M":
            nodes.append(helper.make_node("MaxPool", [cur], [f"pool{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            cur = f"pool{i}"
            continue
        c = max(8, int(v * width))
        w, b = weight(f"features.{i}.weight", (c, c_in, 3, 3), c_in * 9), weight(f"features.{i}.bias", (c,), c)
        nodes.append(helper.make_node("Conv", [cur, w, b], [f"conv{i}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]))
        cur, c_in = f"relu{i}", c
    nodes += leftover_nodes(cur, "pooled")  # 9x9 -> 7x7: non-uniform windows, no AveragePool is exact
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"]))
    hidden = max(16, int(4096 * width))
    dims = [c_in * 49, hidden, hidden, 1000]
    cur = "flat"
    for j in range(3):
        w = weight(f"classifier.{j}.weight", (dims[j + 1], dims[j]), dims[j])
        b = weight(f"classifier.{j}.bias", (dims[j + 1],), dims[j])
        out = "y" if j == 2 else f"fc{j}"
        nodes.append(helper.make_node("Gemm", [cur, w, b], [out], transB=1))
        if j < 2:
            nodes.append(helper.make_node("Relu", [out], [f"fcrelu{j}"]))
            out = f"fcrelu{j}"
        cur = out
    graph.node.extend(nodes)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)],
                              producer_name="bench_tool_cost")
    model.ir_version = 8
    return model


def weights_mb(model: onnx.ModelProto) -> float:
    return sum(np.prod(t.dims) * 4 for t in model.graph.initializer) / 1e6


def measure(cmd: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "onnxpoolfix", *map(str, args)]


def run_rounds(cases: dict[str, list[str]], rounds: int, cleanup) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {k: [] for k in cases}
    for r in range(rounds):
        for name, cmd in (cases.items() if r % 2 == 0 else reversed(list(cases.items()))):
            out[name].append(measure(cmd))
            cleanup()
            time.sleep(0.5)  # let the page-cache writeback of the last output settle a little
    return out


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--width", type=float, default=1.0, help="model width for the inline case (1.0: ~553 MB)")
    ap.add_argument("--small-width", type=float, default=0.3, help="width of the small external case (~50 MB)")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary folder, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--no-results", action="store_true", help="do not append to benchmarks/RESULTS.md")
    args = ap.parse_args()

    scratch = Path(args.dir or tempfile.mkdtemp(prefix="onnxpoolfix-toolcost-"))
    scratch.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    try:
        # ---------------------------------------------------------------- 1. inline weights
        t0 = time.perf_counter()
        model = make_vgg(args.width)
        mb = weights_mb(model)
        inline = scratch / "vgg_inline.onnx"
        onnx.save(model, inline)
        del model
        print(f"generated {inline.name}: {mb:.0f} MB of weights, file {inline.stat().st_size / 1e6:.0f} MB "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        outs = scratch / "outs"
        outs.mkdir()

        def clean_outs() -> None:
            for p in outs.iterdir():
                p.unlink()

        cases = {
            "onnx.load + onnx.save": [sys.executable, "-c", BASELINE, str(inline), str(outs / "a.onnx")],
            "onnxpoolfix --no-check": cli(inline, outs / "b.onnx", "--no-check", "-q"),
        }
        res = run_rounds(cases, args.rounds, clean_outs)
        a, b = res["onnx.load + onnx.save"], res["onnxpoolfix --no-check"]
        t_ratio = statistics.median(y["wall_s"] / x["wall_s"] for x, y in zip(a, b))
        m_ratio = statistics.median(y["peak_mib"] / x["peak_mib"] for x, y in zip(a, b))
        lines += [
            f"Inline weights: VGG16-class model, {mb:.0f} MB of float32 weights in the .onnx file, one leftover "
            f"adaptive_avg_pool2d (9x9 -> 7x7); {args.rounds} interleaved rounds, medians, each run its own process.",
            "",
            "| run | wall s | peak RSS MiB |",
            "|---|---|---|",
        ]
        for name, runs in res.items():
            lines.append(f"| {name} | {med(runs, 'wall_s'):.2f} | {med(runs, 'peak_mib'):.0f} |")
        ok_t, ok_m = t_ratio <= 1.2, m_ratio <= 1.1
        lines += ["", f"Ratio onnxpoolfix / (load + save): time **{t_ratio:.2f}x** (target <= 1.2: "
                      f"{'met' if ok_t else 'MISSED'}), peak memory **{m_ratio:.2f}x** (target <= 1.1: "
                      f"{'met' if ok_m else 'MISSED'}).", ""]
        inline.unlink()

        # ---------------------------------------------------------------- 2. external weights
        ext_rows = []
        for width in (args.small_width, args.width):
            d = scratch / f"ext_{width}"
            (d / "in").mkdir(parents=True)
            (d / "other").mkdir()
            model = make_vgg(width)
            emb = weights_mb(model)
            src = d / "in" / "model.onnx"
            onnx.save(model, src, save_as_external_data=True, location="model.onnx.data")
            del model

            def clean_ext(d=d) -> None:
                for p in list((d / "other").iterdir()) + [p for p in (d / "in").iterdir() if p.name.startswith("out")]:
                    p.unlink()

            cases = {
                "OUT next to IN (data shared)": cli(src, d / "in" / "out.onnx", "--no-check", "-q"),
                "OUT in another folder (data copied)": cli(src, d / "other" / "out.onnx", "--no-check", "-q"),
            }
            res = run_rounds(cases, args.rounds, clean_ext)
            for name, runs in res.items():
                ext_rows.append((emb, name, med(runs, "wall_s"), med(runs, "peak_mib")))
            shutil.rmtree(d)
        lines += [
            "External weights (the .onnx holds the graph only): `onnxpoolfix IN OUT --no-check`, the same "
            "graph at two widths.",
            "",
            "| weights MB | OUT | wall s | peak RSS MiB |",
            "|---|---|---|---|",
        ]
        lines += [f"| {emb:.0f} | {name} | {w:.2f} | {m:.0f} |" for emb, name, w, m in ext_rows]
        small = {n: (w, m) for e, n, w, m in ext_rows if e == ext_rows[0][0]}
        big = {n: (w, m) for e, n, w, m in ext_rows if e == ext_rows[-1][0]}
        shared = "OUT next to IN (data shared)"
        lines += ["", f"With the data shared, {ext_rows[-1][0] / ext_rows[0][0]:.0f}x the weights cost "
                      f"{big[shared][0] / small[shared][0]:.2f}x the time and {big[shared][1] / small[shared][1]:.2f}x "
                      "the memory: the weights are never read. In another folder the only added cost is the "
                      "in-kernel copy (and fsync) of the data file, which OUT must own to be self-contained.", ""]
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    stamp = f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs (shared), python {platform.python_version()}, onnx {onnx.__version__}"
    section = "\n".join([HEADING, "", f"_{stamp}; `python benchmarks/bench_tool_cost.py`_", "", *lines]).rstrip() + "\n"
    print("\n" + section)
    if not args.no_results:
        write_section(RESULTS, HEADING, section)


if __name__ == "__main__":
    main()

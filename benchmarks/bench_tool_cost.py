"""What the tool itself costs on real networks: wall time and peak memory of `onnxpoolfix IN OUT` (check on and
`--no-check`) against the floor any ONNX tool pays, `onnx.load` + `onnx.save` of the same file, each in its own
process, interleaved.

    python benchmarks/bench_tool_cost.py [--rounds 3] [--only NAME ...] [--no-external] [--keep] [--no-results]

1. Real exports, made here at bench time (random weights, nothing downloaded): torchvision's AlexNet (300x300)
   and VGG11-BN (260x260), segmentation-models-pytorch's PSPNet (300x300) and UPerNet (320x320) with a
   ResNet-18 encoder, as benchmarks/networks.py writes them out; each through the TorchScript exporter
   (ONNX_FALLTHROUGH, opset 17) and the dynamo exporter, static, and AlexNet and PSPNet also with symbolic
   H/W. Targets (issue 35): check on within 1.3x the time and 1.2x the peak memory of load + save,
   `--no-check` within 1.1x the time. Beside them, the floor of any check that runs onnxruntime in-process:
   load + one onnxruntime session on the whole patched file + save (nothing found, proven or rewritten).
2. Over 2 GB (a generated VGG16-class network at --external-width, its weights in external data, one leftover
   adaptive_avg_pool2d encoded as torch 2.13's FALLTHROUGH export writes it): `onnxpoolfix IN OUT` with OUT
   next to IN (the data file is shared) and in another folder (copied in the kernel), against `onnx.load` +
   `onnx.save(..., save_as_external_data=True)`.

Each measured command is the only child of a small launcher that reports its wall time and peak RSS
(ru_maxrss). Ratios are medians of per-round ratios (each round runs the commands of one file back to back,
in alternating order). Results replace the "Tool cost" section of benchmarks/RESULTS.md.
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
# the least an in-process onnxruntime check can cost: load, one session on the whole patched file (arena off, as
# the check's are), save; nothing found, proven or rewritten
ONE_SESSION = ("import sys, onnx, onnxruntime as ort; m = onnx.load(sys.argv[1]); so = ort.SessionOptions(); "
               "so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False; "
               "ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider']); "
               "onnx.save(m, sys.argv[2])")
BASELINE_EXTERNAL = ("import sys, onnx; onnx.save(onnx.load(sys.argv[1]), sys.argv[2], save_as_external_data=True, "
                     "location='out.onnx.data')")


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


def export_networks(folder: Path, only: list[str] | None) -> list[tuple[str, Path, list[str]]]:
    """(label, file, the flags a user passes) of every export of section 1, made into ``folder``: a dynamo file
    with symbolic H/W gets the export's size as --traced-shape, as the refusal without it says."""
    import torch
    from networks import NETWORKS

    made = []
    for name, (ctor, shape) in NETWORKS.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        module, x = ctor().eval(), torch.randn(shape)
        routes = [("TorchScript", False, None), ("dynamo", True, None)]
        if name in ("alexnet", "pspnet_resnet18"):
            h, w = torch.export.Dim("h", min=200, max=640), torch.export.Dim("w", min=200, max=640)
            routes += [("TorchScript, symbolic H/W", False, {"x": {2: "h", 3: "w"}}),
                       ("dynamo, symbolic H/W", True, ({2: h, 3: w},))]
        for route, dynamo, dynamic in routes:
            path = folder / f"{name}_{len(made)}.onnx"
            t = time.perf_counter()
            if dynamo:
                torch.onnx.export(module, (x,), str(path), dynamo=True, external_data=False, dynamic_shapes=dynamic)
            else:
                torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"],
                                  dynamic_axes=dynamic,
                                  operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
            label = f"{name}, {route}"
            print(f"exported {label}: {path.stat().st_size / 1e6:.0f} MB ({time.perf_counter() - t:.0f} s)",
                  flush=True)
            first = onnx.load(str(path), load_external_data=False).graph.input[0].name  # (Sequential: "input")
            traced = ["--traced-shape", f"{first}:" + ",".join(map(str, shape))] if dynamo and dynamic else []
            made.append((label, path, traced))
    return made


def ratios(res: dict[str, list[dict]], base: str, other: str, key: str) -> float:
    return statistics.median(y[key] / x[key] for x, y in zip(res[base], res[other]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="networks of section 1 (default: all four)")
    ap.add_argument("--external-width", type=float, default=2.0,
                    help="width of section 2's generated network (2.0: about 2.2 GB of weights)")
    ap.add_argument("--no-external", action="store_true", help="skip section 2")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary folder, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--no-results", action="store_true", help="do not write benchmarks/RESULTS.md")
    args = ap.parse_args()

    scratch = Path(args.dir or tempfile.mkdtemp(prefix="onnxpoolfix-toolcost-"))
    scratch.mkdir(parents=True, exist_ok=True)
    outs = scratch / "outs"
    outs.mkdir(exist_ok=True)

    def clean_outs() -> None:
        for p in outs.iterdir():
            p.unlink()

    lines: list[str] = []
    try:
        rows, failed = [], []
        for label, path, flags in export_networks(scratch, args.only):
            patched = scratch / "patched.onnx"  # what the one-session floor opens (IN itself may not load)
            subprocess.run(cli(path, patched, "--no-check", "-q", *flags), check=True)
            cases = {
                "load + save": [sys.executable, "-c", BASELINE, str(path), str(outs / "a.onnx")],
                "check": cli(path, outs / "b.onnx", "-q", *flags),
                "no check": cli(path, outs / "c.onnx", "--no-check", "-q", *flags),
                "one session": [sys.executable, "-c", ONE_SESSION, str(patched), str(outs / "d.onnx")],
            }
            try:
                res = run_rounds(cases, args.rounds, clean_outs)
            except SystemExit as e:  # one file failing is a result too, and the others still run
                print(f"{label}: {e}", flush=True)
                failed.append(f"{label}: {' '.join(str(e).split())[:300]}")
                path.unlink()
                continue
            rows.append((label, path.stat().st_size / 1e6, med(res["load + save"], "wall_s"),
                         med(res["load + save"], "peak_mib"), med(res["check"], "wall_s"),
                         ratios(res, "load + save", "check", "wall_s"), ratios(res, "load + save", "check", "peak_mib"),
                         ratios(res, "load + save", "no check", "wall_s"),
                         ratios(res, "load + save", "no check", "peak_mib"),
                         ratios(res, "load + save", "one session", "wall_s"),
                         ratios(res, "load + save", "one session", "peak_mib")))
            print("  ".join(f"{c:.2f}" if isinstance(c, float) else str(c) for c in rows[-1]), flush=True)
            path.unlink()
            patched.unlink()
        lines += [
            f"Real networks (random weights), {args.rounds} interleaved rounds, medians of per-round ratios "
            "to `onnx.load` + `onnx.save` of the same file. Targets: check on <= 1.3x time and <= 1.2x memory, "
            "`--no-check` <= 1.1x time. Floor: load + one onnxruntime session on the whole patched file + save, "
            "the least any check that runs onnxruntime in-process costs.",
            "",
            "| file | MB | load + save | its peak | onnxpoolfix | time | memory | `--no-check` time | "
            "`--no-check` memory | floor: time | floor: memory |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [f"| {label} | {mb:.0f} | {t0:.2f} s | {m0:.0f} MiB | {t1:.2f} s | {rt:.2f}x | {rm:.2f}x | "
                  f"{nt:.2f}x | {nm:.2f}x | {ft:.2f}x | {fm:.2f}x |"
                  for label, mb, t0, m0, t1, rt, rm, nt, nm, ft, fm in rows]
        lines += [f"- FAILED {f}" for f in failed] + [""]

        if not args.no_external:
            d = scratch / "external"
            (d / "in").mkdir(parents=True)
            (d / "other").mkdir()
            model = make_vgg(args.external_width)
            gb = weights_mb(model) / 1e3
            src = d / "in" / "model.onnx"
            onnx.save(model, src, save_as_external_data=True, location="model.onnx.data")
            del model
            print(f"generated the external-data model: {gb:.2f} GB of weights", flush=True)

            def clean_ext() -> None:
                for p in list((d / "other").iterdir()) + [p for p in (d / "in").iterdir() if p.name.startswith("out")]:
                    p.unlink()

            cases = {
                "onnx.load + onnx.save (external data)": [sys.executable, "-c", BASELINE_EXTERNAL, str(src),
                                                          str(d / "other" / "out.onnx")],
                "onnxpoolfix, OUT next to IN (data shared)": cli(src, d / "in" / "out.onnx", "-q"),
                "onnxpoolfix, OUT in another folder (data copied)": cli(src, d / "other" / "out.onnx", "-q"),
            }
            res = run_rounds(cases, args.rounds, clean_ext)
            base = "onnx.load + onnx.save (external data)"
            lines += [f"Over 2 GB: a generated VGG16-class network, {gb:.2f} GB of float32 weights in external data, "
                      "one leftover adaptive_avg_pool2d (9x9 -> 7x7), check on.", "",
                      "| run | wall s | peak RSS MiB | time | memory |", "|---|---|---|---|---|"]
            for name, runs in res.items():
                lines.append(f"| {name} | {med(runs, 'wall_s'):.2f} | {med(runs, 'peak_mib'):.0f} | "
                             f"{ratios(res, base, name, 'wall_s'):.2f}x | {ratios(res, base, name, 'peak_mib'):.2f}x |")
            lines.append("")
            shutil.rmtree(d)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    stamp = (f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs (shared), python "
             f"{platform.python_version()}, onnx {onnx.__version__}")
    section = "\n".join([HEADING, "", f"_{stamp}; `python benchmarks/bench_tool_cost.py`_", "", *lines]).rstrip() + "\n"
    print("\n" + section)
    if not args.no_results:
        write_section(RESULTS, HEADING, section)


if __name__ == "__main__":
    main()

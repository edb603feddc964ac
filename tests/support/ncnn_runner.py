"""ncnn through pnnx, the converter ncnn's users run (PyPI's `pnnx` and `ncnn`, the `runtimes` extra).

pnnx converts an ONNX file at one input shape (``inputshape=[...]f32``) into ncnn's .param/.bin, storing
weights as fp16 unless told ``fp16=0``; ncnn's Python binding runs it. ncnn's Mat has no batch axis: pnnx
drops a batch of 1, and a batch above 1 is not representable. Both run in subprocesses: pnnx and ncnn crash
(segfault) on some graphs, and a crash must fail one case, not the session."""
from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from runtime_fixtures import run_apart


class NcnnFailed(RuntimeError):
    """pnnx or ncnn refused or crashed; the message says which and its last lines."""


def pnnx_binary() -> Path | None:
    spec = importlib.util.find_spec("pnnx")  # (importing the package would import torch)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "pnnx"
    return path if path.exists() else None


_RUN = r"""
import sys
import numpy as np
import ncnn
param, weights, defaults, n_in, *rest = sys.argv[1:]
ins, outs = rest[:int(n_in)], rest[int(n_in):]
net = ncnn.Net()
net.opt.use_vulkan_compute = False
if defaults != "1":  # float32 storage and arithmetic (else ncnn's defaults: fp16 where the CPU has it)
    for o in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic"):
        setattr(net.opt, o, False)
if net.load_param(param) or net.load_model(weights):
    sys.exit("ncnn: load_param/load_model failed")
ex = net.create_extractor()
arrays = [np.ascontiguousarray(np.load(path)) for path in ins]
for i, a in enumerate(arrays):  # a copy: a Mat borrowing numpy's memory crashes an in-place first layer (ReLU)
    ex.input(f"in{i}", ncnn.Mat(a).clone())
for i, path in enumerate(outs):
    ret, mat = ex.extract(f"out{i}")
    if ret:
        sys.exit(f"ncnn: extract out{i} returned {ret}")
    np.save(path, np.array(mat))
"""


def ncnn_run(model: onnx.ModelProto, feed: dict[str, np.ndarray], *, fp16: bool = False,
             ncnn_defaults: bool = False) -> dict[str, np.ndarray]:
    """``model`` converted by pnnx at the feed's shapes (``fp16``: pnnx's default fp16 weight storage) and run
    in ncnn in float32 (``ncnn_defaults``: with ncnn's default options, fp16 storage and arithmetic where the
    CPU has them); outputs with the batch of 1 put back. Raises :class:`NcnnFailed`."""
    names = [vi.name for vi in model.graph.input]
    if any(feed[n].shape[:1] != (1,) for n in names):
        raise NcnnFailed("ncnn: a batch above 1 (ncnn's Mat has no batch axis)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.onnx"
        onnx.save(model, path)
        shapes = ",".join(f"[{','.join(map(str, feed[n].shape))}]f32" for n in names)
        rc, tail = run_apart([str(pnnx_binary()), str(path), f"inputshape={shapes}", f"fp16={int(fp16)}"], cwd=d)
        param, weights = path.with_suffix(".ncnn.param"), path.with_suffix(".ncnn.bin")
        if rc or not param.exists():
            raise NcnnFailed(f"pnnx: exit {rc}: {tail}")
        batch_in, batch_out = _batch_axes(path.with_name(f"{path.stem}_ncnn.py"))
        ins = []
        for i, n in enumerate(names):
            ins.append(str(Path(d) / f"in{i}.npy"))
            np.save(ins[-1], feed[n][0] if batch_in.get(i, True) else feed[n])
        outs = [str(Path(d) / f"out{i}.npy") for i in range(len(model.graph.output))]
        rc, tail = run_apart([sys.executable, "-c", _RUN, str(param), str(weights), str(int(ncnn_defaults)),
                              str(len(ins)), *ins, *outs])
        if rc:
            raise NcnnFailed(f"ncnn: exit {rc}: {tail} "
                             f"(layers: {sorted(_layers(param))})")
        return {o.name: np.load(p)[None] if batch_out.get(i, True) else np.load(p)
                for i, (o, p) in enumerate(zip(model.graph.output, outs))}


def _batch_axes(script: Path) -> tuple[dict[int, bool], dict[int, bool]]:
    """Which inputs and outputs pnnx dropped the batch axis of, read from the test script it writes beside
    the model (``batch_index=0``: dropped; ``233``: pnnx found no batch axis, as in a graph of only Slices,
    reductions and elementwise ops, and keeps every dim)."""
    text = script.read_text() if script.exists() else ""
    ins = {int(i): b != "233" for i, b in re.findall(r'ex\.input\("in(\d+)".*?batch_index=(\d+)', text)}
    outs = {int(i): b != "233" for i, b in re.findall(r'out(\d+)\.numpy\(batch_index=(\d+)\)', text)}
    return ins, outs


def _layers(param: Path) -> set[str]:
    lines = param.read_text().splitlines()[2:]
    return {line.split()[0] for line in lines if line.strip()}

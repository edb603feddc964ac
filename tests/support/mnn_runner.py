"""MNN (Alibaba's inference engine; PyPI's `MNN`, the `runtimes` extra): its ONNX converter, then its module
API, which takes a new input shape at each call (symbolic files run as written).

The converter is called through its extension (``_tools.mnnconvert``), not the ``mnnconvert`` console script:
that script's wrapper sends a log of every conversion to a remote server and pip-installs a logging SDK to do
so. Both steps run in subprocesses: a crash (MNN segfaults on some graphs) must fail one case, not the session."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from runtime_fixtures import run_apart

_CONVERT = r"""
import sys
import _tools
_tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", sys.argv[1], "--MNNModel", sys.argv[2],
                   "--bizCode", "onnxpoolfix"])
"""

_RUN = r"""
import sys
import numpy as np
import MNN
import MNN.expr as F
path, n_in, *rest = sys.argv[1:]
ins, outs = [p.split("=", 1) for p in rest[:int(n_in)]], [p.split("=", 1) for p in rest[int(n_in):]]
net = MNN.nn.load_module_from_file(path, [n for n, _ in ins], [n for n, _ in outs])
arrays = [np.load(f) for _, f in ins]
res = net.forward([F.const(a, list(a.shape), F.NCHW) for a in arrays])
for r, (_, f) in zip(res if isinstance(res, (list, tuple)) else [res], outs):
    np.save(f, F.convert(r, F.NCHW).read())
"""


class MnnFailed(RuntimeError):
    """MNN's converter or runtime refused or crashed; the message says which and its last lines."""


def mnn_run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``model`` converted by MNN's converter and run on ``feed``. Raises :class:`MnnFailed`."""
    with tempfile.TemporaryDirectory() as d:
        path, converted = Path(d) / "model.onnx", Path(d) / "model.mnn"
        onnx.save(model, path)
        rc, tail = run_apart([sys.executable, "-c", _CONVERT, str(path), str(converted)])
        if rc or not converted.exists() or "Converted Success" not in tail:
            raise MnnFailed(f"MNN's converter: exit {rc}: {tail}")
        ins = []
        for i, vi in enumerate(model.graph.input):
            ins.append(f"{vi.name}={Path(d) / f'in{i}.npy'}")
            np.save(ins[-1].split("=", 1)[1], feed[vi.name])
        outs = [f"{o.name}={Path(d) / f'out{i}.npy'}" for i, o in enumerate(model.graph.output)]
        rc, tail = run_apart([sys.executable, "-c", _RUN, str(converted), str(len(ins)), *ins, *outs])
        if rc:
            raise MnnFailed(f"MNN: exit {rc}: {tail}")
        return {o.name: np.load(p.split("=", 1)[1]) for o, p in zip(model.graph.output, outs)}

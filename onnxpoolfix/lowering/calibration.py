"""Cost constants measured on the machine where the planner runs (``onnxpoolfix calibrate``).

The built-in constants of :mod:`.cost` were fitted on one 2-core machine; another machine's onnxruntime
kernels have other speeds (wider vectors, more cores, other caches). :func:`measure` times a few probes in
onnxruntime, each dominated by the cost term of one constant of :data:`MEASURED`, and derives that constant
from the time (ReduceSum over 32 MB for ``BANDWIDTH``: out of cache, as the large cases; MatMul against a
[81, 49] constant for ``MAC_RATE``: 9x9 -> 7x7's Kronecker form). The others (the 3D pool rate, the
out-of-cache pool cost, the argmax passes, GEMM call and packing costs) stay as fitted. :func:`save` writes
them as a small JSON file; the planner uses such a file only where the options name it (``--costs FILE``, API
``costs=``: :class:`CostModel`, installed for one planning by :func:`in_use`), so the default stays
deterministic, and every node's ``why`` in the report then says which file's costs chose its lowering.
"""
from __future__ import annotations

import json
import math
import os
import platform
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import ArgumentError
from ..sessions import ort_session
from ..words import ref
from . import cost as C

SCHEMA = 1
MEASURED = ("NODE", "BANDWIDTH", "MAC_RATE", "POOL_RATE", "GATHER_RATE", "GATHER_BLOCK")
_RATES = ("BANDWIDTH", "MAC_RATE", "POOL_RATE", "GATHER_RATE")  # per second: a cost divides by them
BUILT_IN = {name: getattr(C, name) for name in dir(C) if name.isupper()}


def _model(nodes, x_shape, inits=()):
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _seconds(nodes, x: np.ndarray, threads: int, runs: int, inits=()) -> float:
    """``nodes`` (reading ``x``) timed: the fastest of ``runs`` batches of 5 calls, the machine's own speed (on a
    shared machine other tenants only ever slow a call down, and every probe is slowed alike only by luck)."""
    sess = ort_session(_model(nodes, list(x.shape), inits), threads=threads or None, log_level=3)
    feed = {"x": x}
    for _ in range(3):
        sess.run(None, feed)
    best = []
    for _ in range(runs):
        calls = []
        for _ in range(5):
            t = time.perf_counter()
            sess.run(None, feed)
            calls.append(time.perf_counter() - t)
        best.append(min(calls))
    return min(best)


def measure(threads: int = 0, runs: int = 9) -> dict[str, float]:
    """The constants of :data:`MEASURED`, timed in onnxruntime with ``threads`` intra-op threads (0: its
    default). Takes a few seconds."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    out: dict[str, float] = {}

    chain = [helper.make_node("Neg", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}" if i < 39 else "y"])
             for i in range(40)]
    x = rng.standard_normal(16).astype(np.float32)
    out["NODE"] = _seconds(chain, x, threads, runs) / 40
    node = out["NODE"]

    x = rng.standard_normal(8 << 20).astype(np.float32)
    t = _seconds([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], x, threads, runs)
    out["BANDWIDTH"] = x.nbytes / max(t - node, 1e-9)
    bw = out["BANDWIDTH"]

    x = rng.standard_normal((4096, 81)).astype(np.float32)
    w = numpy_helper.from_array(rng.standard_normal((81, 49)).astype(np.float32), "w")
    t = _seconds([helper.make_node("MatMul", ["x", "w"], ["y"])], x, threads, runs, [w])
    out["MAC_RATE"] = 4096 * 81 * 49 / max(t - node - 2 * x.nbytes / bw, 1e-9)

    x = rng.standard_normal((1, 256, 33, 33)).astype(np.float32)
    t = _seconds([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], strides=[4, 4])], x, threads, runs)
    out["POOL_RATE"] = 256 * 8 * 8 * 25 / max(t - node - x.nbytes / bw, 1e-9)

    x = rng.standard_normal((4096, 256)).astype(np.float32)
    rows = numpy_helper.from_array(rng.integers(0, 4096, 4096).astype(np.int64), "rows")
    t = _seconds([helper.make_node("Gather", ["x", "rows"], ["y"], axis=0)], x, threads, runs, [rows])
    out["GATHER_RATE"] = x.size / max(t - node - 4096 * C.GATHER_BLOCK, 1e-9)

    x = rng.standard_normal((4096, 64)).astype(np.float32)
    cols = numpy_helper.from_array(rng.integers(0, 64, 64).astype(np.int64), "cols")
    t = _seconds([helper.make_node("Gather", ["x", "cols"], ["y"], axis=1)], x, threads, runs, [cols])
    out["GATHER_BLOCK"] = max(t - node - x.size / out["GATHER_RATE"], 0.0) / x.size
    return out


def save(constants: dict[str, float], path: str | os.PathLike, threads: int = 0) -> None:
    import onnxruntime as ort

    data = {"schema": SCHEMA, "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "onnxruntime": ort.__version__, "threads": threads,
            "constants": {k: constants[k] for k in MEASURED if k in constants}}
    from ..io.outfile import write_text

    # as OUT is written: atomically for a file, into a FIFO or character device (never renamed over /dev/null)
    write_text(path, json.dumps(data, indent=2) + "\n", "the costs")


def load(path: str | os.PathLike) -> dict[str, float]:
    """The constants in a file :func:`save` wrote; ValueError if it is not one."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("constants"), dict):
        raise ValueError("not an onnxpoolfix costs file (schema 1)")
    found = data["constants"]
    # rates divide: above 0; times add: 0 or more; every one finite (JSON's Infinity/NaN read as floats)
    bad = [k for k, v in found.items() if k not in MEASURED or isinstance(v, bool) or not isinstance(v, (int, float))
           or not math.isfinite(v) or not (v > 0 if k in _RATES else v >= 0)]
    if bad:
        raise ValueError(f"unknown or invalid constants: {', '.join(sorted(bad))}")
    return {k: float(v) for k, v in found.items()}


@dataclass(frozen=True)
class CostModel:
    """How the planner ranks the exact lowerings of a node: the built-in constants of :mod:`.cost`, or those a
    file of ``onnxpoolfix calibrate`` holds (``--costs FILE``, API ``costs=``), and whether to time the
    candidates in onnxruntime instead (``--tune``, ``tune=True``; ``tune_threads``: the intra-op threads the
    model will run with, None: onnxruntime's default). A value of the options, never the environment's."""

    constants: tuple[tuple[str, float], ...] = ()  # () = the built-in ones
    source: str | None = None  # the file they came from
    tune: bool = False
    tune_threads: int | None = None

    @classmethod
    def of(cls, costs: str | os.PathLike | None = None, tune: bool = False,
           tune_threads: int | None = None) -> "CostModel":
        """The cost model of these arguments, checked: an ArgumentError (exit 2) for a costs file that cannot
        be read or is not one, or a thread count that is not a positive int."""
        if tune_threads is not None and (isinstance(tune_threads, bool) or not isinstance(tune_threads, int)
                                         or tune_threads < 1):
            raise ArgumentError(f"{ref('tune_threads')} takes a positive number of threads, not {tune_threads!r}",
                                "give the intra-op thread count the model will run with", argument="tune_threads",
                                value=tune_threads)
        if costs is None:
            return cls(tune=bool(tune), tune_threads=tune_threads)
        try:
            found = load(costs)
        except (OSError, ValueError) as e:
            raise ArgumentError(f"{ref('costs')} {costs}: {' '.join(str(e).split())[:200]}",
                                "give a file `onnxpoolfix calibrate` wrote", argument="costs",
                                value=str(costs)) from None
        return cls(tuple(sorted(found.items())), str(costs), bool(tune), tune_threads)

    @property
    def label(self) -> str | None:
        """What a plan's ``why`` says of its costs (None: the built-in ones)."""
        return f"costs calibrated in {self.source}" if self.source else None


BUILT_IN_COSTS = CostModel()
_active: ContextVar[CostModel] = ContextVar("cost_model", default=BUILT_IN_COSTS)


def active() -> CostModel:
    """The cost model of the planning under way (:func:`in_use`), else the built-in one."""
    return _active.get()


@contextmanager
def in_use(model: CostModel) -> Iterator[CostModel]:
    """Plan with ``model`` inside the block: its constants installed in :mod:`.cost` (the lowerings' estimates
    read them there), the built-in ones back after it."""
    token = _active.set(model)
    values = dict(BUILT_IN) | dict(model.constants)
    previous = {name: getattr(C, name) for name in values}
    for name, value in values.items():
        setattr(C, name, value)
    try:
        yield model
    finally:
        for name, value in previous.items():
            setattr(C, name, value)
        _active.reset(token)

#!/usr/bin/env python
"""The cost of the cast-free forms (review24), side by side in one process: the patched AdaptiveAvgPool2d((7, 7))
as written now (a bool mask as ``Where(mask, 1, 0)``, the largest runtime length as ``Gather(ArgMax)``) against
the same file with those nodes as they were (``Cast``, ``ReduceMax``), outputs checked equal first; onnxruntime,
2 threads, interleaved, medians of 20 calls per round, the median of 15 per-round ratios.

    python benchmarks/cast_free_forms.py       (from the project root; results: benchmarks/RESULTS.md)
"""
import copy
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxpoolfix

sys.path.insert(0, "tests/support")
from helpers import make_leftover  # noqa: E402


def as_before(m):
    m = copy.deepcopy(m)
    def fix(g):
        new = []
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH: fix(a.g)
            if n.op_type == "Where" and "zero_one" in n.name:
                new.append(helper.make_node("Cast", [n.input[0]], list(n.output), to=TensorProto.FLOAT, name=n.name)); continue
            if n.op_type == "Gather" and "largest" in n.name:
                new.append(helper.make_node("ReduceMax", [n.input[0]], list(n.output), keepdims=0, name=n.name)); continue
            new.append(n)
        del g.node[:]; g.node.extend(new)
    fix(m.graph); return m

def sess(m):
    so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])

for shape, dyn in (((1, 512, 10, 10), True), ((8, 256, 64, 64), True), ((8, 256, 64, 64), False)):
    dims = [shape[0], shape[1], "H", "W"] if dyn else list(shape)
    m = onnxpoolfix.patch(make_leftover("avg", dims, [7, 7], opset=17), check=False).model
    a, b = sess(m), sess(as_before(m))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert np.array_equal(a.run(None, {"x": x})[0], b.run(None, {"x": x})[0])
    ratios = []
    for r in range(15):
        ts = {}
        for name, s in (("now", a), ("before", b)) if r % 2 else (("before", b), ("now", a)):
            t = []
            for _ in range(20):
                t0 = time.perf_counter(); s.run(None, {"x": x}); t.append(time.perf_counter() - t0)
            ts[name] = statistics.median(t)
        ratios.append(ts["now"] / ts["before"])
    print(f"{'x'.join(map(str, shape))} {'dynamic' if dyn else 'static'}: now/before median {statistics.median(ratios):.3f} (range {min(ratios):.2f}-{max(ratios):.2f})")

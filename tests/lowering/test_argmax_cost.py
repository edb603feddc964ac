"""The argmax lowering's cost estimate (lowering/cost.py ARGMAX_PASSES, lowering/argmax.argmax_seconds)
follows its layout: no per-row ArgMax cost since the windows are reduced over a middle axis. The estimate
once said 18 ms for a 1 ms node (inspect printed it). Only the upper side is asserted: a loaded machine
makes the measurement slower, never faster. The session is the one the constants were fitted with
(benchmarks/bench.py: 2 threads, intra-op spinning off); spinning threads make this small graph ~1.6x
faster, which the estimate does not try to follow.

It times a run, so it is in the slow set: the constants were fitted on one machine, and CI's faster one
measured 0.20 ms against the 0.97 ms estimate (a 4.9x ratio, over the 4x bound). `make bench` is where
the estimate is compared with measured times."""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.inspection.model import inspect_model


@pytest.mark.slow
def test_argmax_estimate_is_not_far_above_the_measured_time():
    model = make_leftover("max", [1, 512, 10, 10], [7, 7], indices="output")
    [node] = inspect_model(model).nodes
    assert node.chosen == "argmax"  # the only lowering computing static indices
    estimate = next(c.cost_s for c in node.candidates if c.name == "argmax")
    patched = onnxpoolfix.patch(model, check=False).model
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(patched.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 512, 10, 10)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    times = []
    for _ in range(15):
        t = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - t)
    measured = float(np.median(times))
    assert estimate < 4 * measured, f"estimated {estimate * 1e3:.2f} ms, measured {measured * 1e3:.2f} ms"

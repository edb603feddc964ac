"""The dynamo front end's search is bounded by counts (tries, nodes inferred), never by seconds: the same file
gets the same verdict and the same OUT on a machine 10x slower or busier. A clock that jumps 10 s at every look
stands in for that machine: a search with a wall-clock deadline stops at once under it (the 20 s deadline this
replaced refused such a file with exit 4 on a slow machine)."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch


class Pool3(nn.Module):
    """A 19x26 map pooled to 3x3: its region is traced far down the per-axis search (the unroll probe finds it)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 1)
        self.p = nn.AdaptiveAvgPool2d(3)

    def forward(self, x):
        return self.p(self.c(x))


def test_a_slow_clock_changes_neither_the_verdict_nor_out(monkeypatch):
    torch.manual_seed(0)
    module = Pool3().eval()
    model = export_symbolic_hw(module, (19, 26))
    fast = patch(model)
    now = [time.monotonic()]

    def slow_clock():  # every look at the clock: 10 s later
        now[0] += 10.0
        return now[0]

    for name in ("monotonic", "perf_counter", "time"):
        monkeypatch.setattr(time, name, slow_clock)
    slow = patch(model)
    monkeypatch.undo()
    assert slow.model.SerializeToString() == fast.model.SerializeToString()
    assert [n.lowering for n in slow.report.nodes] == [n.lowering for n in fast.report.nodes] == ["dynamic"]
    errs = errors_vs_torch(module, slow.model, [(19, 26), (9, 13), (31, 30), (24, 40)], seed=2, relative=True)
    assert all(e < 1e-5 for e in errs.values()), errs

"""ONNXPOOLFIX_TUNE=1 (plan/tuning.py): the planner times the exact candidates in onnxruntime and takes the
fastest; the result is still checked and exact, the why says it was tuned. Off by default. No timing is
asserted (the machine is shared), only which candidates were timed and that the choice is one of them."""
from __future__ import annotations

from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.plan import tuning


def test_tuned_choice_is_exact_and_says_so(monkeypatch):
    monkeypatch.setenv(tuning.ENV, "1")
    seen = []
    measure = tuning.measure

    def spy(spec, lowerings):
        out = measure(spec, lowerings)
        seen.append(out)
        return out

    monkeypatch.setattr(tuning, "measure", spy)
    for kind, shape, size in [("avg", [2, 8, 33, 33], (8, 8)), ("max", [2, 4, 10, 10], (7, 7))]:
        result = onnxpoolfix.patch(make_leftover(kind, shape, size))  # the check runs
        (node,) = result.report.nodes
        assert result.report.check_passed and node.why.split("; ")[-1].startswith("tuned: measured")
        assert node.lowering in seen[-1] and len(seen[-1]) >= 2
        assert all(t > 0 for t in seen[-1].values())


def test_default_is_not_tuned(monkeypatch):
    monkeypatch.delenv(tuning.ENV, raising=False)
    (node,) = onnxpoolfix.patch(make_leftover("avg", [1, 8, 33, 33], (8, 8)), check=False).report.nodes
    assert "tuned" not in node.why and "est." in node.why


def test_bfloat16_nodes_keep_the_estimate(monkeypatch):
    from onnx import TensorProto

    monkeypatch.setenv(tuning.ENV, "1")
    (node,) = onnxpoolfix.patch(make_leftover("avg", [1, 8, 33, 31], (8, 8), dtype=TensorProto.BFLOAT16),
                                check=False).report.nodes
    assert "tuned" not in node.why

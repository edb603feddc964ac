"""tune=True / --tune (plan/tuning.py): the planner times the exact candidates in onnxruntime and takes the
fastest; the result is still checked and exact, the why says it was tuned. Off by default. No timing is
asserted (the machine is shared), only which candidates were timed and that the choice is one of them."""
from __future__ import annotations

from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.plan import tuning


def test_tuned_choice_is_exact_and_says_so(monkeypatch):
    seen = []
    measure = tuning.measure

    def spy(spec, lowerings, threads=None):
        out = measure(spec, lowerings, threads)
        seen.append((out, threads))
        return out

    monkeypatch.setattr(tuning, "measure", spy)
    for kind, shape, size in [("avg", [2, 8, 33, 33], (8, 8)), ("max", [2, 4, 10, 10], (7, 7))]:
        result = onnxpoolfix.patch(make_leftover(kind, shape, size), tune=True, tune_threads=1)  # the check runs
        (node,) = result.report.nodes
        assert result.report.check_passed and node.why.split("; ")[-1].startswith("tuned: measured")
        times, threads = seen[-1]
        assert node.lowering in times and len(times) >= 2 and threads == 1
        assert all(t > 0 for t in times.values())


def test_default_is_not_tuned(monkeypatch):
    monkeypatch.setenv("ONNXPOOLFIX_TUNE", "1")  # (what once turned it on: the environment no longer does)
    (node,) = onnxpoolfix.patch(make_leftover("avg", [1, 8, 33, 33], (8, 8)), check=False).report.nodes
    assert "tuned" not in node.why and "est." in node.why


def test_bfloat16_nodes_keep_the_estimate(monkeypatch):
    from onnx import TensorProto

    (node,) = onnxpoolfix.patch(make_leftover("avg", [1, 8, 33, 31], (8, 8), dtype=TensorProto.BFLOAT16),
                                check=False, tune=True).report.nodes
    assert "tuned" not in node.why


def test_tune_from_the_command_line(tmp_path):
    """--tune and --tune-threads reach the planner; a thread count below 1 is a usage error."""
    import onnx
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    src = tmp_path / "m.onnx"
    onnx.save(make_leftover("avg", [1, 8, 33, 33], (8, 8)), src)
    r = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx"), "--tune", "--tune-threads", "1"])
    assert r.exit_code == 0 and "tuned: measured" in r.stdout, r.output
    r = CliRunner().invoke(main, ["inspect", str(src), "--tune-threads", "0"])
    assert r.exit_code == 2

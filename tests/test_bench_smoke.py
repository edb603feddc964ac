"""The benchmark runs end to end on one small case and produces a complete row (not a speed test)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

# each test exports with dynamo (5-15 s, cached on disk by the bench after the first run)
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("onnxpoolfix_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_case_row_has_every_column(bench):
    # a small avg case: the dynamo exporter succeeds here (the max cases exercise the "n/a" path)
    case = bench.Case("smoke_avg", bench._avg(2, 3), (1, 8, 10, 10), "[1,8,10,10] -> 3x3")
    row = bench.run_case(case, rounds=2, batch_s=0.001, budget_s=2.0, log=lambda *a: None)
    cells = bench.table_row(row)
    assert len(cells) == len(bench.COLUMNS)
    assert all(isinstance(c, str) and c for c in cells)
    for k in ("ours", "dynamo", "torch", "floor"):
        assert row["t"][k] > 0, k
    assert row["chosen"] in row["lowerings"]  # every exact lowering was timed, the chosen one included
    assert row["fastest"] in row["lowerings"]
    assert set(bench.targets(row)) == {"vs torch", "vs dynamo", "vs floor"}
    md = bench.markdown([row], None, ["--cases", "smoke_avg"])
    assert "| smoke_avg |" in md


def test_bench_judges_the_calibrated_choice_too(bench, tmp_path):
    """With a costs file whose pooling ops are absurdly slow, the calibrated planner picks no AveragePool: the
    row names that other choice, times its model and judges it against the fastest forced lowering."""
    from onnxpoolfix.lowering import calibration

    costs = tmp_path / "costs.json"
    calibration.save({**{k: calibration.BUILT_IN[k] for k in calibration.MEASURED}, "POOL_RATE": 1e3}, costs)
    case = bench.Case("smoke_avg", bench._avg(2, 3), (1, 8, 10, 10), "[1,8,10,10] -> 3x3")
    row = bench.run_case(case, rounds=2, batch_s=0.001, budget_s=2.0, log=lambda *a: None, costs=str(costs))
    assert row["chosen"] == "pool"  # the built-in costs' choice for this case (uniform windows k4 s3)
    assert row["chosen_calibrated"] != "pool" and row["chosen_calibrated"] in row["lowerings"]
    assert row["t"]["calibrated"] > 0 and row["calibrated_vs_fastest"] > 0
    cell = bench.table_row(row)[bench.COLUMNS.index("choice (calibrated)")]
    assert cell.startswith(("ok", "MISS")) and row["chosen_calibrated"] in cell
    assert "Calibrated here: `NODE`" in bench.markdown([row], None, [], {"NODE": 1e-6})


def test_bench_max_case_reports_dynamo_na(bench):
    case = bench.Case("smoke_max", bench._max(2, 3), (1, 4, 10, 10), "max [1,4,10,10] -> 3x3")
    row = bench.run_case(case, rounds=2, batch_s=0.001, budget_s=2.0, lowerings=False, log=lambda *a: None)
    assert "dynamo" not in row["t"] and row["dynamo_why"]
    assert bench.table_row(row)[bench.COLUMNS.index("dynamo")] == "n/a"


def test_dynamo_export_bench_row():
    """benchmarks/dynamo_export.py: plain dynamo vs onnxpoolfix.export on one dynamic case, every column."""
    path = BENCH.parent / "dynamo_export.py"
    spec = importlib.util.spec_from_file_location("onnxpoolfix_dynamo_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    (case,) = [c for c in mod.CASES if c.name == "avg_dyn_7"]
    ((_, results),) = mod.run([case], rounds=1, batch=1, log=lambda *a: None)
    ours, plain = results["onnxpoolfix"], results["dynamo"]
    assert ours.nodes and plain.nodes and ours.latency_us > 0 and plain.latency_us > 0
    assert all(isinstance(e, float) and e < 1e-4 for _, e in ours.away)
    assert any(isinstance(e, str) or e > 1e-2 for _, e in plain.away)  # the frozen decomposition
    assert "| avg_dyn_7" in mod.markdown([(case, results)], [])


def test_tool_cost_bench_measures_one_real_network(tmp_path):
    """benchmarks/bench_tool_cost.py end to end on PSPNet (its four routes, one round, no results written): every
    route a row with its ratios, none failed. The networks are exported here, so this runs with the slow set."""
    import subprocess

    script = BENCH.parent / "bench_tool_cost.py"
    r = subprocess.run([sys.executable, str(script), "--only", "pspnet_resnet18", "--rounds", "1", "--no-external",
                        "--no-results", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| pspnet_resnet18, ")]
    assert len(rows) == 4 and "FAILED" not in r.stdout, r.stdout[-2000:]
    for row in rows:  # time and memory ratios of both runs, each a positive number
        ratios = [float(c.strip()[:-1]) for c in row.split("|")[6:10]]
        assert len(ratios) == 4 and all(x > 0 for x in ratios), row

"""pytest hooks and fixtures only; the helpers the tests import live in tests/support/helpers.py."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import export_cache
import pytest
import runtime_matrix
from helpers import ROUNDTRIP_COUNTS

LIVE_EXPORTS: list[str] = []  # the workers' live dynamo exports (pytest-xdist), gathered by the controller
MATRIX: list[tuple[str, str, str, str]] = []  # the workers' runtime verdicts, gathered by the controller


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """torch's generator seeded before each test's fixtures: a module built in a fixture has the same weights
    whichever test of its file a pytest-xdist worker runs first (the recorded dynamo exports are keyed by them)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: hand them to the controller
        session.config.workeroutput["live_exports"] = list(export_cache.live_exports)
        session.config.workeroutput["runtime_matrix"] = list(runtime_matrix.RECORDS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    LIVE_EXPORTS.extend(getattr(node, "workeroutput", {}).get("live_exports", []))
    MATRIX.extend(tuple(r) for r in getattr(node, "workeroutput", {}).get("runtime_matrix", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    live = LIVE_EXPORTS + export_cache.live_exports
    if live:
        terminalreporter.write_line(
            f"{len(live)} dynamo exports made live, not read from fixtures/dynamo/exports/ (it holds the fast suite's; "
            f"another torch or an edited test exports live too, and `make dynamo-exports` records them again): "
            + ", ".join(sorted(set(live))[:8])
            + (" ..." if len(set(live)) > 8 else ""))
    records = MATRIX + runtime_matrix.RECORDS
    target = os.environ.get("ONNXPOOLFIX_RUNTIME_MATRIX")  # make test-runtimes: docs/runtime-matrix.md
    if records and target:
        table = runtime_matrix.render(records)
        terminalreporter.write_line("")
        for line in table.splitlines()[4:]:
            terminalreporter.write_line(line)
        Path(target).write_text(table)
        terminalreporter.write_line(f"runtime matrix written to {target}")
    if ROUNDTRIP_COUNTS:
        c = ROUNDTRIP_COUNTS
        parts = ", ".join(f"{k}={v}" for k, v in sorted(c.items()) if k != "cases")
        terminalreporter.write_line(f"onnxpoolfix round-trip: {c['cases']} cases compared with torch ({parts})")


@pytest.fixture(scope="session")
def torch_mod():
    return pytest.importorskip("torch")


@pytest.fixture
def bare_matmuls(monkeypatch):
    """The default target's MatMul averages as their layout alone: pooling matrices written as constants
    (no indicator and lengths) and no NaN/inf guard around them, for tests of the MatMul layouts (block,
    kron, stacked) that read the matrices and op sequences. The guard and the indicator weights have their
    own tests (tests/lowering/test_avg_non_finite.py)."""
    from onnxpoolfix.graph import emit
    from onnxpoolfix.lowering import base
    from onnxpoolfix.rewrite import pyramid

    monkeypatch.setattr(emit, "_window_lengths", lambda matrix: None)
    monkeypatch.setattr(base, "guarded", lambda inner, *args: inner)
    monkeypatch.setattr(pyramid, "guarded", lambda inner, *args: inner)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test whose export torch itself refuses is skipped, not failed: torch 2.9's torch.onnx.export raises
    "Constraints violated" for a declared range its guards narrow (a branch on H == 1, H % 2), where torch
    2.13 on retries without the range. Only torch's own export error counts; every other failure stands."""
    outcome = yield
    err = outcome.excinfo[1] if outcome.excinfo else None
    if type(err).__name__ in ("TorchExportError", "UserError") and "Constraints violated" in str(err):
        import torch

        outcome.force_exception(pytest.skip.Exception(
            f"torch {torch.__version__} refuses this export itself (Constraints violated)"))

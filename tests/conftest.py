"""pytest hooks and fixtures only; the helpers the tests import live in tests/support/helpers.py."""
from __future__ import annotations

import pytest
from helpers import ROUNDTRIP_COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if ROUNDTRIP_COUNTS:
        c = ROUNDTRIP_COUNTS
        parts = ", ".join(f"{k}={v}" for k, v in sorted(c.items()) if k != "cases")
        terminalreporter.write_line(f"onnxpoolfix round-trip: {c['cases']} cases compared with torch ({parts})")


@pytest.fixture(scope="session")
def torch_mod():
    return pytest.importorskip("torch")

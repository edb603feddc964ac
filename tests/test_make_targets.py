"""`make test-all` runs what README says it runs: the > 2 GB external-data tests (which skip unless -m names
the slow marker), the other slow cases, and a long fuzz (ONNXPOOLFIX_FUZZ_CASES, default 200)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from helpers import slow_named

ROOT = Path(__file__).resolve().parent.parent


def _recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"{target}:")))
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        out.append(line.strip())
    return out


def _pytest_command(target: str) -> tuple[dict[str, str], list[str]]:
    (line,) = [ln for ln in _recipe(target) if "-m pytest" in ln]
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words[:words.index("$(PY)")])
    return env, words[words.index("pytest") + 1:]


class _Config:
    def __init__(self, markexpr):
        self.markexpr = markexpr

    def getoption(self, name, default=None):
        assert name == "markexpr"
        return self.markexpr


def test_test_all_runs_the_large_and_slow_tests():
    env, args = _pytest_command("test-all")
    markexpr = args[args.index("-m") + 1]
    assert slow_named(_Config(markexpr)), f"-m {markexpr!r}: the > 2 GB tests would skip"
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", markexpr,
                             "tests/io/test_io.py", "tests/io/test_large_models.py"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = set(re.findall(r"::(\w+)", listed.stdout))
    assert {"test_over_2gb_external_model", "test_over_2gb_external_model_patches_and_checks",
            "test_patch_memory_does_not_grow_with_real_external_weights"} <= ids  # slow
    assert "test_patch_memory_does_not_grow_with_external_weights" in ids  # and the fast ones too
    assert int(env.get("ONNXPOOLFIX_FUZZ_CASES", "0")) >= 1000, "no long fuzz in make test-all"


def test_test_is_the_fast_suite():
    env, args = _pytest_command("test")
    assert args[args.index("-m") + 1] == "not slow" and not env
    assert not slow_named(_Config(None)) and not slow_named(_Config(""))

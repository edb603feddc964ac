"""The user's torch and the project's torch: pyproject's extras accept a range (a user on torch 2.14 gets no
downgrade), while the project's own install (Makefile, CI) takes exactly the version in constraints.txt, the
one the fixtures were exported with. Both files are read here, so neither can drift from the other."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from onnxpoolfix.torch_export.exporter import TORCH_RANGE, TORCH_VERSION

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None


def _extras() -> dict[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text()
    if tomllib is not None:
        return tomllib.loads(text)["project"]["optional-dependencies"]
    out = {}
    for name in ("torch", "dynamo"):
        (line,) = re.findall(rf"^{name} = (\[.*\])$", text, re.M)
        out[name] = eval(line)  # a list of string literals
    return out


def _pinned() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt: {line!r} is not an exact pin"
            pins[req.name] = Version(spec.version)
    return pins


def test_extras_name_a_torch_range_not_one_version():
    for extra in ("torch", "dynamo"):
        (torch_req,) = [Requirement(r) for r in _extras()[extra] if Requirement(r).name == "torch"]
        spec = torch_req.specifier
        assert all(s.operator != "==" for s in spec), f"[{extra}] pins torch: {spec}"
        for v in ("2.9.0", "2.11.0", "2.13.0", "2.14.1"):
            assert spec.contains(v), f"[{extra}] torch{spec} refuses {v}"
        assert not spec.contains("2.8.0") and not spec.contains("2.15.0"), f"[{extra}] torch{spec} is open-ended"
        assert str(spec) == str(Requirement("torch" + TORCH_RANGE).specifier)  # the hint says the same range


def test_the_project_installs_exactly_the_pinned_torch_within_the_range():
    pins = _pinned()
    assert pins["torch"] == Version(TORCH_VERSION) == Version("2.13.0")
    for extra in ("torch", "dynamo"):
        (torch_req,) = [Requirement(r) for r in _extras()[extra] if Requirement(r).name == "torch"]
        assert torch_req.specifier.contains(pins["torch"])  # the pin is a point of the range, not a conflict


def test_makefile_installs_through_the_constraints_file():
    lines = (ROOT / "Makefile").read_text().splitlines()
    installs = [shlex.split(ln.strip()) for ln in lines if "pip install" in ln and "-e" in ln.split()]
    assert installs, "no editable install in the Makefile"
    for words in installs:
        assert words[words.index("-c") + 1] == "constraints.txt", words
    stamp = next(ln for ln in lines if ln.startswith("$(STAMP):"))
    assert "constraints.txt" in stamp.split(), "a new pin would not reinstall the venv"
    assert "make test" in (ROOT / ".ci" / "run").read_text()  # CI installs through the same Makefile


def test_sdist_ships_the_constraints_file():
    assert "constraints.txt" in (ROOT / "MANIFEST.in").read_text().split()

"""Every module of the package imports on its own, first (the package's own imports sit at the top of each
module: a loop through the packages' __init__ modules would show here as a partially initialised module),
and neither the package nor the command line imports torch."""
from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import onnxpoolfix

ROOT = Path(onnxpoolfix.__file__).resolve().parent.parent

SCRIPT = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for key in [k for k in sys.modules if k == "onnxpoolfix" or k.startswith("onnxpoolfix.")]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
print("\\n".join(failed))
"""


def test_every_module_imports_first_and_torch_stays_out():
    names = ["onnxpoolfix"] + [m.name for m in pkgutil.walk_packages(onnxpoolfix.__path__, "onnxpoolfix.")
                               if m.name != "onnxpoolfix.__main__"]
    r = subprocess.run([sys.executable, "-c", SCRIPT, *names], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", "import sys, onnxpoolfix, onnxpoolfix.cli; print('torch' in sys.modules)"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.stdout.strip() == "False", r.stderr


def test_nothing_shipped_points_to_the_steering_folder():
    """A clone of the project has no ../shared: the package, its docs and its build files never send a reader
    there (the facts they rest on are written out in README.md and ARCHITECTURE.md)."""
    shipped = [*ROOT.joinpath("onnxpoolfix").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"),
               *(ROOT / name for name in ("README.md", "ARCHITECTURE.md", "pyproject.toml", "Makefile", "MANIFEST.in"))]
    pointing = [str(p.relative_to(ROOT)) for p in shipped if p.exists() and "../shared" in p.read_text()]
    assert pointing == []

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


INTERRUPT_WHILE_IMPORTING = """
import importlib.abc, sys
class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C arriving while the command line's modules load
    def find_spec(self, name, path=None, target=None):
        if name == "onnxpoolfix.cli":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ["onnxpoolfix", "fixtures/avg1d.onnx", "out.onnx"]
from onnxpoolfix.entry import main
main()
"""


def test_an_interrupt_while_importing_is_exit_130_in_one_line(tmp_path):
    """The console script's entry loads the heavy modules inside its own handler: Ctrl-C during that second
    is exit 130 with one line, no traceback, nothing written (the package's names load lazily, so importing
    the entry module itself is cheap)."""
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "avg1d.onnx").write_bytes((ROOT / "fixtures" / "avg1d.onnx").read_bytes())
    r = subprocess.run([sys.executable, "-c", INTERRUPT_WHILE_IMPORTING], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_the_console_script_is_the_light_entry():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["onnxpoolfix"] == "onnxpoolfix.entry:main"
    r = subprocess.run([sys.executable, "-c", "import sys, onnxpoolfix.entry; print('onnxruntime' in sys.modules, "
                        "'numpy' in sys.modules)"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.stdout.split() == ["False", "False"], r.stdout + r.stderr

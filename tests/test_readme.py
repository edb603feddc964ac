"""The commands and code of README.md and of every page in docs/, run as written, so the documentation cannot rot.

Every `onnxpoolfix ...` line of an indented block and every ```python block runs in a scratch folder that
has the repository's fixtures/ and the folders the README's `mkdir -p` lines make (make targets are not run here: `make test` is what runs
this file, and `make demo` runs the same CLI on a fixture).
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = {"README.md": README, **{f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}}
DOCS = "\n".join(PAGES.values())
CLI_LINES = [ln.strip() for ln in DOCS.splitlines()
             if re.match(r"^ {4}onnxpoolfix (?!IN\.onnx|inspect IN|windows N )", ln)]
PY_BLOCKS = re.findall(r"```python\n(.*?)```", DOCS, flags=re.S)


MKDIR_LINES = re.findall(r"^ {4}mkdir -p (\S+)$", DOCS, flags=re.M)


@pytest.fixture()
def scratch(tmp_path):
    """A fresh checkout's view: fixtures/, and only the folders the README itself says to make."""
    shutil.copytree(ROOT / "fixtures", tmp_path / "fixtures", ignore=shutil.ignore_patterns("exports"))
    for folder in MKDIR_LINES:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_readme_has_examples():
    assert len(CLI_LINES) >= 5 and len(PY_BLOCKS) >= 2


def test_readme_is_a_landing_page_and_links_every_docs_page():
    words = len(re.sub(r"<!--.*?-->", "", README, flags=re.S).split())
    assert words < 2000, f"README.md has {words} words: move the detail to a page in docs/"
    for name in PAGES:
        if name != "README.md":
            assert f"]({name})" in README, f"{name} is not linked from README.md"
    for name, text in PAGES.items():  # relative links between pages resolve
        base = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text):
            assert (base / target).exists(), f"{name}: broken link {target}"


def test_readme_keeps_the_two_setup_commands():
    """A fresh machine needs only these: one shows the tool at work, one runs the tests."""
    assert re.search(r"^ {4}make demo ", README, flags=re.M) and re.search(r"^ {4}make test ", README, flags=re.M)


def test_readme_first_command_runs_as_typed(scratch):
    """The README's first command through the installed console script, in a process of its own."""
    argv = shlex.split(CLI_LINES[0])
    exe = Path(sys.executable).with_name("onnxpoolfix")
    cmd = [str(exe)] + argv[1:] if exe.exists() else [sys.executable, "-m", "onnxpoolfix"] + argv[1:]
    proc = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("line", CLI_LINES)
def test_readme_command_runs(line, scratch, monkeypatch):
    """Every command of README.md and docs/, through the command line's own parser, in this process (a
    process each cost a second of imports; the console script itself runs above and in tests/cli)."""
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    monkeypatch.chdir(scratch)
    r = CliRunner().invoke(main, shlex.split(line)[1:], prog_name="onnxpoolfix")
    assert r.exit_code == 0, r.output + repr(r.exception)


@pytest.mark.parametrize("block", PY_BLOCKS, ids=[f"python{i}" for i in range(len(PY_BLOCKS))])
def test_readme_python_block_runs(block, scratch, monkeypatch):
    if "import torch" in block:
        pytest.importorskip("torch")
    monkeypatch.chdir(scratch)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert any(scratch.joinpath("out").iterdir())


def test_readme_exit_code_table_is_the_one_in_errors():
    """The README's exit-code table is errors.EXIT_CODES, row for row (--help prints the same table)."""
    from onnxpoolfix import errors

    block = README.split("<!-- exit codes -->\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    got = [[cell.strip() for cell in row.strip("|").split(" | ")] for row in block]
    want = [[f"`{e.label}`", f"`{e.error.__name__}`" if e.error else "-", e.patch or "-", e.inspect or "-"]
            for e in errors.EXIT_CODES]
    assert got == want


def test_every_error_class_exits_with_a_code_of_the_table():
    """One class per exit code; a subclass keeps its base's code."""
    from onnxpoolfix import errors

    classes = {e.error for e in errors.EXIT_CODES if e.error is not None}
    assert len(classes) == len({c.exit_code for c in classes})
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.PoolFixError) and cls is not errors.PoolFixError:
            row = next(c for c in classes if issubclass(cls, c))
            assert cls.exit_code == row.exit_code, cls

"""benchmarks/RESULTS.md is shared by several scripts, each owning one '## ' section of it."""
from __future__ import annotations

from pathlib import Path


def write_section(results: Path, heading: str, section: str) -> None:
    """Replace the section starting with ``heading`` (up to the next '## ') by ``section``, or append it;
    every other section is kept byte for byte."""
    text = results.read_text() if results.exists() else ""
    start = text.find(heading)
    if start < 0:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section
    else:
        end = text.find("\n## ", start + len(heading))
        rest = text[end + 1:] if end >= 0 else ""
        text = text[:start] + section + ("\n" + rest if rest else "")
    results.write_text(text)

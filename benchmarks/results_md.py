"""benchmarks/RESULTS.md is shared by several scripts, each owning one '## ' section of it."""
from __future__ import annotations

import argparse
from pathlib import Path


def table_args(doc: str, cases_help: str | None, rounds: int = 15) -> argparse.Namespace:
    """The flags of a script that prints one table and may write it into RESULTS.md: ``--rounds``,
    ``--cases`` (when ``cases_help``; the names, split, or None) and ``--results``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=rounds)
    if cases_help:
        ap.add_argument("--cases", help=cases_help)
    ap.add_argument("--results", action="store_true", help="also write the table into benchmarks/RESULTS.md")
    args = ap.parse_args()
    if cases_help:
        args.cases = args.cases.split(",") if args.cases else None
    return args


def write_table(results: Path, heading: str, intro: str, lines: list[str]) -> None:
    """The section under ``heading``: the heading, ``intro``, then the table ``lines``."""
    write_section(results, heading, "\n".join([heading, "", intro, ""] + lines) + "\n")


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

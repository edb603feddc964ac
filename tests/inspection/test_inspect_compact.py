"""``inspect`` without -v: per node the chosen lowering and the other exact ones with their costs; the
lowerings that do not apply (a dozen lines of "a pooled axis is symbolic" per region) only with -v. The JSON
keeps every candidate either way."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from onnxpoolfix.cli import main
from onnxpoolfix.inspection.model import inspect_model

ROOT = Path(__file__).resolve().parents[2]
PSP = ROOT / "fixtures" / "dynamo" / "psp_area_symbolic.onnx"  # a dynamo pyramid: two proven regions
PYRAMID = ROOT / "fixtures" / "pyramid_pooling.onnx"


def _inspect(*args):
    return CliRunner().invoke(main, ["inspect", *map(str, args)], catch_exceptions=False)


def _node_blocks(text: str) -> list[list[str]]:
    blocks = [b.splitlines() for b in text.split("\n\n")]
    return [b for b in blocks if b and "adaptive_" in b[0] and "  " in b[0]]


def test_dynamo_pyramid_is_under_15_lines_per_region_and_names_no_inapplicable_lowering():
    short, full = _inspect(PSP), _inspect(PSP, "-v")
    assert short.exit_code == full.exit_code
    blocks = _node_blocks(short.stdout)
    assert len(blocks) == 2
    for block in blocks:
        assert len(block) < 15, block
        assert any(line.startswith("  * dynamic") for line in block), block
        assert not any("symbolic" in line and line.startswith("    ") and "us" in line for line in block[2:-1])
        (hidden,) = [line for line in block if "do not apply" in line]
        count = int(hidden.split("(")[1].split()[0])
        # -v shows those very lowerings, each with its reason
        (vblock,) = [b for b in _node_blocks(full.stdout) if b[0] == block[0]]
        reasons = [line for line in vblock if line.startswith("    ") and "-  " in line]
        assert len(reasons) == count > 0, vblock


def test_exact_alternatives_keep_their_costs_and_json_keeps_everything():
    text = _inspect(PYRAMID).stdout
    for block in _node_blocks(text):
        alternatives = [line for line in block if line.endswith("applies")]
        assert alternatives and all(" us " in line or " ms " in line for line in alternatives), block
    doc = json.loads(_inspect(PYRAMID, "--json").stdout)
    ins = inspect_model(__import__("onnx").load(PYRAMID))
    for node, seen in zip(doc["nodes"], ins.nodes):
        assert len(node["candidates"]) == len(seen.candidates)
        assert any(c["reason"] for c in node["candidates"])  # the inapplicable ones are there, with reasons


def test_a_node_where_nothing_applies_still_shows_every_reason():
    ins = inspect_model(__import__("onnx").load(PSP))
    for node in ins.nodes:
        for c in node.candidates:
            if c.reason is None:
                c.reason, c.cost_s = "made inapplicable for this test", None
        node.chosen = None
    text = ins.format_text()
    assert "do not apply: -v" not in text
    assert text.count("made inapplicable for this test") == len(ins.nodes)
    for node in ins.nodes:
        for c in node.candidates:
            assert f" {c.name}" in text and c.reason in text

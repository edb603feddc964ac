"""``--report FILE`` writes JSON that matches the schema documented in onnxpoolfix/report.py, key by key and
type by type; ``-q`` prints nothing on success."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import onnxpoolfix
from onnxpoolfix import report as report_mod
from onnxpoolfix.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

NUM = (int, float)
OPT_NUM = (int, float, type(None))
TOP = {
    "schema_version": int, "tool": str, "version": str, "status": str, "checked": bool,
    "check_passed": (bool, type(None)), "check_note": str, "opset": int, "target": str, "nodes": list,
    "totals": dict, "suspects": list, "partial": list, "windows_proven_to": (int, type(None)), "notes": list,
}
NODE = {
    "name": str, "op": str, "kind": str, "encoding": str, "input_shape": list, "output_shape": list,
    "lowering": str, "why": str, "ops": list, "indices": str, "max_error": OPT_NUM, "tolerance": OPT_NUM,
    "checked_shapes": list, "evidence": str, "rests_on_traced_shape": bool,
}
SUSPECT = {"result": str, "evidence": str, "why": str, "frozen": bool, "right_at": str, "remedy": str}
TOTALS = {"nodes": int, "max_error": OPT_NUM, "by_lowering": dict}
NOTE = {"severity": str, "code": str, "text": str, "data": dict}


def _is(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if bool in types or not isinstance(value, bool):  # a bool is not an int here
        return isinstance(value, types)
    return False


def validate(doc: dict) -> None:
    assert set(doc) == set(TOP), f"top-level keys {sorted(doc)} != {sorted(TOP)}"
    for k, t in TOP.items():
        assert _is(doc[k], t), f"{k}: {doc[k]!r} is not {t}"
    assert doc["schema_version"] == report_mod.SCHEMA_VERSION == 2
    assert doc["tool"] == "onnxpoolfix" and doc["version"] == onnxpoolfix.__version__
    assert doc["status"] in ("patched", "nothing-to-patch")
    assert doc["target"] in ("onnxruntime", "tensorrt")
    assert (doc["check_passed"] is None) == (not doc["checked"])
    assert (doc["status"] == "patched") == bool(doc["nodes"])
    dynamic = any(n["lowering"] == "dynamic" for n in doc["nodes"])
    assert (doc["windows_proven_to"] is not None) == (dynamic and doc["checked"])
    if doc["windows_proven_to"] is not None:  # the notes say the same bound
        assert f"proven up to n = {doc['windows_proven_to']}" in doc["check_note"]
    for n in doc["nodes"]:
        assert set(n) == set(NODE), f"node keys {sorted(n)} != {sorted(NODE)}"
        for k, t in NODE.items():
            assert _is(n[k], t), f"node {k}: {n[k]!r} is not {t}"
        assert n["kind"] in ("avg", "max") and n["encoding"] in ("aten-op", "ATen-attr", "dynamo")
        assert bool(n["evidence"]) == (n["encoding"] == "dynamo")  # a leftover is its own evidence
        assert n["indices"] in ("computed", "dropped", "none")
        assert re.fullmatch(r"adaptive_(avg|max)_pool[123]d", n["op"])
        for d in n["input_shape"] + n["output_shape"]:
            assert d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)), d
        assert n["ops"] and all(isinstance(o, str) for o in n["ops"])
        assert all(isinstance(s, list) and all(isinstance(d, int) for d in s) for s in n["checked_shapes"])
        if doc["checked"]:
            assert n["max_error"] is not None and n["tolerance"] is not None and n["checked_shapes"]
            assert n["max_error"] <= n["tolerance"]
        else:
            assert n["max_error"] is None and n["tolerance"] is None and n["checked_shapes"] == []
    for note in doc["notes"]:
        assert set(note) == set(NOTE) and all(_is(note[k], t) for k, t in NOTE.items()), note
        assert note["severity"] in ("note", "warning") and note["code"] != "other" and "\x1e" not in note["text"]
    assert doc["check_note"] == "; ".join(note["text"] for note in doc["notes"])
    not_checked = any(note["code"] == "not-checked" for note in doc["notes"])
    assert not_checked == (not doc["checked"] and doc["status"] == "patched")
    for s in doc["suspects"]:
        assert set(s) == set(SUSPECT) and all(_is(s[k], t) for k, t in SUSPECT.items()), s
    t = doc["totals"]
    assert set(t) == set(TOTALS)
    for k, ty in TOTALS.items():
        assert _is(t[k], ty), f"totals {k}: {t[k]!r}"
    assert t["nodes"] == len(doc["nodes"])
    assert t["by_lowering"] == {lw: sum(n["lowering"] == lw for n in doc["nodes"])
                                for lw in {n["lowering"] for n in doc["nodes"]}}
    errs = [n["max_error"] for n in doc["nodes"] if n["max_error"] is not None]
    assert t["max_error"] == (max(errs) if errs else None)


def test_every_documented_key_is_validated() -> None:
    """The schema in report.py's docstring and this test's tables name the same keys."""
    doc = report_mod.__doc__
    for key in list(TOP) + list(NODE) + list(TOTALS) + list(SUSPECT) + list(NOTE):
        assert f'"{key}"' in doc, f"{key} is not documented in report.py"


@pytest.mark.parametrize("fixture, args", [
    ("small_convnet", []),
    ("small_convnet", ["--no-check"]),
    ("pyramid_pooling", []),
    ("max2d_indices_output", []),
    ("dynamic_avg2d", []),
    ("aten_attr_encoding", ["--target", "tensorrt"]),
    ("dynamo/psp_area_symbolic", ["--traced-shape", "x:1,3,16,16"]),  # a dynamo export: evidence per node
])
def test_report_matches_schema(tmp_path: Path, fixture: str, args: list[str]) -> None:
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    result = CliRunner().invoke(main, [str(FIXTURES / f"{fixture}.onnx"), str(out), "--report", str(rep), *args])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(rep.read_text())
    validate(doc)
    assert doc["status"] == "patched" and doc["checked"] == ("--no-check" not in args)
    assert doc["check_passed"] is (None if "--no-check" in args else True)


def test_report_lists_what_it_suspected_and_left(tmp_path: Path) -> None:
    """Unbound, the dynamo fixture's 2x2 bin (an AveragePool frozen at the traced size) is refused; with
    --allow-partial it is left, with why, and the report says where OUT is right."""
    rep = tmp_path / "r.json"
    args = [str(FIXTURES / "dynamo" / "psp_area_symbolic.onnx"), str(tmp_path / "o.onnx"), "--report", str(rep)]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 4 and not rep.exists() and "--traced-shape" in refused.stderr
    result = CliRunner().invoke(main, args + ["--allow-partial"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(rep.read_text())
    validate(doc)
    assert doc["partial"] == ["'avg_pool2d' left frozen: OUT is right only at the size the model was exported at"]
    assert [n["encoding"] for n in doc["nodes"]] == ["dynamo", "dynamo"]
    assert [(s["result"], s["frozen"]) for s in doc["suspects"]] == [("avg_pool2d", True)]
    assert "known only at that size" in doc["suspects"][0]["why"]


def test_report_nothing_to_patch(tmp_path: Path) -> None:
    import onnx

    m = onnx.load(FIXTURES / "small_convnet.onnx")
    patched = onnxpoolfix.patch(m).model
    src = tmp_path / "clean.onnx"
    onnx.save(patched, src)
    rep = tmp_path / "r.json"
    result = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx"), "--report", str(rep)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(rep.read_text())
    validate(doc)
    assert doc["status"] == "nothing-to-patch" and doc["nodes"] == [] and doc["totals"]["nodes"] == 0


def test_no_report_when_the_patch_fails(tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    result = CliRunner().invoke(main, [str(tmp_path / "bad.onnx"), str(tmp_path / "o.onnx"), "--report", str(rep)])
    assert result.exit_code == 3
    assert not rep.exists()


def test_quiet_prints_nothing_on_success(tmp_path: Path) -> None:
    """As a real process: nothing on stdout or stderr, including what the C++ checker would print for the
    experimental ATen op."""
    for fixture in ("small_convnet", "aten_attr_default_domain"):
        out = tmp_path / f"{fixture}.onnx"
        p = subprocess.run([sys.executable, "-m", "onnxpoolfix", str(FIXTURES / f"{fixture}.onnx"), str(out), "-q"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert (p.stdout, p.stderr) == ("", ""), (p.stdout, p.stderr)
        assert out.exists()


def test_quiet_still_reports_errors(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx"), "-q"])
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr.startswith("onnxpoolfix: error:")


def test_report_ops_include_the_if_branches() -> None:
    """A max node's NaN/-inf guard is an If (onnxruntime target): the report lists the ops inside its branches
    too, in graph order, not only the guard's outer nodes."""
    import onnx

    from onnxpoolfix.graph import nodes_deep
    from onnxpoolfix.graph.emit import op_types

    model = onnx.load(FIXTURES / "dynamic_max2d.onnx")
    result = onnxpoolfix.patch(model, check=False)
    ops = result.report.nodes[0].ops
    # the guard's branches hold Ifs of their own (the dynamic max's layout chosen by the input's size)
    assert "If" in ops and ops.count("If") == sum(n.op_type == "If" for n in nodes_deep(result.model.graph.node))
    assert ops == op_types(result.model.graph.node), "every emitted node, branches included"
    # the NaN test in its Equal form (from opset 11: x - x == 0, |x| == inf), inside the branches
    assert {"Equal", "Abs", "Where"} <= set(ops[ops.index("If") + 1:]) and "IsNaN" not in ops, ops

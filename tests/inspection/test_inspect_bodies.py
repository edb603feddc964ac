"""``onnxpoolfix inspect`` on leftovers inside If/Loop/Scan bodies (issue 12, item 4): it plans them through
the same plan_model as the patch and lists each one with its body's path, its candidates and the lowering
the patch then writes; a body leftover no lowering applies to blocks it (exit 4) with the patch's own hint.

The models are torch.jit.script exports (tests/support/control_flow_models.py, shared with test_control_flow.py)
and one built by hand (an opset the only exact lowering of a node is too new for).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from control_flow_models import chained_modules, export_scripted, if_modules, loop_modules
from helpers import ATEN, leftover_nodes
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.graph import nodes_deep, subgraphs
from onnxpoolfix.inspection.model import inspect_model
from onnxpoolfix.inspection.report import NodeInspection

# "family:name": if_modules / loop_modules / chained_modules of tests/support/control_flow_models.py
CASES = ["if:avg3x3_vs_max3x3", "if:avg5x7_vs_max5x7", "if:max1d_vs_avg1d", "if:upsample_vs_avg", "if:dynamic",
         "loop:loop", "loop:loop_if", "chained:pool_after_if", "chained:if_after_pool"]


def _scripted(torch, case: str) -> onnx.ModelProto:
    family, name = case.split(":")
    if family == "if":
        module, _, _, shape = if_modules(torch)[name]
        dyn = {"x": {0: "N", 2: "H", 3: "W"}} if name == "dynamic" else None
        return export_scripted(torch, module, (torch.randn(*shape), True), ["x", "flag"], dynamic_axes=dyn)
    if family == "loop":
        shape = (1, 2, 9, 10) if name == "loop" else (1, 2, 7, 8)
        return export_scripted(torch, loop_modules(torch)[name], (torch.randn(*shape), 2), ["x", "n"])
    return export_scripted(torch, chained_modules(torch)[name], (torch.randn(1, 2, 9, 10), True), ["x", "flag"])


@pytest.fixture(scope="module")
def exports(torch_mod):
    cache: dict[str, onnx.ModelProto] = {}

    def get(case: str) -> onnx.ModelProto:
        if case not in cache:
            cache[case] = _scripted(torch_mod, case)
        copy = onnx.ModelProto()
        copy.CopyFrom(cache[case])
        return copy

    return get


def _in_bodies(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for top in model.graph.node for body in subgraphs(top) for n in nodes_deep(body.node)
            if n.domain == ATEN]


@pytest.mark.parametrize("case", CASES)
def test_inspect_lists_every_body_leftover_with_the_lowering_the_patch_writes(case, exports):
    model = exports(case)
    before = model.SerializeToString()
    inspection = inspect_model(model)
    assert model.SerializeToString() == before  # the caller's model is not typed in place
    assert inspection.would_patch and inspection.exit_code == 0, inspection.format_text()
    body_nodes = [n for n in inspection.nodes if n.body is not None]
    assert len(body_nodes) == len(_in_bodies(model)) > 0
    assert [n.body is None for n in inspection.nodes] == \
        [True] * len(leftover_nodes(model)) + [False] * len(body_nodes)  # top level first, then the bodies'
    for n in body_nodes:  # the path names the enclosing nodes, read from the model itself
        first = n.body.split(" > ")[0]
        assert any(first.startswith(f"{g.op_type} '{g.name}' ") for g in model.graph.node), n.body
        assert n.candidates and n.chosen in {c.name for c in n.candidates if c.reason is None}
        assert all((c.cost_s is None) != (c.reason is None) for c in n.candidates)
        assert n.ops and n.input_shape and n.output_shape
    report = onnxpoolfix.patch(model, check=False).report
    assert [(r.name, r.op, r.lowering) for r in report.nodes] == [(n.name, n.op, n.chosen) for n in inspection.nodes]
    assert [r.input_shape for r in report.nodes] == [n.input_shape for n in inspection.nodes]
    for r, n in zip(report.nodes, inspection.nodes):
        assert r.why == n.why + (" (inside a control-flow body)" if n.body else "")
    text = inspection.format_text()
    for n in body_nodes:
        assert f"  inside: {n.body}" in text and f"-> {n.chosen}: " in text


def test_a_nested_body_reads_as_its_path(exports):
    """Loop -> If: the path names the Loop's body, then the If's branch, in that order."""
    model = exports("loop:loop_if")
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    branch = next(n for n in body.node if n.op_type == "If")
    paths = [n.body for n in inspect_model(model).nodes]
    outer = f"Loop '{loop.name}' body"
    assert sorted(paths) == sorted([outer, f"{outer} > If '{branch.name}' then_branch",
                                    f"{outer} > If '{branch.name}' else_branch"])


def _cli(*args):
    return CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)


def test_cli_json_windows_and_tensorrt_lint_of_the_patched_copy(tmp_path: Path, exports):
    src = tmp_path / "loop_if.onnx"
    onnx.save(exports("loop:loop_if"), src)
    r = _cli("inspect", src, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["would_patch"] and doc["exit_code"] == 0 and len(doc["nodes"]) == 3
    keys = {f.name for f in NodeInspection.__dataclass_fields__.values()}
    assert "body" in keys and all(set(n) == keys for n in doc["nodes"])
    assert all(n["body"].startswith("Loop ") and n["chosen"] for n in doc["nodes"])

    r = _cli("inspect", src, "--json", "--windows")
    assert r.exit_code == 0, r.output
    nodes = json.loads(r.stdout)["nodes"]
    assert [len(n["windows"]) for n in nodes] == [2, 2, 2]  # H and W of each
    assert all(w["in_size"] in (7, 8) and w["out_size"] == 3 for n in nodes for w in n["windows"])
    r = _cli("inspect", src, "--windows")
    assert r.exit_code == 0 and r.stdout.count("(inside Loop ") == 3, r.output

    r = _cli("inspect", src, "--json", "--target", "tensorrt")
    assert r.exit_code == 0, r.output
    lint = json.loads(r.stdout)["tensorrt"]
    assert lint["linted"] == "patched" and lint["clean"], lint
    assert sorted(lint["ignored_leftovers"]) == sorted(n["name"] for n in nodes)
    assert not [f for f in lint["findings"] if f["domain"] == ATEN]


def test_tensorrt_lint_flags_a_body_leftover_where_the_patch_is_blocked(exports):
    """Blocked (a forced lowering that is not exact): the original graph is linted, and its body leftovers
    are set aside as leftovers, not reported as nodes TensorRT rejects."""
    model = exports("if:avg5x7_vs_max5x7")
    inspection = inspect_model(model, target="tensorrt", strategy="pool")
    assert inspection.exit_code == 4
    assert inspection.tensorrt.linted == "original"
    assert len(inspection.tensorrt.ignored_leftovers) == 2
    assert not [f for f in inspection.tensorrt.findings if f["domain"] == ATEN]


def _indices_in_a_branch(opset: int) -> onnx.ModelProto:
    """An If whose then branch pools with its indices as a branch output, the size a Constant in the outer
    graph (as torch writes it); the else branch pools without. At opset 10 only the argmax lowering could
    compute the indices, and it needs opset 11."""
    size = helper.make_node("Constant", [], ["size"], name="size_const",
                            value=onnx.numpy_helper.from_array(np.array([4, 5], np.int64)))
    then = helper.make_graph(
        [helper.make_node("adaptive_max_pool2d", ["x", "size"], ["p_t", "i_t"], name="then_pool", domain=ATEN)],
        "then", [], [helper.make_tensor_value_info("p_t", TensorProto.FLOAT, [1, 3, 4, 5]),
                     helper.make_tensor_value_info("i_t", TensorProto.INT64, [1, 3, 4, 5])])
    zeros = onnx.numpy_helper.from_array(np.zeros((1, 3, 4, 5), np.int64))
    other = helper.make_graph(
        [helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["p_e"], name="else_pool", domain=ATEN),
         helper.make_node("Constant", [], ["i_e"], name="no_indices", value=zeros)],
        "else", [], [helper.make_tensor_value_info("p_e", TensorProto.FLOAT, [1, 3, 4, 5]),
                     helper.make_tensor_value_info("i_e", TensorProto.INT64, [1, 3, 4, 5])])
    graph = helper.make_graph(
        [size, helper.make_node("If", ["flag"], ["y", "i"], name="branch", then_branch=then, else_branch=other)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 9]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [1, 3, 4, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ATEN, 1)],
                             ir_version=7)


def test_a_body_leftover_no_lowering_applies_to_blocks_inspect_with_the_patch_hint(tmp_path: Path):
    model = _indices_in_a_branch(10)
    with pytest.raises(UnsupportedNodeError) as err:
        onnxpoolfix.patch(model)
    assert "then_pool" in str(err.value) and "opset 11" in err.value.hint
    inspection = inspect_model(model)
    assert inspection.exit_code == 4 and not inspection.would_patch
    (blocked,) = [n for n in inspection.nodes if n.blocker]
    assert blocked.name == "then_pool" and blocked.body == "If 'branch' then_branch"
    assert blocked.hint == err.value.hint
    (fine,) = [n for n in inspection.nodes if not n.blocker]
    assert fine.name == "else_pool" and fine.chosen and fine.body == "If 'branch' else_branch"
    assert "1 of 2 nodes blocked" in inspection.verdict()

    src = tmp_path / "if_indices.onnx"
    onnx.save(model, src)
    patched = _cli(src, tmp_path / "out.onnx")
    assert patched.exit_code == 4 and f"  hint: {err.value.hint}" in patched.stderr
    r = _cli("inspect", src)
    assert r.exit_code == 4, r.output
    assert "BLOCKED" in r.stdout and f"    hint: {err.value.hint}" in r.stdout
    by_name = {n["name"]: n for n in json.loads(_cli("inspect", src, "--json").stdout)["nodes"]}
    assert by_name["then_pool"]["hint"] == err.value.hint and by_name["else_pool"]["hint"] is None
    assert inspect_model(_indices_in_a_branch(11)).exit_code == 0  # the hint holds: at opset 11 it patches


def test_a_forced_lowering_blocks_body_leftovers_as_it_blocks_the_patch(exports):
    model = exports("if:avg5x7_vs_max5x7")  # 11x10 -> 5x7: non-uniform, AveragePool is not exact
    with pytest.raises(UnsupportedNodeError) as err:
        onnxpoolfix.patch(model, strategy="pool")
    inspection = inspect_model(model, strategy="pool")
    assert inspection.exit_code == 4
    assert [n.blocker is not None for n in inspection.nodes] == [True, True]
    assert inspection.nodes[0].blocker == str(err.value) and inspection.nodes[0].hint == err.value.hint


def test_body_leftovers_are_listed_where_a_top_level_one_is_blocked(exports):
    """The patch stops at the blocked top-level node; inspect still lists (and plans) the bodies' leftovers."""
    model = exports("chained:if_after_pool")  # top level 9x10 -> 6x7, then 6x7 -> 4x3 | 5x5 in the branches
    with pytest.raises(UnsupportedNodeError) as err:
        onnxpoolfix.patch(model, strategy="pool")
    inspection = inspect_model(model, strategy="pool")
    assert inspection.exit_code == 4
    assert [n.body is None for n in inspection.nodes] == [True, False, False]
    assert inspection.nodes[0].blocker == str(err.value)
    assert all(n.candidates and n.input_shape for n in inspection.nodes)
    assert all(n.blocker for n in inspection.nodes)  # no window of 6 -> 4 or 7 -> 3 is one AveragePool

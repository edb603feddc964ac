"""``onnxpoolfix inspect`` and the TensorRT target: candidates, choice, blockers, exit codes, the whole-graph
TensorRT lint, and --target tensorrt end to end on every fixture."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import ATEN, make_leftover
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.inspection.model import EXIT_BLOCKED, EXIT_OK, EXIT_TENSORRT, inspect_model
from onnxpoolfix.io import load_model
from onnxpoolfix.lowering import BY_NAME, LOWERINGS
from onnxpoolfix.plan import planner
from onnxpoolfix.tensorrt import lint_tensorrt

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ALL_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
MANIFEST = {c["name"]: c for c in json.loads((FIXTURES / "manifest.json").read_text())["cases"]}


def fixture(name: str) -> onnx.ModelProto:
    return load_model(FIXTURES / f"{name}.onnx")


def inspect_cli(*args):
    return CliRunner().invoke(main, ["inspect", *map(str, args)], catch_exceptions=False)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _without_dynamic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate a build with no lowering for symbolic sizes."""
    keep = tuple(lw for lw in LOWERINGS if not lw.dynamic)
    monkeypatch.setattr(planner, "LOWERINGS", keep)
    monkeypatch.setattr(planner, "BY_NAME", {lw.name: lw for lw in keep})


def _with_other_node(model: onnx.ModelProto, op: str = "Unique", domain: str = "") -> onnx.ModelProto:
    """Append a node TensorRT's parser rejects (reading the pooled output), with a second graph output."""
    node = helper.make_node(op, ["y"], ["extra"], name="not_ours", domain=domain)
    model.graph.node.append(node)
    model.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["n_extra"]))
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


# ------------------------------------------------------------------------------------------ the library


def test_every_candidate_is_listed_with_a_cost_or_a_reason() -> None:
    result = inspect_model(fixture("avg2d_8x9_to_5x7"))
    assert result.would_patch and result.exit_code == EXIT_OK and result.blocker is None
    (node,) = result.nodes
    assert node.name == "/adaptive_avg_pool2d" and node.dtype == "float32"
    assert node.input_shape == [1, 2, 8, 9] and node.output_shape == [1, 2, 5, 7]
    assert [c.name for c in node.candidates] == [lw.name for lw in LOWERINGS]
    for c in node.candidates:
        assert (c.cost_s is None) != (c.reason is None), c
    applicable = [c for c in node.candidates if c.reason is None]
    assert node.chosen == min(applicable, key=lambda c: c.cost_s).name
    assert {"matmul", "kronecker"} <= {c.name for c in applicable}
    pool = next(c for c in node.candidates if c.name == "pool")
    assert pool.reason and "\n" not in pool.reason
    # the MatMuls, their weights as Div(Cast(indicator), lengths), and the If keeping NaN/inf in their windows
    assert node.why and {"MatMul", "Div", "If"} <= set(node.ops) <= {"MatMul", "Reshape", "Transpose", "Cast", "Div",
                                                                   "ReduceSum", "Sub", "IsNaN", "Not", "If", "Identity",
                                                                   "Greater", "Less", "Or", "And", "Where", "Equal",
                                                                   "Abs", "Constant"}
    assert node.axes == ["8->5 non-uniform", "9->7 non-uniform"]


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("name", ["max2d", "max1d", "avg2d_8x9_to_5x7", "max2d_indices_output"])
def test_listed_ops_are_what_the_patch_writes(name: str, target: str) -> None:
    """Every op type the patch adds is among those inspect lists for the chosen lowering (the NaN test spelled
    as the target writes it: Sub/Equal/Abs/Or/Not for portable, which has no IsNaN)."""
    model = fixture(name)
    (node,) = inspect_model(model, target=target).nodes
    before = {n.op_type for n in model.graph.node}
    written = {n.op_type for n in onnxpoolfix.patch(model, target=target, check=False).model.graph.node} - before
    assert written and written <= set(node.ops), (written - set(node.ops), node.ops)
    assert ("IsNaN" in node.ops) == ("IsNaN" in written)


def test_inspect_agrees_with_patch_on_every_fixture() -> None:
    for name in ALL_FIXTURES:
        model = fixture(name)
        result = inspect_model(model)
        if not result.would_patch:
            assert MANIFEST[name]["dynamic"] and "dynamic" not in BY_NAME, name
            continue
        report = onnxpoolfix.patch(model, check=False).report
        assert [n.chosen for n in result.nodes] == [n.lowering for n in report.nodes], name
        assert [n.name for n in result.nodes] == [n.name for n in report.nodes], name


def test_inspect_does_not_modify_the_model() -> None:
    model = fixture("dynamic_avg2d")
    before = model.SerializeToString()
    inspect_model(model, target="tensorrt", input_shapes={"x": [1, 2, 8, 9]})
    assert model.SerializeToString() == before


def test_forced_strategy_that_is_not_exact_is_a_blocker() -> None:
    result = inspect_model(fixture("avg2d_8x9_to_5x7"), strategy="pool")
    assert not result.would_patch and result.exit_code == EXIT_BLOCKED
    assert "strategy 'pool' does not apply" in result.nodes[0].blocker
    assert inspect_model(fixture("avg2d_8x9_to_5x7"), strategy="kronecker").nodes[0].chosen == "kronecker"


def test_symbolic_axis_without_a_dynamic_lowering_is_a_blocker(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_dynamic(monkeypatch)
    result = inspect_model(fixture("dynamic_avg2d"))
    assert result.exit_code == EXIT_BLOCKED
    (node,) = result.nodes
    assert node.input_shape[2:] == ["H", "W"] or all(isinstance(d, str) or d is None for d in node.input_shape[2:])
    assert "symbolic" in node.blocker and "input_shapes=" in node.hint  # the API's words (the CLI: its flag)
    assert all(c.reason for c in node.candidates)
    # binding the shape unblocks it, with a static lowering
    bound = inspect_model(fixture("dynamic_avg2d"), input_shapes={"x": [1, 2, 8, 9]})
    assert bound.would_patch and bound.nodes[0].chosen == "matmul"
    assert [n.severity for n in bound.notes if n.code == "input-shapes-kept"] == ["warning"]


def test_dynamic_fixture_uses_the_dynamic_lowering_when_there_is_one() -> None:
    if "dynamic" not in BY_NAME:
        pytest.skip("no dynamic lowering in this build")
    result = inspect_model(fixture("dynamic_max2d"))
    assert result.would_patch and result.nodes[0].chosen == "dynamic"


def test_non_constant_output_size_is_a_model_level_blocker() -> None:
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node[0].CopyFrom(helper.make_node("Add", ["x_size", "one"], ["size"], name="computed_size"))
    m.graph.input.append(helper.make_tensor_value_info("x_size", TensorProto.INT64, [2]))
    m.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
    result = inspect_model(m)
    assert result.exit_code == EXIT_BLOCKED and not result.would_patch
    assert "not a constant" in result.blocker and result.hint
    assert [n.name for n in result.nodes] == ["pool"] and not result.nodes[0].candidates
    assert "BLOCKED: " in result.format_text()


def test_unsupported_dtype_is_a_blocker() -> None:
    result = inspect_model(make_leftover("avg", [1, 3, 8, 9], [5, 7], dtype=TensorProto.INT32))
    assert result.exit_code == EXIT_BLOCKED and "INT32" in result.blocker


def test_nothing_to_patch() -> None:
    patched = onnxpoolfix.patch_model(fixture("avg2d_8x9_to_5x7"), check=False)
    result = inspect_model(patched)
    assert result.would_patch and result.exit_code == EXIT_OK and not result.nodes
    assert "nothing to patch" in result.format_text()


# ------------------------------------------------------------------------------------------ TensorRT lint


def test_tensorrt_lint_lints_the_patched_graph() -> None:
    result = inspect_model(fixture("small_convnet"), target="tensorrt")
    assert result.tensorrt.linted == "patched" and result.tensorrt.clean
    assert result.exit_code == EXIT_OK
    assert result.tensorrt.ignored_leftovers == [result.nodes[0].name]
    text = result.format_text()
    assert "TensorRT lint" in text and "not linted as such: the patch replaces it" in text


@pytest.mark.parametrize("op, domain", [("Unique", ""), ("MyPlugin", "com.example")])
def test_tensorrt_lint_reports_other_nodes_of_the_whole_graph(op: str, domain: str) -> None:
    model = _with_other_node(make_leftover("avg", [1, 3, 8, 9], [5, 7]), op, domain)
    result = inspect_model(model, target="tensorrt")
    assert result.would_patch
    assert result.exit_code == EXIT_TENSORRT
    errors = [f for f in result.tensorrt.findings if f["severity"] == "error"]
    assert [(f["node"], f["op_type"], f["emitted"]) for f in errors] == [("not_ours", op, False)]
    assert errors[0]["reason"]
    assert "would NOT be TensorRT-clean" in result.format_text()
    # the onnxruntime target does not lint
    assert inspect_model(model).exit_code == EXIT_OK and inspect_model(model).tensorrt is None


def test_tensorrt_lint_of_a_blocked_model_ignores_the_leftovers_and_says_so(monkeypatch) -> None:
    _without_dynamic(monkeypatch)
    model = fixture("dynamic_avg2d")
    result = inspect_model(model, target="tensorrt")
    assert result.exit_code == EXIT_BLOCKED and result.tensorrt.linted == "original"
    assert result.tensorrt.findings == [] and result.tensorrt.ignored_leftovers == ["/adaptive_avg_pool2d"]
    assert any(f.domain == ATEN for f in lint_tensorrt(model))  # the raw lint does flag it
    assert "not linted as such" in result.format_text()


def test_tensorrt_float64_is_warned() -> None:
    result = inspect_model(fixture("avg2d_float64"), target="tensorrt")
    assert result.exit_code == EXIT_OK
    assert any("float32" in w for w in result.nodes[0].warnings)
    assert any("DOUBLE" in f["reason"] and f["severity"] == "warning" for f in result.tensorrt.findings)


def test_lowering_check_refuses_what_the_tensorrt_lint_rejects() -> None:
    """Beyond the op list: a lowering emitting a ReduceMean with computed axes is refused for TensorRT."""
    from onnxpoolfix.frontends.leftovers import find_pool_nodes
    from onnxpoolfix.graph.shapes import resolve_specs
    from onnxpoolfix.lowering.base import Lowering, tensorrt_rejection

    class ComputedAxes(Lowering):
        name, summary = "computed_axes", "test only"

        def _steps(self, spec):
            return []

        def build(self, em, spec, x, y, indices=None):
            shape = em.op("Shape", [x])
            axes = em.op("Slice", [shape, em.ints("s", [0]), em.ints("e", [2])])
            em.op("ReduceMean", [x, axes], out=y, keepdims=1)

    model = make_leftover("avg", [1, 3, 8, 9], [5, 7], opset=18)
    nodes = find_pool_nodes(model.graph)
    (trt,) = resolve_specs(model, nodes, opset=18, target="tensorrt")
    (ort_spec,) = resolve_specs(model, nodes, opset=18, target="onnxruntime")
    reason = tensorrt_rejection(ComputedAxes(), trt)
    assert reason and "ReduceMean" in reason and "axes" in reason
    assert ComputedAxes().check(trt) == reason
    assert ComputedAxes().check(ort_spec) is None
    for lw in LOWERINGS:  # and nothing real is refused by it
        assert tensorrt_rejection(lw, trt) is None, lw.name


def _dynamic_ok(name: str) -> None:
    if MANIFEST[name]["dynamic"] and "dynamic" not in BY_NAME:
        pytest.skip("symbolic H/W need the dynamic lowering, not in this build")


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_tensorrt_target_on_every_fixture(name: str) -> None:
    """Patched with target tensorrt, no fixture has a node TensorRT's parser would reject, and inspect agrees."""
    _dynamic_ok(name)
    model = fixture(name)
    result = onnxpoolfix.patch(model, target="tensorrt")
    errors = [f for f in lint_tensorrt(result.model) if f.severity == "error"]
    assert not errors, "\n".join(map(str, errors))
    inspection = inspect_model(model, target="tensorrt")
    assert inspection.exit_code == EXIT_OK, inspection.format_text()
    assert [n.chosen for n in inspection.nodes] == [n.lowering for n in result.report.nodes]


#: the lowerings that write averages only, as MatMuls against pooling matrices (mixed has a max form)
MATMUL_AVERAGES = ("matmul", "kronecker")


@pytest.mark.parametrize("strategy", [s for s in planner.STRATEGIES if s != "auto"])
def test_tensorrt_target_every_lowering_that_applies_is_lint_clean(strategy: str) -> None:
    fired = 0
    for name in ALL_FIXTURES:
        if MANIFEST[name]["dynamic"] and "dynamic" not in BY_NAME:
            continue
        try:
            patched = onnxpoolfix.patch(fixture(name), target="tensorrt", strategy=strategy, check=False).model
        except onnxpoolfix.UnsupportedNodeError:
            continue
        fired += 1
        errors = [f for f in lint_tensorrt(patched) if f.severity == "error"]
        assert not errors, f"{name}: " + "\n".join(map(str, errors))
    # no fixture is all-identity or global-only; a lowering for other targets only never applies here, nor an
    # average's MatMul (TF32, NaN: the tensorrt target writes averages as pooling and reductions)
    targets = BY_NAME[strategy].targets
    # (nor window_sum: no fixture has more than 64 windows on an axis; test_avg_non_finite.py lints one)
    if strategy not in ("identity", "global", "window_sum", *MATMUL_AVERAGES) and (
            targets is None or "tensorrt" in targets):
        assert fired, f"{strategy} applied to no fixture"
    if strategy in MATMUL_AVERAGES:
        assert not fired, f"{strategy} wrote a MatMul average for the tensorrt target"



# ------------------------------------------------------------------------------------------ the command


def test_cli_inspect_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = FIXTURES / "avg2d_8x9_to_5x7.onnx"
    r = inspect_cli(src, "-v")  # -v lists every lowering, those that do not apply with the reason
    assert r.exit_code == 0, r.output
    assert "/adaptive_avg_pool2d" in r.stdout and "1x2x8x9 -> 1x2x5x7" in r.stdout
    for lw in LOWERINGS:
        assert lw.name in r.stdout
    assert "* " in r.stdout and "chosen:" in r.stdout and "a patch would succeed" in r.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_cli_inspect_json() -> None:
    r = inspect_cli(FIXTURES / "max2d_indices_output.onnx", "--json", "--target", "tensorrt")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema_version"] == 2 and data["would_patch"] and data["exit_code"] == 0
    assert data["target"] == "tensorrt" and data["tensorrt"]["clean"] and data["tensorrt"]["linted"] == "patched"
    (node,) = data["nodes"]
    assert node["chosen"] == "argmax" and node["kind"] == "max"
    assert {c["name"] for c in node["candidates"]} == set(BY_NAME)
    assert all((c["cost_s"] is None) != (c["reason"] is None) for c in node["candidates"])


def test_cli_inspect_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert inspect_cli(FIXTURES / "avg2d_8x9_to_5x7.onnx", "--strategy", "pool").exit_code == 4
    model = _with_other_node(make_leftover("avg", [1, 3, 8, 9], [5, 7]))
    other = save(model, tmp_path / "other.onnx")
    assert inspect_cli(other).exit_code == 0
    r = inspect_cli(other, "--target", "tensorrt")
    assert r.exit_code == EXIT_TENSORRT and "'not_ours'" in r.stdout
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00garbage\xff" * 10)
    r = CliRunner().invoke(main, ["inspect", str(garbage)])
    assert r.exit_code == 3 and r.stderr.startswith("onnxpoolfix: error: ") and "hint:" in r.stderr
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "missing.onnx")])
    assert r.exit_code == 3 and "no such file" in r.stderr
    _without_dynamic(monkeypatch)
    r = inspect_cli(FIXTURES / "dynamic_avg2d.onnx")
    assert r.exit_code == 4 and "BLOCKED" in r.stdout and "--input-shape" in r.stdout
    assert inspect_cli(FIXTURES / "dynamic_avg2d.onnx", "--input-shape", "x:1,2,8,9").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.onnx", "other.onnx"]


def test_cli_inspect_bad_input_shape_is_a_usage_error() -> None:
    r = CliRunner().invoke(main, ["inspect", str(FIXTURES / "dynamic_avg2d.onnx"), "--input-shape", "x:1,a"])
    assert r.exit_code == 2 and "--input-shape" in r.stderr
    for bad in ("y:1,2,8,9", "x:1,2,8"):  # no such input, the wrong rank: usage errors too, as for patch
        r = CliRunner().invoke(main, ["inspect", str(FIXTURES / "dynamic_avg2d.onnx"), "--input-shape", bad])
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("onnxpoolfix: error: --input-shape ")
    # the library: the inspection's blocker, with the same exit code
    bad = inspect_model(fixture("dynamic_avg2d"), input_shapes={"y": [1, 2, 8, 9]})
    assert bad.exit_code == 2 and "not a graph input" in bad.blocker


def test_cli_inspect_rejects_what_patch_rejects_as_invalid(tmp_path: Path) -> None:
    """A model the ONNX checker rejects is exit 3 for inspect, as for patch."""
    m = make_leftover("avg", [1, 3, 8, 9], [5, 7])
    m.graph.node.append(helper.make_node("Relu", ["dangling"], ["r"], name="reads_nothing"))
    src = save(m, tmp_path / "bad.onnx")
    r = CliRunner().invoke(main, ["inspect", str(src)])
    assert r.exit_code == 3 and r.stderr.startswith("onnxpoolfix: error: "), r.output
    assert CliRunner().invoke(main, [str(src), str(tmp_path / "out.onnx")]).exit_code == 3


def test_unnamed_symbolic_dims_read_as_in_the_patch_table() -> None:
    # onnx's shape inference names an unnamed dim unk__N (a dynamo file's value_info holds them); the patch's
    # table writes '?', and so does inspect (it wrote 1x4xunk__0xunk__1, unk__0->3)
    model = onnx.load(FIXTURES / "dynamic_avg2d.onnx")
    for i, d in enumerate(model.graph.input[0].type.tensor_type.shape.dim[2:]):
        d.dim_param = f"unk__{i}"
    text = inspect_model(model).format_text()
    assert "unk__" not in text
    assert "x?x? ->" in text and "?->" in text

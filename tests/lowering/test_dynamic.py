"""Symbolic pooled axes (issue 5): the 'dynamic' lowering, --input-shape, and the check's choice of sizes.

- the dynamic fixtures patch with no override and match torch's saved outputs at every saved size;
- sweeps: bare pools exported with dynamic axes, patched once, run at EVERY size 1..4x the traced size
  per axis against torch (max bit for bit, averages to float32 rounding);
- --input-shape binds the sizes and a static lowering applies; the input signature is kept or restored;
- the reasons the dynamic lowering refuses; TensorRT's lint finds no error in what it emits.
"""
from __future__ import annotations

import io
import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_avg_close, assert_bits_equal, leftover_nodes, make_leftover, ort_run, ort_session
from onnx import TensorProto

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph.shapes import model_opset, resolve_specs
from onnxpoolfix.graph.shapes import type_dims as _dims
from onnxpoolfix.lowering import BY_NAME
from onnxpoolfix.tensorrt import lint_tensorrt

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
DYNAMIC_CASES = ["dynamic_classifier", "dynamic_avg2d", "dynamic_avg2d_divisible", "dynamic_max2d",
                 "dynamic_classifier_out_axes"]


def _case(name):
    return next(c for c in MANIFEST["cases"] if c["name"] == name)


def _spec(model):
    return resolve_specs(model, find_pool_nodes(model.graph), opset=model_opset(model), target="onnxruntime")[0]


def _sig(vis):
    return [_dims(v.type)[1] for v in vis]


# ---- (a) the dynamic fixtures, no override ---------------------------------------------------------------

def _assert_window_kinds_named_truly(note: str, out_shape) -> None:
    """The note's "windows: ..." are the kinds its own "(pooled AxB)" lengths give (brute-force windows)."""
    import re

    named = set(re.search(r"windows: ([a-z, -]+)", note).group(1).split(", "))
    outs = [m for m in out_shape if isinstance(m, int)][-len(re.search(r"pooled ([0-9x]+)", note).group(1).split("x")):]
    seen = set()
    for pooled in re.findall(r"pooled ([0-9x]+)", note):
        for n, m in zip(map(int, pooled.split("x")), outs):
            starts = [(i * n) // m for i in range(m)]
            lengths = {-(-((i + 1) * n) // m) - s for i, s in enumerate(starts)}
            steps = {b - a for a, b in zip(starts, starts[1:])}
            seen.add("kept" if n == m else "upsampling" if n < m
                     else "uniform" if len(lengths) == 1 and len(steps) <= 1 else "non-uniform")
    assert named == seen, (note, seen)


@pytest.mark.parametrize("name", DYNAMIC_CASES)
def test_dynamic_fixture_matches_torch_at_every_saved_size(name):
    c = _case(name)
    model = onnx.load(FIXTURES / c["file"])
    data = np.load(FIXTURES / c["data_file"])
    result = onnxpoolfix.patch(model)  # check on: sizes chosen by probing the model
    node = result.report.nodes[0]
    assert node.lowering == "dynamic"
    assert result.report.check_passed
    assert len(node.checked_shapes) >= 3
    assert any(s[0] == 2 for s in node.checked_shapes), "one check run has batch 2"
    assert "batch 1 and 2" in result.report.check_note
    _assert_window_kinds_named_truly(result.report.check_note, node.output_shape)
    assert "windows: uniform" in result.report.check_note and "upsampling" in result.report.check_note
    assert not leftover_nodes(result.model)
    sess = ort_session(result.model)
    outs = [o.name for o in result.model.graph.output]
    suffixes = [""] + [e["suffix"] for e in c["extra_sizes"]]
    assert len(suffixes) >= 5
    for suffix in suffixes:
        feed = {name[len("input:"):len(name) - len(suffix)]: v for name, v in data.items()
                if name.startswith("input:") and name.endswith(suffix) and ("@" in name) == bool(suffix)}
        got = sess.run(outs, feed)
        for o, g in zip(outs, got):
            want = data[f"output:{o}{suffix}"]
            if c["kind"] == "max":
                assert_bits_equal(g, want, f"{o}{suffix}")
            else:
                assert_avg_close(g, want, feed["x"], rel=2e-6)


def test_dynamic_output_dims_are_symbolic_and_downstream_value_info_not_stale():
    model = onnx.load(FIXTURES / "dynamic_avg2d.onnx")
    assert _sig(model.graph.output) == [(1, 2, 5, 7)]  # torch's traced shape
    patched = onnxpoolfix.patch(model, check=False).model
    assert _sig(patched.graph.output) == [("N", 2, 5, 7)]

    # a classifier: the pooled tensor gets symbolic value_info; a stale traced value_info downstream goes;
    # so does the traced batch of the logits torch declared [1, 5] (issue 12: onnxruntime warned at batch 2)
    model = onnx.load(FIXTURES / "dynamic_classifier.onnx")
    pool = leftover_nodes(model)[0]
    downstream = next(n for n in model.graph.node if pool.output[0] in n.input).output[0]
    model.graph.value_info.append(onnx.helper.make_tensor_value_info(downstream, TensorProto.FLOAT, [1, 4, 6, 6]))
    patched = onnxpoolfix.patch(model, check=False).model
    vi = {v.name: _dims(v.type)[1] for v in patched.graph.value_info}
    assert vi[pool.output[0]][0] == "N" and vi[pool.output[0]][1:] == (4, 6, 6)
    assert downstream not in vi
    assert _sig(patched.graph.output) == [("N", 5)]


# ---- (b) sweeps: every size 1..4x traced along each axis -------------------------------------------------

def _export_dynamic(torch, module, shape, *, opset=17):
    x = torch.randn(*shape)
    axes = {0: "N"} | {a: f"d{a}" for a in range(2, len(shape))}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          opset_version=opset, input_names=["x"], output_names=["y"], dynamic_axes={"x": axes})
    return onnx.load_from_string(f.getvalue())


SWEEPS = {
    "avg2d_5x7": ("AdaptiveAvgPool2d", (5, 7), (1, 2, 8, 9)),
    "max2d_5x7": ("AdaptiveMaxPool2d", (5, 7), (1, 2, 8, 9)),
    "avg1d_5": ("AdaptiveAvgPool1d", (5,), (1, 3, 7)),
    "max3d_2x3x2": ("AdaptiveMaxPool3d", (2, 3, 2), (1, 2, 2, 3, 3)),
    "avg3d_2x3x2": ("AdaptiveAvgPool3d", (2, 3, 2), (1, 1, 3, 2, 3)),
    # H and W pooled to the same m share one runtime construction, sliced per axis (sizes 1 included)
    "avg2d_4x4": ("AdaptiveAvgPool2d", (4, 4), (1, 2, 5, 6)),
    "avg2d_4x4_opset13": ("AdaptiveAvgPool2d", (4, 4), (1, 2, 5, 6)),  # lengths by Gather, not Shape(start)
}


@pytest.mark.parametrize("name", list(SWEEPS))
def test_dynamic_sweep_every_size(name, torch_mod):
    torch = torch_mod
    cls, size, traced = SWEEPS[name]
    module = getattr(torch.nn, cls)(size).eval()
    exported = _export_dynamic(torch, module, traced, opset=13 if name.endswith("opset13") else 17)
    model = onnxpoolfix.patch(exported, check=False).model
    assert [n.op_type for n in model.graph.node if n.op_type in ("Loop", "Scan", "Einsum")] == []
    # the onnxruntime target may guard max pooling's NaN/-inf path with an If; TensorRT gets no control flow
    trt = onnxpoolfix.patch(exported, check=False, target="tensorrt").model
    assert [n.op_type for n in trt.graph.node if n.op_type in ("Loop", "Scan", "If", "Einsum")] == []
    sess = ort_session(model)
    rng = np.random.default_rng(0)
    spatial = traced[2:]
    count = 0
    for dims in itertools.product(*[range(1, 4 * d + 1) for d in spatial]):
        batch = 2 if sum(dims) % 5 == 0 else 1  # some runs with batch 2
        x = rng.standard_normal((batch, traced[1]) + dims).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        if "max" in name:
            assert_bits_equal(got, want, f"{name} at {x.shape}")
        else:
            assert_avg_close(got, want, x, rel=2e-6)
        count += 1
    assert count == np.prod([4 * d for d in spatial])


def test_dynamic_none_axis_follows_the_input(torch_mod):
    """AdaptiveAvgPool2d((None, 7)) with dynamic H/W: the None is Shape->Gather in the graph, not frozen."""
    torch = torch_mod
    module = torch.nn.AdaptiveAvgPool2d((None, 7)).eval()
    result = onnxpoolfix.patch(_export_dynamic(torch, module, (1, 2, 8, 9)))
    assert result.report.nodes[0].lowering == "dynamic"
    sess = ort_session(result.model)
    for shape in [(1, 2, 8, 9), (2, 2, 3, 20), (1, 2, 17, 4)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        assert_avg_close(got, module(torch.from_numpy(x)).numpy(), x, rel=2e-6)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_dynamic_dtypes_pass_the_check(kind, dtype):
    model = make_leftover(kind, ("N", 2, "H", "W"), (5, 7), dtype=dtype)
    result = onnxpoolfix.patch(model)
    assert result.report.nodes[0].lowering == "dynamic"
    assert result.report.check_passed


@pytest.mark.parametrize("opset", [11, 13, 18, 21])
def test_dynamic_opsets(opset):
    for kind in ("avg", "max"):
        result = onnxpoolfix.patch(make_leftover(kind, ("N", 3, "L"), (4,), opset=opset))
        assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed
        # H and W pooled to the same size: one shared runtime construction (Where for Min below opset 12)
        result = onnxpoolfix.patch(make_leftover(kind, ("N", 2, "H", "W"), (4, 4), opset=opset))
        assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed


# ---- (c) --input-shape: a static lowering at the bound size ----------------------------------------------

def test_input_shape_binds_and_uses_a_static_lowering():
    c = _case("dynamic_avg2d")
    data = np.load(FIXTURES / c["data_file"])
    result = onnxpoolfix.patch(onnx.load(FIXTURES / c["file"]), input_shapes={"x": [1, 2, 8, 9]})
    assert result.report.nodes[0].lowering != "dynamic"
    assert result.report.check_passed
    # the static lowering holds at 8x9 only: the bound shape stays, and the note says why
    assert _sig(result.model.graph.input) == [(1, 2, 8, 9)]
    assert "kept as bound" in result.report.check_note
    got = ort_run(result.model, {"x": data["input:x"]})[0]
    assert_avg_close(got, data["output:y"], data["input:x"], rel=2e-6)


def test_input_shape_restores_the_signature_when_the_pooled_axes_are_static():
    model = make_leftover("avg", ("N", 2, 8, 9), (5, 7))
    result = onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 8, 9]})
    assert result.report.nodes[0].lowering != "dynamic"
    assert _sig(result.model.graph.input) == [("N", 2, 8, 9)]
    kept = onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 8, 9]}, keep_input_shapes=True)
    assert _sig(kept.model.graph.input) == [(1, 2, 8, 9)]


def test_cli_input_shape_and_check_shape(tmp_path):
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    src = FIXTURES / "dynamic_classifier.onnx"
    out = tmp_path / "bound.onnx"
    r = CliRunner().invoke(main, [str(src), str(out), "--input-shape", "x:1,3,20,20", "--report",
                                  str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["nodes"][0]["lowering"] != "dynamic" and rep["nodes"][0]["input_shape"] == [1, 4, 20, 20]
    out2 = tmp_path / "dyn.onnx"
    r = CliRunner().invoke(main, [str(src), str(out2), "--check-shape", "x:1,3,9,31", "--check-shape",
                                  "x:2,3,4,4", "--report", str(tmp_path / "r2.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r2.json").read_text())
    assert rep["nodes"][0]["lowering"] == "dynamic"
    assert rep["nodes"][0]["checked_shapes"] == [[1, 4, 9, 31], [2, 4, 4, 4]]


def _runs_only_at_multiples_of(step: int, kind: str = "avg") -> onnx.ModelProto:
    """x + nearest-upsampled(AveragePool k=step s=step of x) -> leftover pool: the Add fails unless H and W are
    multiples of ``step`` (an FPN/U-Net skip connection behind a stride-``step`` backbone)."""
    from onnx import helper, numpy_helper

    m = make_leftover(kind, ["N", 3, "H", "W"], (5, 7))
    pool = next(n for n in m.graph.node if n.input and n.input[0] == "x")
    pool.input[0] = "skip"
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, 1, step, step], np.float32), "scales"))
    nodes = [helper.make_node("AveragePool", ["x"], ["coarse"], kernel_shape=[step, step], strides=[step, step]),
             helper.make_node("Resize", ["coarse", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Add", ["x", "up"], ["skip"])] + list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("step", [2, 32])
def test_probe_finds_sizes_for_a_network_that_needs_a_step(step):
    """The check's sizes are multiples of the step the network needs (before: sizes aimed at exact window kinds
    failed to run and the patch stopped with 'cannot choose sizes')."""
    model = _runs_only_at_multiples_of(step)
    result = onnxpoolfix.patch(model)
    node = result.report.nodes[0]
    assert result.report.check_passed and node.lowering == "dynamic"
    assert len(node.checked_shapes) >= 3
    assert all(h % step == 0 and w % step == 0 for _, _, h, w in node.checked_shapes), node.checked_shapes
    assert any(n == 2 for n, *_ in node.checked_shapes)
    _assert_window_kinds_named_truly(result.report.check_note, node.output_shape)
    if step == 2:  # pooled lengths 2, 4, ... reach every kind for 5x7
        assert "windows: uniform, non-uniform, upsampling" in result.report.check_note


def test_check_probing_keeps_onnxruntime_quiet(tmp_path):
    """Probe runs at sizes the network cannot take fail inside onnxruntime; its error log must not reach
    stderr (-q prints nothing on success)."""
    import subprocess
    import sys

    src = tmp_path / "in.onnx"
    onnx.save(_runs_only_at_multiples_of(2), src)
    r = subprocess.run([sys.executable, "-m", "onnxpoolfix", str(src), str(tmp_path / "out.onnx"), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""


def test_probe_never_runs_a_size_too_small_for_the_network(tmp_path):
    """An AlexNet-style stack (three MaxPool 3/2) exported with dynamic H/W: at the first probe sizes a MaxPool
    sees an empty map, and onnxruntime traps with SIGFPE there instead of raising (it took the process down:
    exit 136, no message). Sizes whose inferred shapes hold an empty tensor are not run."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 8, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(8, 8, 5, padding=2),
                        nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
                        nn.AdaptiveAvgPool2d(6)).eval()
    src = tmp_path / "alexnet_like.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(1, 3, 100, 100),), str(src), dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    out = tmp_path / "out.onnx"
    r = subprocess.run([sys.executable, "-m", "onnxpoolfix", str(src), str(out), "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["check_passed"] and rep["nodes"][0]["lowering"] == "dynamic"
    sess = ort_session(onnx.load(out))
    for shape in [(1, 3, 100, 100), (2, 3, 224, 180), (1, 3, 70, 301)]:
        x = torch.randn(*shape)
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


# ---- (d) what the dynamic lowering refuses, and the planner's message -------------------------------------

def test_dynamic_check_reasons():
    dyn = BY_NAME["dynamic"]
    assert dyn.check(_spec(make_leftover("max", ("N", 2, "H", "W"), (5, 7), indices="output"))) is None  # computed
    reason = dyn.check(_spec(make_leftover("avg", ("N", 2, "H", "W"), (5, 7), opset=9)))
    assert reason == "needs opset 11 (Range) for symbolic sizes, the model has 9"
    reason = dyn.check(_spec(make_leftover("avg", ("N", 2, 8, 9), (5, 7))))
    assert reason == "every pooled axis is static (the dynamic lowering is for symbolic sizes)"
    # the static lowerings refuse symbolic axes
    spec = _spec(make_leftover("avg", ("N", 2, "H", "W"), (5, 7)))
    assert BY_NAME["matmul"].check(spec) == "a pooled axis is symbolic; this lowering needs static sizes"
    assert dyn.check(spec) is None


def test_planner_error_for_symbolic_axes_is_short_with_a_hint():
    """Symbolic pooled axes below opset 11 (no Range): one short reason, not every static lowering's."""
    with pytest.raises(UnsupportedNodeError) as e:
        onnxpoolfix.patch(make_leftover("max", ("N", 2, "H", "W"), (5, 7), indices="output", opset=10))
    msg = str(e.value)
    assert "pooled axes H->5, W->7 are symbolic" in msg
    assert "matmul:" not in msg and "pool:" not in msg  # not every static lowering's identical reason
    assert "input_shapes=" in e.value.hint and "--input-shape" not in e.value.hint  # the API's words
    # bound, the argmax lowering computes the indices; unbound, the dynamic lowering does
    result = onnxpoolfix.patch(make_leftover("max", ("N", 2, "H", "W"), (5, 7), indices="output"),
                               input_shapes={"x": [2, 2, 11, 13]})
    assert result.report.nodes[0].lowering == "argmax" and result.report.check_passed
    result = onnxpoolfix.patch(make_leftover("max", ("N", 2, "H", "W"), (5, 7), indices="output"))
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed


# ---- (e) TensorRT --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DYNAMIC_CASES)
def test_dynamic_lowering_passes_the_tensorrt_lint(name):
    model = onnx.load(FIXTURES / _case(name)["file"])
    result = onnxpoolfix.patch(model, target="tensorrt", check=False)
    assert result.report.nodes[0].lowering == _tensorrt_symbolic(result.report.nodes[0].kind)
    errors = [f for f in lint_tensorrt(result.model) if f.severity == "error"]
    assert errors == []


def _tensorrt_symbolic(kind: str) -> str:
    """The tensorrt target's lowering of a symbolic pool: averages as window Slices (no MatMul: TF32, NaN)."""
    return "dynamic" if kind == "max" else "window_slices"


@pytest.mark.parametrize("kind,shape,size", [("avg", ("N", 3, "L"), (5,)), ("max", ("N", 2, "D", "H", "W"), (2, 3, 4)),
                                             ("avg", ("N", 2, "D", "H", "W"), (2, 1, 4))])
def test_dynamic_lowering_tensorrt_lint_other_ranks(kind, shape, size):
    result = onnxpoolfix.patch(make_leftover(kind, shape, size, opset=13), target="tensorrt", check=False)
    assert result.report.nodes[0].lowering == _tensorrt_symbolic(kind)
    assert [f for f in lint_tensorrt(result.model) if f.severity == "error"] == []


@pytest.mark.parametrize("shape,size,form", [
    (("N", 2, "D", "H", "W"), (3, 5, 7), "planes"),  # D's later dims 5x7 = 35: one GEMM per plane, reshaped
    (("N", 2, "H", "W"), (5, 20), "planes"),  # H second-to-last, later 20: P @ x
    (("N", 2, "H", "W"), (5, 7), "kron"),
    (("N", 2, "H", 9), (5, 7), "kron"),  # static W inside a symbolic node: constant matrix
    (("N", 2, "H", "W"), (1, 7), "last"),  # H -> 1 is a ReduceMean
])
def test_dynamic_avg_axis_forms_pass_the_check(shape, size, form):
    from onnxpoolfix.lowering.dynamic import DynamicMatMulStep

    model = make_leftover("avg", shape, size)
    spec = _spec(model)
    (guard,) = BY_NAME["dynamic"].steps(spec)  # the NaN/inf guard around the steps
    step = next(s for s in guard.inner if isinstance(s, DynamicMatMulStep))
    assert form in step._forms(spec.input_shape)
    result = onnxpoolfix.patch(model)
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed


def test_dynamic_transpose_form_with_two_following_axes(torch_mod):
    """AdaptiveAvgPool3d((3, None, None)): D pooled, H and W symbolic and kept -> Transposes around MatMul."""
    torch = torch_mod
    module = torch.nn.AdaptiveAvgPool3d((3, None, None)).eval()
    result = onnxpoolfix.patch(_export_dynamic(torch, module, (1, 2, 5, 4, 3)))
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed
    assert "Transpose" in result.report.nodes[0].ops
    sess = ort_session(result.model)
    for shape in [(1, 2, 5, 4, 3), (2, 2, 2, 6, 7), (1, 2, 11, 3, 1)]:
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        assert_avg_close(sess.run(None, {"x": x})[0], module(torch.from_numpy(x)).numpy(), x, rel=2e-6)


def test_dynamic_max_pools_earlier_axes_before_the_last():
    """One step: the pooled axes moved in front once, H pooled first, then W (blocked Gathers, no last axis)."""
    from onnxpoolfix.lowering.dynamic_max import DynamicWindowMaxStep

    spec = _spec(make_leftover("max", ("N", 2, "H", "W"), (5, 7)))
    inner = BY_NAME["dynamic"].steps(spec)[0].inner  # wrapped by the NaN/-inf step
    [step] = [s for s in inner if isinstance(s, DynamicWindowMaxStep)]
    assert [a for a, _, _ in step.axes] == [2, 3]


@pytest.mark.parametrize("dynamic", [{0: "N"}, {0: "N", 2: "H", 3: "W"}])
def test_a_pool_of_a_pool_whose_output_declaration_is_stale(dynamic):
    """torch declares a graph output with its traced shape when dynamic_axes names only the input: the
    pools of that output read [2, 4, 11, 7] off the declaration and baked batch 2 (the max pyramid's
    branches) or 11x7 (a static lowering) into the patched model.
    It now takes the first pool's own symbolic output shape."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            feat = F.adaptive_avg_pool2d(self.conv(x), (None, 7))
            return (feat, F.adaptive_avg_pool2d(feat, (3, 3))) + tuple(F.adaptive_max_pool2d(feat, k) for k in (3, 4, 6))

    torch.manual_seed(0)
    net = Net().eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(2, 3, 11, 9),), f, dynamo=False, input_names=["x"],
                          output_names=["feat", "a", "m3", "m4", "m6"], opset_version=17, dynamic_axes={"x": dynamic},
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    model = onnx.load_from_string(f.getvalue())
    assert _dims(model.graph.output[0].type)[1] == (2, 4, 11, 7), "the stale declaration this test is about"
    result = onnxpoolfix.patch(model)
    assert result.report.check_passed
    sess = ort_session(result.model)
    sizes = [(1, 3, 11, 9), (3, 3, 11, 9)] + ([(1, 3, 20, 16), (2, 3, 5, 30)] if len(dynamic) > 1 else [])
    for shape in sizes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = [t.numpy() for t in net(x)]
        for got, w in zip(sess.run(None, {"x": x.numpy()}), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


BATCH_ZERO = {  # every form of the dynamic lowering: kron, planes (3-D: a Reshape below the leading dims), last,
    # transpose (None axes kept), max pooling's runtime windows, 1-D
    "avg2d_kron": ("AdaptiveAvgPool2d", (5, 7), (1, 2, 8, 9)),
    "avg2d_planes": ("AdaptiveAvgPool2d", (5, 20), (1, 2, 8, 21)),
    "avg3d_planes": ("AdaptiveAvgPool3d", (3, 5, 7), (1, 2, 4, 6, 9)),
    "avg3d_transpose": ("AdaptiveAvgPool3d", (3, None, None), (1, 2, 5, 4, 3)),
    "avg1d": ("AdaptiveAvgPool1d", (5,), (1, 3, 7)),
    "max2d": ("AdaptiveMaxPool2d", (5, 7), (1, 2, 8, 9)),
}


@pytest.mark.parametrize("name", list(BATCH_ZERO))
def test_dynamic_batch_zero_is_empty_like_torch(name, torch_mod):
    """A file with a dynamic batch accepts batch 0, and torch returns an empty result there: so must OUT (a
    Reshape target with a copied 0 and an inferred -1 stopped onnxruntime at batch 0). Batch 0 and batch 2
    at other sizes, against torch."""
    torch = torch_mod
    cls, size, traced = BATCH_ZERO[name]
    module = getattr(torch.nn, cls)(size).eval()
    model = onnxpoolfix.patch(_export_dynamic(torch, module, traced)).model
    sess = ort_session(model)
    rng = np.random.default_rng(3)
    for batch, grow in [(0, 0), (0, 3), (2, 1), (2, 5)]:
        shape = (batch, traced[1]) + tuple(d + grow + i for i, d in enumerate(traced[2:]))
        x = rng.standard_normal(shape).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        assert got.shape == want.shape, (shape, got.shape, want.shape)
        if batch:
            (assert_bits_equal(got, want, name) if "Max" in cls else assert_avg_close(got, want, x, rel=2e-6))

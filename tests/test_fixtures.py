"""Every shipped fixture, end to end: patch with the defaults (check on), then run the patched file in
onnxruntime on torch's own saved input(s) and compare with torch's saved output(s), at every saved size."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort
import pytest

import onnxpoolfix
from onnxpoolfix.frontends.leftovers import ATEN_DOMAIN
from onnxpoolfix.inspection.model import inspect_model

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
CASES = MANIFEST["cases"]


def _runs(case, data):
    """(feed, expected) for the traced size and every extra saved size."""
    suffixes = [""] + [e["suffix"] for e in case.get("extra_sizes") or []]
    for sfx in suffixes:
        feed = {k[len("input:"):-len(sfx) or None]: data[k] for k in data.files if k.startswith("input:") and k.endswith(sfx)
                and ("@" in k) == bool(sfx)}
        expected = {k[len("output:"):-len(sfx) or None]: data[k] for k in data.files if k.startswith("output:")
                    and k.endswith(sfx) and ("@" in k) == bool(sfx)}
        yield sfx or "traced", feed, expected


def _ort_feed(sess, feed):
    import ml_dtypes

    out = {}
    for i in sess.get_inputs():
        v = feed[i.name]
        if i.type == "tensor(bfloat16)":
            out[i.name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                v.astype(ml_dtypes.bfloat16).view(np.uint16), onnx.TensorProto.BFLOAT16)
        else:
            out[i.name] = ort.OrtValue.ortvalue_from_numpy(v)
    return out


def _bf16_outputs_as_float32(model):
    """numpy cannot read bfloat16 outputs: end the graph with exact Casts to float32 for the comparison."""
    for o in model.graph.output:
        if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
            cast = onnx.helper.make_node("Cast", [o.name], [o.name + "_f32"], to=onnx.TensorProto.FLOAT)
            model.graph.node.append(cast)
            o.name = o.name + "_f32"
            o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fixture_patches_and_matches_torch(case):
    model = onnx.load(FIXTURES / case["file"])
    result = onnxpoolfix.patch(model)
    patched, report = result.model, result.report

    assert len(report.nodes) == case["n_leftover_nodes"]
    assert report.checked and report.check_passed
    assert not any(n.domain == ATEN_DOMAIN or n.op_type == "ATen" for n in patched.graph.node)
    assert ATEN_DOMAIN not in {o.domain for o in patched.opset_import}
    onnx.checker.check_model(patched, full_check=True)
    # the graph outputs keep their names
    assert [o.name for o in patched.graph.output] == [o.name for o in model.graph.output]

    _bf16_outputs_as_float32(patched)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(patched.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rtol, atol = case["suggested_tolerance"]
    data = np.load(FIXTURES / case["data_file"])
    runs = 0
    for label, feed, expected in _runs(case, data):
        names = [o.name for o in sess.get_outputs()]
        got = dict(zip(names, (r.numpy() for r in sess.run_with_ort_values(names, _ort_feed(sess, feed)))))
        for name, want in expected.items():
            have = got.get(name, got.get(name + "_f32"))
            assert have.shape == want.shape, (label, name)
            if case["kind"] == "max" and want.dtype.kind in "iu" or case["kind"] == "max" and case["rank"] and name in {
                    p["outputs"][0] for p in case["pools"]}:
                assert np.array_equal(have.astype(want.dtype), want, equal_nan=True), (label, name)
            else:
                np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=f"{label} {name}")
        runs += 1
    assert runs == 1 + len(case.get("extra_sizes") or [])


def test_fixture_patch_is_idempotent():
    model = onnx.load(FIXTURES / "small_convnet.onnx")
    once = onnxpoolfix.patch_model(model)
    again = onnxpoolfix.patch(once)
    assert again.report.status == "nothing-to-patch"
    assert again.model.SerializeToString() == once.SerializeToString()


def test_patch_does_not_modify_its_argument():
    model = onnx.load(FIXTURES / "pyramid_pooling.onnx")
    before = model.SerializeToString()
    onnxpoolfix.patch_model(model)
    assert model.SerializeToString() == before


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "avg"][:6] + [c for c in CASES if c["kind"] == "max"],
                         ids=lambda c: c["name"])
def test_patched_graph_has_no_dead_nodes(case):
    """onnx-graphsurgeon's cleanup (the usual post-surgery pass) finds nothing left to remove: no dead
    replacement nodes, no orphaned size constants, no dangling initializers."""
    gs = pytest.importorskip("onnx_graphsurgeon")
    patched = onnxpoolfix.patch_model(onnx.load(FIXTURES / case["file"]), check=False)
    graph = gs.import_onnx(patched)
    nodes, tensors = len(graph.nodes), len(graph.tensors())
    graph.cleanup(remove_unused_graph_inputs=False)
    assert (len(graph.nodes), len(graph.tensors())) == (nodes, tensors)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("opset", [7, 8])
@pytest.mark.parametrize("shape,size", [((1, 2, 8, 9), (5, 7)), ((2, 3, 11), (4,))])
def test_old_opsets_get_a_valid_file_with_every_target(shape, size, opset, target):
    """Before opset 9 Constant takes float types only, and IR 3 lists every initializer as a graph input: OUT
    is IR 4, whose initializers hold the window tables the window sums read, and no new graph input. onnx's
    full check (which the patch's own does not run on OUT) and torch judge, a NaN and an inf included (the
    tensorrt target's MatMuls spread them: docs/targets.md)."""
    import torch
    from helpers import make_leftover

    model = make_leftover("avg", shape, size, opset=opset)
    model.ir_version = 3  # an initializer is a graph input too
    for t in model.graph.initializer:
        model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    out = onnxpoolfix.patch(model, target=target, check=False).model
    onnx.checker.check_model(out, full_check=True)
    assert [i.name for i in out.graph.input] == ["x"]  # (the size initializer's entry goes with it)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if target != "tensorrt":
        x.flat[[3, 17]] = np.nan, np.inf
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")(torch.from_numpy(x), size)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("dtype", [onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE])
@pytest.mark.parametrize("opset", [7, 8])
@pytest.mark.parametrize("shape,size", [((1, 3, 7, 7), (3, 3)), ((1, 2, 8, 9), (5, 7)), ((2, 3, 12), (4,))])
def test_max_pooling_before_opset_9_is_refused_with_the_opset_that_would_do(shape, size, opset, dtype, target):
    """MaxPool and ReduceMax drop a NaN (onnxruntime gave 1.04 where torch gives NaN) and there is no
    IsNaN/Where before opset 9 for the guard: every max lowering is refused there, naming opset 9 (11 with the
    portable target, whose guard needs Equal on floats; was: exit 0,
    'check passed', the NaN dropped). The remedy works: the same model converted to opset 9 patches exactly,
    NaN and an all -inf window included."""
    import torch
    from helpers import make_leftover

    model = make_leftover("max", shape, size, dtype=dtype, opset=opset)
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as err:
        onnxpoolfix.patch(model, target=target)
    needed = 11 if target == "portable" else 9  # (the portable guard's Equal on floats)
    assert err.value.exit_code == 4 and f"opset {needed} or newer" in err.value.hint
    assert err.value.data["opset"] == needed and err.value.data["node"] == model.graph.node[-1].name  # as data
    assert any("IsNaN" in why for why in err.value.data["reasons"].values())  # every lowering's reason
    assert inspect_model(model, target=target).exit_code == 4
    out = onnxpoolfix.patch(onnx.version_converter.convert_version(model, needed), target=target).model
    x = np.random.default_rng(1).standard_normal(shape).astype(onnx.helper.tensor_dtype_to_np_dtype(dtype))
    x.flat[5] = np.nan
    x[..., :3] = -np.inf  # the first window of every row of the first two cases only -inf
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    np.testing.assert_array_equal(got, want)

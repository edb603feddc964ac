"""Graphs the dynamo exporter wrote (torch 2.13 + onnxscript): its adaptive pooling decompositions are found,
proven and replaced (onnxpoolfix/frontends/dynamo/front_end.py). Every model here is a real ``torch.onnx.export(...,
dynamo=True)`` export, made once per module (each takes seconds); outputs are compared with torch itself."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from export_cache import dynamo_export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import ShapeError, UnsupportedNodeError
from onnxpoolfix.frontends.dynamo.front_end import find_decomposed_pools
from onnxpoolfix.graph.emit import EMITTED_BY
from onnxpoolfix.inspection.model import inspect_model


class ModulePool(nn.Module):
    def __init__(self, size=(5, 7)):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(size)

    def forward(self, x):
        return self.pool(self.conv(x))


class FunctionalPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(x), (5, 7))


class AreaInterpolate(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return F.interpolate(self.conv(x), size=(5, 7), mode="area")


class Pyramid(nn.Module):
    """PSPNet's pyramid: four pools of one map, upsampled back and concatenated."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return torch.cat([F.interpolate(F.adaptive_avg_pool2d(y, k), size=y.shape[-2:], mode="bilinear")
                          for k in (1, 2, 3, 6)], 1)


class SmallAlexNet(nn.Module):
    """torchvision's AlexNet layout (features, AdaptiveAvgPool2d((6, 6)), classifier), with few channels."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Linear(16 * 36, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _export(module, traced_hw, symbolic: bool, *, optimize: bool = True, batch: int = 1, min_hw: int = 2
            ) -> tuple[nn.Module, onnx.ModelProto]:
    """``optimize=False`` is the exporter's unoptimized graph (Constant nodes, CastLike); ``batch`` > 1 also
    makes the batch dim symbolic; ``min_hw`` is the least H and W the Dims take."""
    torch.manual_seed(0)
    module.eval()
    x = torch.randn(batch, 3, *traced_hw)
    dims = None
    if symbolic:
        dims = {"x": {2: torch.export.Dim("H", min=min_hw, max=1024), 3: torch.export.Dim("W", min=min_hw, max=1024)}}
        if batch > 1:
            dims["x"][0] = torch.export.Dim("N", min=1, max=64)
    return module, dynamo_export(module, (x,), dynamic_shapes=dims, input_names=["x"], optimize=optimize)


@pytest.fixture(scope="module")
def exports():
    """name -> (torch module, its dynamo export); made once for the whole module."""
    return {
        "module_static": _export(ModulePool(), (8, 9), False),
        "module_symbolic": _export(ModulePool(), (8, 9), True),
        "module_symbolic_unoptimized": _export(ModulePool(), (8, 9), True, optimize=False, batch=2),
        "functional_symbolic": _export(FunctionalPool(), (8, 9), True),
        "area_symbolic": _export(AreaInterpolate(), (8, 9), True),
        "pyramid_static": _export(Pyramid(), (11, 11), False),
        "avg1d_static": _export(nn.Sequential(nn.Conv1d(3, 4, 1), nn.AdaptiveAvgPool1d(5)), (8,), False),
    }


def _run(model: onnx.ModelProto, x: np.ndarray):
    """The model's output, or the string "crash" where onnxruntime fails on it."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    try:
        return sess.run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - the unpatched export crashing is one of the outcomes measured
        return "crash"


def _torch(module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def _matches(got, want) -> bool:
    return not isinstance(got, str) and got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _assert_no_dead_parts(model):
    """Nothing of a replaced region is left behind: every node's output and every initializer is read."""
    from onnxpoolfix.graph import read_names

    read = read_names(model.graph) | {o.name for o in model.graph.output}  # If branches read outer names
    assert [t.name for t in model.graph.initializer if t.name not in read] == []
    assert [n.name for n in model.graph.node if not any(o in read for o in n.output)] == []


def test_static_module_pool_is_replaced_and_matches_torch(exports):
    module, model = exports["module_static"]
    result = patch(model)
    assert [n.encoding for n in result.report.nodes] == ["dynamo"]
    assert result.report.check_passed
    assert "metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d" in result.report.check_note
    assert "GatherND" in _ops(model) and "GatherND" not in _ops(result.model)
    assert len(result.model.graph.node) < len(model.graph.node)
    _assert_no_dead_parts(result.model)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 9)).astype(np.float32)
    assert _matches(_run(result.model, x), _torch(module, x))
    onnx.checker.check_model(result.model)


def test_window_tables_in_external_data_are_read_from_the_models_folder(exports, tmp_path, monkeypatch):
    """torch.onnx.export writes the decomposition's GatherND index table (5 KB) to the .data file beside the
    model. The proof runs the region alone: its tables must resolve against the model's folder, not the
    working folder (it was left as "onnxruntime cannot run it alone", nothing patched, unless run from there)."""
    module, model = exports["module_static"]
    folder, elsewhere = tmp_path / "model", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    src = folder / "pool.onnx"
    saved = onnx.ModelProto()
    saved.CopyFrom(model)  # onnx.save_model makes the tensors it writes external in the proto itself
    onnx.save_model(saved, src, save_as_external_data=True, location="pool.onnx.data", size_threshold=1024)
    tables = {n.input[1] for n in model.graph.node if n.op_type == "GatherND"}
    on_disk = onnx.load(src, load_external_data=False).graph.initializer
    assert any(t.name in tables and t.data_location == onnx.TensorProto.EXTERNAL for t in on_disk)
    monkeypatch.chdir(elsewhere)
    runner = CliRunner()
    shown = runner.invoke(main, ["inspect", str(src)], catch_exceptions=False)
    assert shown.exit_code == 0 and "cannot run it alone" not in shown.output, shown.output
    assert "dynamo region" in shown.output
    out, report = folder / "fixed.onnx", folder / "fixed.json"
    done = runner.invoke(main, ["patch", str(src), str(out), "--report", str(report)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert [n["encoding"] for n in json.loads(report.read_text())["nodes"]] == ["dynamo"], done.output
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 9)).astype(np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert _matches(sess.run(None, {"x": x})[0], _torch(module, x))
    assert "GatherND" not in _ops(onnx.load(out))


# (8, 9) is the traced size; the others the unpatched export crashes on or gets wrong (asserted below),
# upsampling (4x3 -> 5x7, 2x2) included
SIZES = [(8, 9), (4, 3), (2, 2), (16, 17), (33, 21), (100, 3)]


@pytest.mark.parametrize("name, evidence", [
    ("module_symbolic", "metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d"),
    ("module_symbolic_unoptimized", "metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d"),
    ("functional_symbolic", "stack trace: return F.adaptive_avg_pool2d(self.conv(x), (5, 7))"),
    ("area_symbolic", "stack trace: return F.interpolate(self.conv(x), size=(5, 7), mode=\"area\")"),
])
def test_symbolic_export_is_exact_at_every_size(exports, name, evidence):
    module, model = exports[name]
    result = patch(model)
    assert [(n.encoding, n.lowering) for n in result.report.nodes] == [("dynamo", "dynamic")]
    assert evidence in result.report.check_note
    assert "GatherND" not in _ops(result.model) and len(result.model.graph.node) < len(model.graph.node)
    _assert_no_dead_parts(result.model)
    rng = np.random.default_rng(2)
    broken = 0
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_param and 3 or 1
    for hw in SIZES:
        x = rng.standard_normal((batch, 3, *hw)).astype(np.float32)
        want = _torch(module, x)
        broken += not _matches(_run(model, x), want)
        assert _matches(_run(result.model, x), want), hw
    assert broken >= 5  # the sizes do test something: the export as written fails at all but the traced one


def test_pyramid_regions_share_nodes_and_are_all_replaced(exports):
    module, model = exports["pyramid_static"]
    found = find_decomposed_pools(model, opset=20, target="onnxruntime")
    # 2x2, 3x3, 6x6 share the Transpose of the map; 1x1 is the exporter's ReduceMean, exact as it is
    assert sorted(r.output_size for r in found.regions) == [(2, 2), (3, 3), (6, 6)]
    assert all(r.evidence.startswith("stack trace:") for r in found.regions)
    result = patch(model)
    assert {n.lowering for n in result.report.nodes} == {"pyramid"}
    assert "GatherND" not in _ops(result.model) and "Gather" not in _ops(result.model)
    assert len(result.model.graph.node) < len(model.graph.node) / 2
    _assert_no_dead_parts(result.model)
    x = np.random.default_rng(3).standard_normal((1, 3, 11, 11)).astype(np.float32)
    assert _matches(_run(result.model, x), _torch(module, x))


def test_metadata_stripped_falls_back_on_structure(exports):
    module, model = exports["module_symbolic"]
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    for node in stripped.graph.node:
        del node.metadata_props[:]
    result = patch(stripped)
    assert [n.encoding for n in result.report.nodes] == ["dynamo"]
    assert "): structure; proven at" in result.report.check_note
    for hw in SIZES:
        x = np.random.default_rng(4).standard_normal((1, 3, *hw)).astype(np.float32)
        assert _matches(_run(result.model, x), _torch(module, x)), hw


def test_1d_module_pool_is_replaced(exports):
    module, model = exports["avg1d_static"]
    result = patch(model)
    assert [n.encoding for n in result.report.nodes] == ["dynamo"]
    assert "metadata: torch.nn.modules.pooling.AdaptiveAvgPool1d" in result.report.check_note
    assert "Gather" in _ops(model) and "Gather" not in _ops(result.model)
    x = np.random.default_rng(7).standard_normal((1, 3, 8)).astype(np.float32)
    assert _matches(_run(result.model, x), _torch(module, x))


def _with_a_window_count_off(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a decomposed export whose first window-count divisor is one more than it should be."""
    tampered = onnx.ModelProto()
    tampered.CopyFrom(model)
    div = next(n for n in tampered.graph.node if n.op_type == "Div")
    counts = next(t for t in tampered.graph.initializer if t.name == div.input[1])
    values = onnx.numpy_helper.to_array(counts).copy()
    values.flat[0] += 1
    counts.CopyFrom(onnx.numpy_helper.from_array(values, counts.name))
    return tampered


def test_a_region_that_does_not_prove_out_is_left_with_why(exports):
    """A region that looks like pooling but is not (its window-count divisor altered) is never replaced."""
    _, model = exports["module_static"]
    tampered = _with_a_window_count_off(model)
    result = patch(tampered)
    assert result.report.nodes == []
    assert "left the suspected region" in result.report.check_note
    assert "differs from adaptive average pooling" in result.report.check_note
    assert len(result.model.graph.node) == len(tampered.graph.node)


def test_patching_twice_finds_nothing(exports):
    _, model = exports["module_symbolic"]
    once = patch(model).model
    twice = patch(once)
    assert twice.report.nodes == [] and twice.report.check_note == "nothing to patch"


def test_inspect_shows_regions_and_evidence(exports):
    _, model = exports["area_symbolic"]
    text = inspect_model(model).format_text()
    assert "1 adaptive pooling region decomposed by the dynamo exporter" in text
    assert "mode=\"area\"" in text and "dynamic" in text


@pytest.mark.slow
def test_alexnet_traced_at_256_is_exact_at_every_size():
    module, model = _export(SmallAlexNet(), (256, 256), True)
    result = patch(model)
    assert [(n.encoding, n.lowering) for n in result.report.nodes] == [("dynamo", "dynamic")]
    assert "GatherND" not in _ops(result.model)
    rng = np.random.default_rng(5)
    broken = 0
    for hw in [(256, 256), (224, 224), (512, 384), (300, 200), (160, 160), (96, 96)]:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        want = _torch(module, x)
        broken += not _matches(_run(model, x), want)
        assert _matches(_run(result.model, x), want), hw
    assert broken >= 3


def test_a_wrong_traced_size_for_a_frozen_pool_is_contradicted_by_the_linear_after_it(tmp_path):
    """AlexNet traced at 224 given 300: the k1 pool would be sized 8x8 there (1024 features) and the Linear after
    it takes 576. The graph contradicts the given size: exit 4 before anything is built (issue 32), not an
    onnxruntime load failure of the patched file (exit 5)."""
    _, model = _export(SmallAlexNet(), (224, 224), True)
    with pytest.raises(ShapeError, match="contradicts the graph.*takes 576") as err:
        patch(model, traced_shapes={"x": [1, 3, 300, 300]})
    assert "traced_shapes" in err.value.hint
    path = tmp_path / "alexnet.onnx"
    onnx.save(model, path)
    run = CliRunner().invoke(main, [str(path), str(tmp_path / "out.onnx"), "--traced-shape", "x:1,3,300,300"])
    assert run.exit_code == 4 and "--traced-shape" in run.output and not (tmp_path / "out.onnx").exists()


def test_alexnet_traced_at_224_is_frozen_until_the_traced_size_is_bound():
    """At 224 the pool is 6 -> 6: the exporter wrote an AveragePool k1 s1, right only at the traced size."""
    module, model = _export(SmallAlexNet(), (224, 224), True)
    with pytest.raises(UnsupportedNodeError, match="frozen at its traced size") as err:
        patch(model)  # never a file that is wrong at other sizes
    assert "traced_shapes=" in err.value.hint  # the API's words; the CLI prints --traced-shape
    partial = patch(model, allow_partial=True)
    assert partial.report.nodes == [] and partial.report.summary().endswith("nothing to patch")
    assert partial.report.partial and "PARTIAL" in partial.report.summary()
    warnings = partial.report.note_lines()[0]  # printed first, marked, on stderr
    assert any(w.startswith("warning: ") and "frozen at the export's traced size" in w for w in warnings)
    traced = patch(model, traced_shapes={"x": [1, 3, 224, 224]})
    assert [(n.encoding, n.lowering) for n in traced.report.nodes] == [("dynamo", "dynamic")]
    assert "rests on the given traced size alone" in traced.report.check_note  # nothing else can confirm it
    # its kernel-1 axes: 6 (not torch's None), since the Linear after it takes 16 * 6 * 6 features
    assert "takes that size alone" in traced.report.nodes[0].evidence
    # a deployment size (--input-shape) is no traced size: the pool's output size is never read from it
    with pytest.raises(UnsupportedNodeError, match="frozen") as err:
        patch(model, input_shapes={"x": [1, 3, 224, 224]})
    assert "traced_shapes=" in err.value.hint
    rng = np.random.default_rng(6)
    for hw in [(224, 224), (256, 256), (512, 384), (300, 200), (160, 160)]:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        want = _torch(module, x)
        if hw != (224, 224):
            assert not _matches(_run(model, x), want), hw
        assert _matches(_run(traced.model, x), want), hw


def _all_float16_region():
    """A real float16 export of AdaptiveAvgPool1d(5) on length 3 (windows of 1 and 2: non-uniform), with
    the exporter's upcast around the region taken out (its Casts dropped, its float32 constants made
    float16): a region that computes in float16 itself, as another exporter version may write it. The
    real export, Casts kept, pools a float32 tensor (asserted in test_float16_export_pools_its_upcast).
    The Conv before it goes too (the input is pooled directly), so the output is the pool's alone."""
    module = nn.Sequential(nn.Conv1d(3, 4, 1), nn.AdaptiveAvgPool1d(5)).eval().to(torch.float16)
    module, model = _export_half(module, (1, 3, 3))
    drop = [n for n in model.graph.node if n.op_type in ("Cast", "Conv")]
    rename = {n.output[0]: n.input[0] for n in drop}
    keep = [n for n in model.graph.node if n.op_type not in ("Cast", "Conv")]
    for n in keep:
        n.input[:] = [rename.get(i, i) for i in n.input]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.float16), t.name))
    del model.graph.value_info[:]
    for o in model.graph.output:  # the Conv's 4 channels are gone: the pool's output has the input's 3
        o.type.tensor_type.shape.dim[1].dim_value = 3
    return module[1], model


def _export_half(module, shape):
    torch.manual_seed(0)
    return module, dynamo_export(module, (torch.randn(*shape, dtype=torch.float16),), input_names=["x"])


def test_float16_export_pools_its_upcast():
    """torch's decomposition computes a float16 pool in float32: the region pools the Cast's float32 tensor."""
    module, model = _export_half(nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d((5, 7))).eval()
                                 .to(torch.float16), (1, 3, 8, 9))
    result = patch(model)
    assert [(n.encoding, n.input_shape) for n in result.report.nodes] == [("dynamo", [1, 4, 8, 9])]
    cast = next(n for n in model.graph.node if n.op_type == "Cast")
    emitted = [n for n in result.model.graph.node if n.doc_string.startswith(EMITTED_BY)]
    assert any(cast.output[0] in n.input for n in emitted)  # the pool reads the upcast
    assert not any(cast.input[0] in n.input for n in emitted)
    assert "GatherND" not in _ops(result.model)
    x = np.random.default_rng(8).standard_normal((1, 3, 8, 9)).astype(np.float16)
    got = _run(result.model, x)
    want = _torch(module, x)
    assert got.dtype == np.float16 and np.allclose(got, want, rtol=2e-3, atol=2e-3)


def test_float16_region_is_proven_in_its_own_dtype():
    module, model = _all_float16_region()
    elems = {t.data_type for t in model.graph.initializer} - {onnx.TensorProto.INT64, onnx.TensorProto.BOOL}
    assert elems == {onnx.TensorProto.FLOAT16} and "Cast" not in _ops(model)
    result = patch(model)
    assert [(n.encoding, n.input_shape) for n in result.report.nodes] == [("dynamo", [1, 3, 1, 3])]
    assert "proven at 1x3x1x3" in result.report.check_note
    assert "GatherND" not in _ops(result.model)
    x = np.random.default_rng(9).standard_normal((1, 3, 3)).astype(np.float16)
    with torch.no_grad():  # the reference: float32, rounded once to float16
        want = module(torch.from_numpy(x).float()).half().numpy()
    got = _run(result.model, x)
    assert got.dtype == np.float16 and np.array_equal(got, want)


def test_float16_region_that_differs_is_left_with_why():
    """The same float16 region with one window's divisor changed (a window of two divided by three)."""
    _, model = _all_float16_region()
    div = next(n for n in model.graph.node if n.op_type == "Div")
    counts = next(t for t in model.graph.initializer if t.name == div.input[1])
    values = onnx.numpy_helper.to_array(counts).copy()
    values.flat[1] = np.float16(3.0)  # a window of two divided by three: not an average
    counts.CopyFrom(onnx.numpy_helper.from_array(values, counts.name))
    result = patch(model)
    assert result.report.nodes == []
    assert [s["why"].split(" (")[0] for s in result.report.suspects] == [
        "not proven: it differs from adaptive average pooling at 1x3x1x3"]


def test_report_and_inspect_json_carry_evidence_and_suspects(exports):
    _, model = exports["module_static"]
    report = patch(model).report.to_dict()
    assert [n["evidence"] for n in report["nodes"]] == ["metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d"]
    assert report["suspects"] == []
    tampered = _with_a_window_count_off(model)
    seen = inspect_model(tampered).to_dict()
    assert seen["nodes"] == []
    assert [(s["evidence"], s["frozen"]) for s in seen["suspects"]] == [
        ("metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d", False)]
    assert seen["suspects"][0]["why"].startswith("not proven: it differs from adaptive average pooling")
    text = inspect_model(model).format_text()
    assert "  evidence: metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d" in text


class AreaByScale(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=0.5, mode="area")


def test_area_interpolation_by_scale_factor_is_not_frozen_to_the_traced_output_size():
    """Traced at 12x12 the exporter writes AveragePool k2 s2 (right at every even size); its output size is
    floor(n / 2), so replacing it by an adaptive pool to the traced 6x6 would be wrong at every other size.
    H, W >= 4: torch 2.9 guards the computed size != 1, which a Dim reaching 2 or 3 refuses (a 1-wide output)."""
    module, model = _export(AreaByScale(), (12, 12), True, min_hw=4)
    assert _ops(model) == ["AveragePool"]
    with pytest.raises(UnsupportedNodeError, match="where its kernel divides the pooled size"):
        patch(model, input_shapes={"x": [1, 3, 12, 12]})  # right only at even sizes: refused
    bound = patch(model, input_shapes={"x": [1, 3, 12, 12]}, allow_partial=True)
    assert bound.report.nodes == []
    assert ["scale_factor" in s["why"] for s in bound.report.to_dict()["suspects"]] == [True]
    x = np.random.default_rng(7).standard_normal((1, 3, 20, 20)).astype(np.float32)
    assert _matches(_run(bound.model, x), _torch(module, x))


class Pool1dByModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(7)

    def forward(self, x):
        return self.pool(x)


class Pool1dByCall(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool1d(x, 7)


class Area1dByCall(nn.Module):
    def forward(self, x):
        return F.interpolate(x, size=7, mode="area")


def _export_1d(module, length: int) -> onnx.ModelProto:
    """A dynamo export of ``module`` on (1, 3, length) with L symbolic."""
    return dynamo_export(module.eval(), (torch.randn(1, 3, length),), input_names=["x"],
                         dynamic_shapes={"x": {2: torch.export.Dim("L", min=2, max=1024)}})


LENGTHS_1D = [14, 9, 15, 20, 3, 100]


@pytest.mark.parametrize("module, traced", [(Pool1dByModule(), 14), (Pool1dByModule(), 7), (Pool1dByCall(), 14),
                                            (Area1dByCall(), 14)], ids=["module-14", "module-7", "call", "area"])
def test_a_frozen_1d_average_pool_is_refused_or_made_exact(module, traced):
    """At uniform windows (14 -> 7, 7 -> 7) the exporter writes the 1D pool as Unsqueeze + AveragePool kernel
    (1, k) + Squeeze, frozen at the traced length. It was skipped (its metadata says 1D, the node pools 2 axes):
    'nothing to patch', exit 0, wrong at every other length. Now it is the 2D pool of (N, C, 1, L) to (1, 7):
    refused without a size (the module form), exact at every length with the traced one or a literal size.
    The module traced at 7 -> 7 (kernel 1) is no None either: a 1-D adaptive pool takes an int size only
    (AdaptiveAvgPool1d(None) is a TypeError in torch; review46), so the traced size gives 7 there too."""
    model = _export_1d(module, traced)
    assert "AveragePool" in _ops(model)
    x = {n: np.random.default_rng(n).standard_normal((1, 3, n)).astype(np.float32) for n in LENGTHS_1D}
    assert sum(not _matches(_run(model, x[n]), _torch(module, x[n])) for n in LENGTHS_1D) >= 4
    if isinstance(module, Pool1dByModule):
        with pytest.raises(UnsupportedNodeError, match="frozen"):
            patch(model)
        result = patch(model, traced_shapes={"x": [1, 3, traced]})
    else:
        result = patch(model)
    assert [(n.encoding, n.lowering) for n in result.report.nodes] == [("dynamo", "dynamic")]
    assert "AveragePool" not in _ops(result.model)
    for n in LENGTHS_1D:
        assert _matches(_run(result.model, x[n]), _torch(module, x[n])), n


def test_a_none_output_size_follows_the_input_and_is_exact_at_every_size():
    """AdaptiveAvgPool2d((None, 4)) under symbolic H/W: the region's H output is by declaration the input's H
    (torch's None), so it is lowered with that axis following the input, not bound to any size; the export
    as written is frozen on W (wrong where W takes other branches, e.g. 3 -> 4)."""
    module, model = _export(ModulePool((None, 4)), (11, 13), True)
    result = patch(model)
    assert [(n.encoding, n.lowering) for n in result.report.nodes] == [("dynamo", "dynamic")]
    assert "to =x4" in result.report.check_note
    rng = np.random.default_rng(9)
    broken = 0
    for hw in [(11, 13), (9, 21), (20, 6), (5, 3), (30, 5)]:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        want = _torch(module, x)
        broken += not _matches(_run(model, x), want)
        assert _matches(_run(result.model, x), want), hw
    assert broken >= 1


class PoolOfComputed(nn.Module):
    """The pooled tensor is computed on the pool's own source line: the region reaches back to x."""

    def __init__(self, crop: bool):
        super().__init__()
        self.crop = crop

    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :, 1:] if self.crop else torch.relu(x) * 2, (5, 3))


@pytest.mark.parametrize("crop,symbolic", [(False, False), (True, True)])
def test_a_pool_of_a_computed_tensor_is_replaced_from_that_tensor(crop, symbolic):
    """The largest region (from x, with the Slice or Relu and Mul) is no adaptive pool of x; the smaller one
    from the pooled tensor is, and is replaced; the ops computing that tensor stay."""
    module, model = _export(PoolOfComputed(crop), (11, 13), symbolic)
    result = patch(model)
    assert [n.encoding for n in result.report.nodes] == ["dynamo"]
    ops = _ops(result.model)
    assert "GatherND" not in ops
    assert ("Slice" in ops) if crop else ("Relu" in ops and "Mul" in ops)
    rng = np.random.default_rng(8)
    for hw in [(11, 13)] + ([(20, 20), (9, 13), (4, 30)] if symbolic else []):
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        assert _matches(_run(result.model, x), _torch(module, x)), hw


def test_the_frozen_note_does_not_ask_to_bind_sizes_already_bound():
    from onnxpoolfix.frontends.base import Suspect
    from onnxpoolfix.frontends.dynamo.front_end import region_notes
    from onnxpoolfix.words import CLI, render

    left = [Suspect("y", "structure", "under symbolic sizes, no input size found", True)]
    assert "give that size with --traced-shape" in render(region_notes([], left)[-1], CLI)
    bound = render(region_notes([], left, bound=True)[-1], CLI)
    assert "--traced-shape" not in bound and "not proven at the given traced size" in bound

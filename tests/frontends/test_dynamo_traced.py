"""Dynamo exports with symbolic H/W traced at NON-SQUARE sizes (issue 21, 22.1): exact at every size, or
refused (exit 4) naming --traced-shape; never a file that is silently wrong. Real torch 2.13
``torch.onnx.export(..., dynamo=True)`` exports of small modules, made once per module; every OUT is
compared with torch at sizes other than the traced one (odd, non-square)."""
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

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import ShapeError, UnsupportedNodeError
from onnxpoolfix.inspection.model import inspect_model


class AreaPyramid(nn.Module):
    """PSPNet's pyramid through F.interpolate(mode="area", size=...): traced at 12x14 the 2x2 level divides
    (a frozen AveragePool k6x7), the 3x3 and 6x6 levels are decompositions, the 1x1 a ReduceMean."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        levels = [F.interpolate(y, size=(k, k), mode="area") for k in (1, 2, 3, 6)]  # k: bound on the line
        return torch.cat([F.interpolate(v, size=y.shape[-2:], mode="nearest") for v in levels], 1)


class AreaPyramidCut(AreaPyramid):
    """The same, its comprehension's ``for k in ...`` on the statement's second line: the stack trace holds the
    first line alone, where ``k`` may hold anything (a size computed from the input reads the same)."""

    def forward(self, x):
        y = self.conv(x)
        return torch.cat([F.interpolate(F.interpolate(y, size=(k, k), mode="area"), size=y.shape[-2:],
                                        mode="nearest") for k in (1, 2, 3, 6)], 1)


class PPM(nn.Module):
    """UPerNet's pyramid pooling module on a stride-2 map (traced 20x26 -> a 10x13 map)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.pools = nn.ModuleList([nn.AdaptiveAvgPool2d(k) for k in (1, 2, 3, 6)])

    def forward(self, x):
        y = self.conv(x)
        return torch.cat([y] + [F.interpolate(p(y), size=y.shape[-2:], mode="bilinear") for p in self.pools], 1)


class Attention(nn.Module):
    """A PVT-style attention block: keys/values from the token map reshaped and pooled by AdaptiveAvgPool2d(7)."""

    def __init__(self, c=8):
        super().__init__()
        self.embed = nn.Conv2d(3, c, 4, stride=4)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.q, self.kv = nn.Linear(c, c), nn.Linear(c, 2 * c)

    def forward(self, x):
        t = self.embed(x)
        b, c, h, w = t.shape
        tokens = t.flatten(2).transpose(1, 2)
        reduced = self.pool(tokens.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        k, v = self.kv(reduced).chunk(2, -1)
        a = (self.q(tokens) @ k.transpose(1, 2)).softmax(-1)
        return (a @ v).transpose(1, 2).reshape(b, c, h, w)


class AvgPoolBeside(nn.Module):
    """A genuine nn.AvgPool2d(2) of the tensor an AdaptiveAvgPool2d(3) pools: right at every size as written."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.avg, self.adaptive = nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(3)

    def forward(self, x):
        y = self.conv(x)
        return self.avg(y).sum((2, 3)) + self.adaptive(y).sum((2, 3))


class NoneOne(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (None, 1))


class Literal(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 7))


TRACED = {"pyramid": (12, 14), "pyramid_cut": (12, 14), "ppm": (20, 26), "attention": (80, 64), "none_one": (16, 12), "literal": (12, 14),
          "avg_beside": (12, 14)}
#: sizes beside the traced one, odd and non-square (the attention's 56x72 makes a 14x18 map: 7 divides 14)
SIZES = {"pyramid": [(16, 16), (24, 20), (13, 17), (36, 28)], "ppm": [(16, 16), (24, 20), (26, 34), (37, 29)],
         "attention": [(64, 64), (96, 72), (56, 72), (112, 84)], "none_one": [(9, 13), (20, 7), (5, 5)],
         "literal": [(9, 13), (20, 7), (30, 31)], "avg_beside": [(9, 13), (20, 7), (31, 30)]}


def _export(module, hw) -> tuple[nn.Module, onnx.ModelProto]:
    return module, export_symbolic_hw(module, hw)


@pytest.fixture(scope="module")
def exports():
    made = {"pyramid": AreaPyramid(), "ppm": PPM(), "attention": Attention(), "none_one": NoneOne(),
            "literal": Literal(), "avg_beside": AvgPoolBeside(), "pyramid_cut": AreaPyramidCut()}
    return {name: _export(m, TRACED[name]) for name, m in made.items()}


def _stripped(model: onnx.ModelProto, value_info: bool = False) -> onnx.ModelProto:
    """What onnxslim leaves of the metadata (it drops every node's metadata_props); ``value_info``: the
    declared intermediate shapes (the dim expressions the per-axis search reads) gone as well."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for n in out.graph.node:
        del n.metadata_props[:]
    if value_info:
        del out.graph.value_info[:]
    return out


def _traced(name: str) -> dict:
    return {"x": [1, 3, *TRACED[name]]}


def _errors(module, model: onnx.ModelProto, sizes, relative: bool = False) -> dict:
    return errors_vs_torch(module, model, sizes, seed=3, relative=relative)


def _assert_exact(module, model, name):
    """Within float32 rounding of the output's scale at the traced size and at every other one."""
    errs = _errors(module, model, [TRACED[name], *SIZES[name]], relative=True)
    assert all(e < 1e-5 for e in errs.values()), errs


def _symbolic_dims(model) -> list:
    return [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim if d.dim_param]


# --------------------------------------------------------------------------------- refused, never wrong

def test_pyramid_with_a_frozen_level_is_refused_naming_the_traced_shape(exports):
    module, model = exports["pyramid"]
    assert max(_errors(module, model, SIZES["pyramid"]).values()) > 1e-3  # the export as written is wrong there
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model)
    assert err.value.exit_code == 4 and "'avg_pool2d'" in str(err.value) and "frozen" in str(err.value)
    assert "traced_shapes=" in err.value.hint and "onnxpoolfix.export" in err.value.hint  # the API's words
    seen = inspect_model(model)  # the same verdict, the same line
    assert seen.exit_code == 4 and seen.blocker == str(err.value)


def test_a_size_the_line_does_not_show_is_refused_even_at_the_traced_size(exports):
    """review12: a name the visible line does not bind may hold a size computed from the input; n / kernel at the
    traced size was taken as its value, exit 0, and OUT wrong wherever the size follows the input."""
    _, model = exports["pyramid_cut"]
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model, traced_shapes=_traced("pyramid_cut"))
    assert err.value.exit_code == 4 and "'avg_pool2d'" in str(err.value)
    # (its 1x1 bin, a global mean of a size the line computes, is one of the refused: review44 F1)
    assert "onnxpoolfix.export" in err.value.hint and "traced_shapes=" not in err.value.hint


def test_cli_refuses_writes_nothing_and_inspect_agrees(exports, tmp_path):
    _, model = exports["pyramid"]
    src, out, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "-q", "--report", str(report)])
    assert r.exit_code == 4, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("onnxpoolfix: error: ") and "--traced-shape" in lines[1]
    assert not out.exists() and not report.exists()
    assert CliRunner().invoke(main, ["inspect", str(src)]).exit_code == 4


def test_allow_partial_writes_the_fix_and_says_where_out_is_right(exports, tmp_path):
    _, model = exports["pyramid"]
    src, out, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--allow-partial", "--report", str(report)])
    assert r.exit_code == 0, r.output
    data = json.loads(report.read_text())
    assert [p.startswith("'avg_pool2d' left frozen: OUT is right only") for p in data["partial"]] == [True]
    assert "PARTIAL fix" in r.stdout
    assert CliRunner().invoke(main, ["inspect", str(src), "--allow-partial"]).exit_code == 0


@pytest.mark.parametrize("value_info", [False, True], ids=["metadata", "metadata and value_info"])
def test_stripped_pyramid_is_refused_even_with_the_traced_shape(exports, value_info):
    """Without metadata the frozen AveragePool level (k6x7) cannot be told from a genuine nn.AvgPool2d((6, 7))
    of the same map (issue 32: onnxslim after the exporter), whatever size is given: refused, naming the metadata;
    the decomposed levels still prove, so --allow-partial patches them and leaves that one."""
    module, model = exports["pyramid"]
    model = _stripped(model, value_info=value_info)
    for kwargs in ({}, {"traced_shapes": _traced("pyramid")}):
        with pytest.raises(UnsupportedNodeError, match="avg_pool2d") as err:
            patch(model, **kwargs)
        assert "metadata" in err.value.hint and "onnxpoolfix.export" in err.value.hint
    partial = patch(model, traced_shapes=_traced("pyramid"), allow_partial=True)
    assert sorted(n.lowering for n in partial.report.nodes) == ["dynamic"] * 2 and len(partial.report.partial) == 1


# --------------------------------------------------------------------------------- --traced-shape

def test_traced_shape_makes_the_pyramid_exact_at_every_size_keeping_symbolic_dims(exports):
    module, model = exports["pyramid"]
    result = patch(model, traced_shapes=_traced("pyramid"))
    assert sorted(n.lowering for n in result.report.nodes) == ["dynamic"] * 3
    assert _symbolic_dims(result.model) == ["H", "W"] and result.report.partial == []
    _assert_exact(module, result.model, "pyramid")


def test_a_wrong_traced_shape_is_contradicted_by_the_graph(exports):
    _, model = exports["pyramid"]
    with pytest.raises(ShapeError) as err:
        patch(model, traced_shapes={"x": [1, 3, 16, 16]})
    assert "contradicts the graph" in str(err.value) and "sizes such as x:1,3," in err.value.hint
    with pytest.raises(ShapeError, match="contradicts"):  # --input-shape, the old hint's way, too
        patch(model, input_shapes={"x": [1, 3, 16, 16]})
    seen = inspect_model(model, traced_shapes={"x": [1, 3, 16, 16]})
    assert seen.exit_code == 4 and seen.blocker == str(err.value)


@pytest.mark.parametrize("name", ["ppm", "attention"])
def test_module_pools_are_exact_with_and_without_the_traced_shape(exports, name):
    """Every region proves at some non-square size the per-axis search finds: no option needed."""
    module, model = exports[name]
    assert max(_errors(module, model, SIZES[name]).values()) > 1e-4  # the export as written is not exact
    for kwargs in ({}, {"traced_shapes": _traced(name)}):
        result = patch(model, **kwargs)
        assert result.report.nodes and {n.lowering for n in result.report.nodes} == {"dynamic"}
        assert _symbolic_dims(result.model) == ["H", "W"]
        _assert_exact(module, result.model, name)


def test_stripped_ppm_is_exact(exports):
    module, model = exports["ppm"]
    _assert_exact(module, patch(_stripped(model)).model, "ppm")


# --------------------------------------------------------------------------------- 22.1: the source line's size

def test_none_output_size_follows_the_input_and_the_traced_size_binds_nothing(exports):
    """F.adaptive_avg_pool2d(x, (None, 1)): an AveragePool k1x16 frozen at the traced width; its H follows the
    input (the source line's None), whatever size is traced. --input-shape binds OUT there (review61, as for a
    leftover: its pooled axes were symbolic), exact at that size."""
    module, model = exports["none_one"]
    assert max(_errors(module, model, SIZES["none_one"]).values()) > 1e-3
    for kwargs in ({}, {"input_shapes": _traced("none_one")}, {"traced_shapes": _traced("none_one")}):
        result = patch(model, **kwargs)
        assert [n.lowering for n in result.report.nodes] == ["global"], kwargs  # H follows, W to 1: a reduce
        if "input_shapes" in kwargs:
            assert [d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim] == _traced(
                "none_one")["x"] and "input-shapes-kept" in [n.code for n in result.report.notes]
            errs = _errors(module, result.model, [TRACED["none_one"]], relative=True)
            assert all(e < 1e-5 for e in errs.values()), errs
        else:
            _assert_exact(module, result.model, "none_one")


def test_literal_output_size_needs_no_traced_shape_and_refuses_a_contradicting_one(exports):
    module, model = exports["literal"]
    _assert_exact(module, patch(model).model, "literal")
    with pytest.raises(ShapeError, match="none of its readings has there: adaptive pool to \\(4, 7\\)"):
        patch(model, traced_shapes={"x": [1, 3, 24, 28]})  # k3x2 at 24x28 pools to 8x14, the line says (4, 7)


class Stride32(nn.Module):
    """A stride-32 encoder whose output is added back at full size (it runs only at multiples of 32), and an
    AdaptiveAvgPool2d(3) of its map; exported with Dim expressions 32*h, 32*w (torch names the map's size
    anew: no expression ties it to h, w)."""

    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(*[nn.Conv2d(3 if i == 0 else 4, 4, 3, stride=2, padding=1) for i in range(5)])
        self.pool = nn.AdaptiveAvgPool2d(3)

    def forward(self, x):
        y = self.down(x)
        return x[:, :1] + F.interpolate(y, scale_factor=32.0, mode="nearest")[:, :1], self.pool(y)


@pytest.mark.slow
def test_stride_32_export_with_dim_expressions_is_exact_and_checked_at_multiples():
    torch.manual_seed(0)
    module = Stride32().eval()
    h, w = torch.export.Dim("h", min=1, max=32), torch.export.Dim("w", min=1, max=32)
    model = dynamo_export(module, (torch.randn(1, 3, 160, 224),), input_names=["x"],
                          dynamic_shapes={"x": {2: 32 * h, 3: 32 * w}})
    so = ort.SessionOptions()
    so.log_severity_level = 4
    rng = np.random.default_rng(4)
    # no option: the map's size is no expression of h, w, so the search binds the whole model (7x7 proves it);
    # the traced size proves it at 5x7
    for kwargs in ({}, {"traced_shapes": {"x": [1, 3, 160, 224]}}):
        result = patch(model, **kwargs)
        assert "sizes multiples of 32" in result.report.check_note
        sess = ort.InferenceSession(result.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for hw in [(160, 224), (96, 320), (224, 160), (288, 352)]:
            x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
            with torch.no_grad():
                want = module(torch.from_numpy(x))[1].numpy()
            np.testing.assert_allclose(sess.run(None, {"x": x})[1], want, rtol=1e-5, atol=1e-5, err_msg=str(hw))


def test_a_genuine_avg_pool_beside_an_adaptive_one_stays_as_it_is(exports):
    """nn.AvgPool2d(2) is no frozen adaptive pool (its metadata says so), though it pools what a decomposed
    AdaptiveAvgPool2d(3) pools: it stays an AveragePool, with or without the traced size."""
    module, model = exports["avg_beside"]
    for kwargs in ({}, {"traced_shapes": _traced("avg_beside")}):
        result = patch(model, **kwargs)
        assert [n.lowering for n in result.report.nodes] == ["dynamic"]
        assert [n.op_type for n in result.model.graph.node].count("AveragePool") == 1
        _assert_exact(module, result.model, "avg_beside")

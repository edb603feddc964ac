"""Frozen pools whose reading could be wrong (issue 32): every file either patches exact at every size (compared
with torch at sizes other than the traced one: odd, non-square) or is refused with nothing written and a hint
that leads to an exact file. Real torch 2.13 dynamo exports with symbolic H/W, made once per module."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import ShapeError, UnsupportedNodeError
from onnxpoolfix.frontends.dynamo import frozen as dynamo_frozen


class _Conv(nn.Module):
    def __init__(self, cin=3):
        super().__init__()
        self.c = nn.Conv2d(cin, 4, 3, padding=1)


class GenuineBesideAdaptive(_Conv):
    """Case 1: a genuine k2 pool and an adaptive 4x4 one on one line; traced at 16x16 both are AveragePools."""

    def forward(self, x):
        f = self.c(x); s = f.shape[-2:]  # noqa: E702 - several statements on one line, as real code has
        return F.interpolate(F.avg_pool2d(f, 2), size=s) + F.interpolate(F.adaptive_avg_pool2d(f, (4, 4)), size=s)


class Comment(_Conv):
    """Case 3: a comment that names an adaptive pool is no evidence."""

    def forward(self, x):
        f = self.c(x)
        y = F.avg_pool2d(f, 4)  # same as F.adaptive_avg_pool2d(f, (4, 4)) at 16x16
        return y


class TwoSizes(_Conv):
    """Case 4: two adaptive calls on one line, traced at 16x24: K = (8, 12) and (4, 6), each fits either call."""

    def forward(self, x):
        f = self.c(x)
        return F.adaptive_avg_pool2d(f, (2, 2)).sum((2, 3)) + F.adaptive_avg_pool2d(f, 4).sum((2, 3))


class ModulePool(_Conv):
    """nn.AdaptiveAvgPool2d(size): the output size is nowhere in the file (the line is torch's own)."""

    def __init__(self, size):
        super().__init__()
        self.p = nn.AdaptiveAvgPool2d(size)

    def forward(self, x):
        return self.p(self.c(x))


class WrittenNone(_Conv):
    """A written None follows the input, whatever the traced size."""

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.c(x), (2, None))


class SequentialPools(_Conv):
    """nn.Sequential(nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(3)): the first a genuine module, the second frozen."""

    def __init__(self):
        super().__init__()
        self.pools = nn.Sequential(nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(3))

    def forward(self, x):
        return self.pools(self.c(x))


def _downsample(f):  # a helper function holding the pool: the trace keeps only its caller's line
    return F.adaptive_avg_pool2d(f, 3)


class Helper(_Conv):
    def forward(self, x):
        return _downsample(self.c(x))


class Lambda(_Conv):
    def forward(self, x):
        return (lambda t: F.adaptive_avg_pool2d(t, 3))(self.c(x))


class MaxBesideAdaptiveMax(_Conv):
    """A genuine max pool and an adaptive one on one line: frozen MaxPools k2 and k4 at 16x16."""

    def forward(self, x):
        f = self.c(x)
        return F.max_pool2d(f, 2).sum((2, 3)) + F.adaptive_max_pool2d(f, 4).sum((2, 3))


class Cond(_Conv):
    """Case 6: the pool inside torch.cond's branches (the exporter writes an If)."""

    def forward(self, x):
        y = self.c(x)
        return torch.cond(y.sum() > 0, lambda t: F.adaptive_avg_pool2d(t, (5, 7)),
                          lambda t: F.adaptive_avg_pool2d(t * 2, (5, 7)), (y,))


class MethodHelper(_Conv):
    """A genuine pool in a method of the module beside an adaptive call: the exporter records module frames only,
    so the pool's trace ends at ``self._pool(f)``; read as the adaptive call it was exit 0 and wrong at 32x32."""

    def _pool(self, f):
        return F.avg_pool2d(f, 4)

    def forward(self, x):
        f = self.c(x); s = f.shape[-2:]  # noqa: E702
        return F.interpolate(self._pool(f), size=s) + F.interpolate(F.adaptive_avg_pool2d(f, (4, 4)), size=s)


class InceptionLike(_Conv):
    """timm's Inception blocks: pools in ``_forward`` (trace ends at ``outputs = self._forward(x)``), MaxPool(3,
    stride 2) and an AvgPool with padding; no adaptive pool can freeze to kernel != stride or padding."""

    def __init__(self):
        super().__init__()
        self.head = nn.AdaptiveAvgPool2d(1)

    def _forward(self, f):
        return [F.max_pool2d(f, kernel_size=3, stride=2), F.avg_pool2d(f, 3, stride=1, padding=1)]

    def forward(self, x):
        outputs = self._forward(self.c(x))
        return self.head(outputs[0]) + self.head(outputs[1])


class SubmoduleOnLine(_Conv):
    """A submodule's call on the pool's line is no helper: its nodes carry their own scope."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.proj(F.adaptive_avg_pool2d(self.c(x), (2, 2)))


TRACED = {"genuine_beside": (16, 16), "comment": (16, 16), "two_sizes": (16, 24), "module_5x7": (10, 14),
          "crnn": (32, 100), "none_4": (12, 8), "written_none": (32, 20), "sequential": (12, 18),
          "helper": (12, 9), "lambda": (12, 9), "max_beside": (16, 16), "cond": (12, 13), "method": (16, 16),
          "inception": (17, 15), "submodule": (16, 16)}
MODULES = {"genuine_beside": GenuineBesideAdaptive, "comment": Comment, "two_sizes": TwoSizes,
           "module_5x7": lambda: ModulePool((5, 7)), "crnn": lambda: ModulePool((1, None)),
           "none_4": lambda: ModulePool((None, 4)), "written_none": WrittenNone, "sequential": SequentialPools,
           "helper": Helper, "lambda": Lambda, "max_beside": MaxBesideAdaptiveMax, "cond": Cond,
           "method": MethodHelper, "inception": InceptionLike, "submodule": SubmoduleOnLine}
#: sizes other than the traced one: odd, non-square, and one the windows of the traced branch do not take
SIZES = [(9, 13), (20, 7), (31, 30), (24, 40)]


@pytest.fixture(scope="module")
def exports():
    class Exports(dict):
        """Each module exported when a test first reads it: where a torch cannot export one (adaptive max pooling
        before torch 2.13), only the tests of that module skip, not every test of the file."""

        def __missing__(self, name):
            torch.manual_seed(0)
            module = MODULES[name]().eval()
            self[name] = module, export_symbolic_hw(module, TRACED[name])
            return self[name]

    return Exports()


def _traced(name):
    return {"x": [1, 3, *TRACED[name]]}


def _assert_exact(module, model, name):
    errs = errors_vs_torch(module, model, [TRACED[name], *SIZES], seed=5, relative=True)
    assert all(e < 1e-5 for e in errs.values()), errs


def _refused(model, **kwargs) -> UnsupportedNodeError:
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model, **kwargs)
    assert err.value.exit_code == 4
    return err.value


# ------------------------------------------------------------------------------- one reading left: exact

@pytest.mark.parametrize("name", ["genuine_beside", "two_sizes", "written_none", "max_beside", "submodule"])
def test_the_line_decides_without_options_and_the_traced_size_agrees(exports, name):
    """Each call on the line is a candidate with its literal arguments; nodes of one tensor saw one size at the
    export, so only one assignment of calls to nodes is left. The genuine pool stays an AveragePool/MaxPool."""
    module, model = exports[name]
    assert max(errors_vs_torch(module, model, SIZES, seed=5).values()) > 1e-3  # the export as written is wrong
    for kwargs in ({}, {"traced_shapes": _traced(name)}):
        result = patch(model, **kwargs)
        assert result.report.nodes and {n.lowering for n in result.report.nodes} == {"dynamic"}
        _assert_exact(module, result.model, name)
    genuine = {"genuine_beside": "AveragePool", "max_beside": "MaxPool"}.get(name)
    if genuine:  # the genuine pool is left as the exporter wrote it
        assert [n.op_type for n in result.model.graph.node].count(genuine) >= 1


@pytest.mark.parametrize("name", ["comment"])
def test_a_comment_is_no_evidence(exports, name):
    module, model = exports[name]
    for kwargs in ({}, {"traced_shapes": _traced(name)}):
        result = patch(model, **kwargs)
        assert result.report.nodes == []  # F.avg_pool2d(f, 4) is what it says
        _assert_exact(module, result.model, name)


def test_a_wrong_traced_shape_is_contradicted_by_the_written_sizes(exports):
    """Case 4: 32x48 given for a file traced at 16x24 would size the pools 4x4 and 8x8."""
    _, model = exports["two_sizes"]
    with pytest.raises(ShapeError, match="contradicts the graph"):
        patch(model, traced_shapes={"x": [1, 3, 32, 48]})


def test_a_deployment_size_is_no_traced_size(exports):
    """Case 4: nn.AdaptiveAvgPool2d((5, 7)) traced at 10x14 (a k2 pool) with --input-shape 20x28 (a deployment size)
    was sized 10x14. The input shape never sizes a frozen pool: refused naming --traced-shape; exact with it."""
    module, model = exports["module_5x7"]
    err = _refused(model, input_shapes={"x": [1, 3, 20, 28]})
    assert "traced_shapes=" in err.hint and "did not prove" not in err.hint
    result = patch(model, traced_shapes=_traced("module_5x7"))
    assert [n.rests_on_traced_shape for n in result.report.nodes] == [True]
    assert result.report.summary().startswith("OUT rests on the given traced size for 1 pool")
    _assert_exact(module, result.model, "module_5x7")


# ------------------------------------------------------------------------------- two readings: refused

@pytest.mark.parametrize("name", ["crnn", "none_4"])
def test_a_kernel_1_axis_of_a_module_pool_is_refused_even_with_the_traced_size(exports, name, tmp_path):
    """Case 2: AdaptiveAvgPool2d((1, None)) over a dynamic width froze the width axis to kernel 1: torch's None or
    the traced width, which differ at every other width. Following the old hint gave 50 time steps at any width.
    A refusal naming onnxpoolfix.export (which keeps the output size), with nothing written; without the traced
    size as well (its hint once sent the user to --traced-shape, which then could not decide it)."""
    _, model = exports[name]
    for kwargs in ({}, {"traced_shapes": _traced(name)}):  # the first hint too: no traced size would decide it
        err = _refused(model, **kwargs)
        assert "torch's None" in err.hint and "onnxpoolfix.export" in err.hint and "traced_shapes" not in err.hint
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    h, w = TRACED[name]
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", f"x:1,3,{h},{w}"])
    assert r.exit_code == 4 and not out.exists() and "onnxpoolfix.export" in r.stderr


def test_pools_that_no_adaptive_pool_freezes_to_stay_as_written(exports):
    """MaxPool(3, stride 2) and a padded AvgPool under a method's call: no reading but genuine (torch freezes an
    adaptive pool only to kernel = stride, unpadded), so the file needs nothing and is exact as written."""
    module, model = exports["inception"]
    for kwargs in ({}, {"traced_shapes": _traced("inception")}):
        result = patch(model, **kwargs)
        assert result.report.nodes == [] and not result.report.partial
        _assert_exact(module, result.model, "inception")


@pytest.mark.parametrize("name", ["helper", "lambda", "method"])
def test_a_call_that_may_hide_a_pool_is_refused(exports, name):
    _, model = exports[name]
    for kwargs in ({}, {"traced_shapes": _traced(name)}):
        err = _refused(model, **kwargs)
    assert "may hold a pool" in err.hint and "onnxpoolfix.export" in err.hint


def test_nn_sequential_of_pools_keeps_the_genuine_module_and_sizes_the_adaptive_one_from_the_traced_size(exports):
    module, model = exports["sequential"]
    err = _refused(model)
    assert "traced_shapes=" in err.hint
    result = patch(model, traced_shapes=_traced("sequential"))
    assert len(result.report.nodes) == 1 and [n.op_type for n in result.model.graph.node].count("AveragePool") == 1
    _assert_exact(module, result.model, "sequential")


def test_pools_inside_torch_cond_are_refused_not_nothing_to_patch(exports):
    """Case 6: the If's branches hold the frozen decomposition; the file as written is wrong at other sizes."""
    module, model = exports["cond"]
    assert "If" in {n.op_type for n in model.graph.node}
    for kwargs in ({}, {"traced_shapes": _traced("cond")}):
        err = _refused(model, **kwargs)
    assert "torch.cond" in err.hint and "onnxpoolfix.export" in err.hint
    assert patch(model, allow_partial=True).report.partial


# ------------------------------------------------------------------------------- stripped by a simplifier

def _simplified(model, tool: str) -> onnx.ModelProto:
    if tool == "onnxslim":
        onnxslim = pytest.importorskip("onnxslim")
        return onnxslim.slim(model)
    onnxsim = pytest.importorskip("onnxsim")
    simplified, ok = onnxsim.simplify(model)
    assert ok
    return simplified


@pytest.mark.parametrize("tool", ["onnxslim", "onnxsim"])
@pytest.mark.parametrize("name", ["module_5x7", "comment", "genuine_beside"])
def test_a_simplified_file_is_refused_where_its_frozen_pools_cannot_be_told_from_genuine_ones(exports, tool, name):
    """Case 5: the simplifiers drop the exporter's metadata; a frozen adaptive pool and a genuine one are then the
    same node, whatever size is given. Refused, naming the file the exporter wrote."""
    _, model = exports[name]
    simplified = _simplified(model, tool)
    assert not any(p.key.startswith("pkg.torch") for n in simplified.graph.node for p in n.metadata_props)
    for kwargs in ({}, {"traced_shapes": _traced(name)}):
        err = _refused(simplified, **kwargs)
    assert "metadata" in err.hint and "onnxpoolfix.export" in err.hint


# ------------------------------------------------------------------------------- the differential check

def test_the_differential_check_catches_a_misread_pool_the_node_check_cannot(exports, monkeypatch):
    """Break the reading on purpose (every frozen node read as the adaptive call, the old behaviour): the node
    check proves the lowering against that reading and passes; OUT against the original at the traced size
    does not."""
    _, model = exports["genuine_beside"]

    def adaptive_only(node, readings, traced):
        return [r for r in readings if r.what == "adaptive pool"] or readings

    monkeypatch.setattr(dynamo_frozen, "at_traced", adaptive_only)
    with pytest.raises(ShapeError, match="differs from the original file at the given traced size x:1,3,16,16") as err:
        patch(model, traced_shapes=_traced("genuine_beside"))
    assert err.value.exit_code == 4 and "misread" in err.value.hint


# ------------------------------------------------------------------------------- the hint's way out is exact

@pytest.mark.parametrize("name", ["crnn", "cond"])
def test_the_refusals_way_out_onnxpoolfix_export_is_exact(name, tmp_path):
    """The refusals above name onnxpoolfix.export: it keeps every adaptive pool (the If's branches too), and its
    file is exact at every size, both branches of the If (the branch's own torch ops as the reference: torch.cond
    does not run eagerly here)."""
    import numpy as np
    import onnxruntime as ort

    import onnxpoolfix

    torch.manual_seed(0)
    module = MODULES[name]().eval()
    dims = {"x": {2: torch.export.Dim("H", min=4, max=256), 3: torch.export.Dim("W", min=4, max=256)}}
    path = tmp_path / "out.onnx"
    onnxpoolfix.export(module, (torch.randn(1, 3, *TRACED[name]),), str(path), dynamic_shapes=dims, input_names=["x"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    for hw in SIZES:
        for sign in (1.0, -1.0):  # both branches of the If
            x = torch.from_numpy(rng.standard_normal((1, 3, *hw)).astype(np.float32)) * sign
            with torch.no_grad():
                if name == "cond":
                    y = module.c(x)
                    want = F.adaptive_avg_pool2d(y if y.sum() > 0 else y * 2, (5, 7))
                else:
                    want = module(x)
            (got,) = session.run(None, {"x": x.numpy()})
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{hw} {sign}")

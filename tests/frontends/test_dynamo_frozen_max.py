"""Dynamo exports of adaptive MAX pooling with symbolic H/W. torch 2.13 exports adaptive_max_pool*d only where
the windows are uniform at the traced size, as a MaxPool whose kernel and strides are frozen there (timm's
BatNonLocalAttn: F.adaptive_max_pool2d(out, (self.block_size, 1))). Such a file used to be "nothing to patch",
exit 0, and wrong or crashing at every other size; now it is replaced like a frozen AveragePool (the size
from the source line, or from --traced-shape), or refused. Every OUT is compared with torch at sizes other
than the traced one."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.cli import main
from onnxpoolfix.errors import UnsupportedNodeError

pytestmark = pytest.mark.torch


class Literal(nn.Module):
    """The size written out on the source line: (4, 1) of a 16x8 map at the traced 18x10 (k4x8)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return F.adaptive_max_pool2d(self.conv(x), (4, 1))


class Module(nn.Module):
    """A module call: only the traced size gives its output size (16x8 -> 4x2 at 18x10: k4x4)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveMaxPool2d((4, 2))

    def forward(self, x):
        return self.pool(self.conv(x))


class Bat(nn.Module):
    """timm's BilinearAttnTransform pooling: rows and columns to block_size, a size the line reads from self."""

    def __init__(self, block_size=4):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.block_size = block_size

    def forward(self, x):
        out = self.conv(x)
        rp = F.adaptive_max_pool2d(out, (self.block_size, 1))
        cp = F.adaptive_max_pool2d(out, (1, self.block_size))
        return rp.sum((2, 3)) + cp.sum((2, 3)) + rp.amax((2, 3)) * cp.amin((2, 3))


class OneD(nn.Module):
    def forward(self, x):
        return F.adaptive_max_pool1d(x[:, :, 0], 5)  # W 10 -> 5 at the traced size: k2


class Indices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        v, i = F.adaptive_max_pool2d(self.conv(x), (4, 2), return_indices=True)
        return v, i


class Genuine(nn.Module):
    """nn.MaxPool2d(2) is what it says at every size: it stays."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool, self.adaptive = nn.MaxPool2d(2), nn.AdaptiveMaxPool2d((4, 2))

    def forward(self, x):
        y = self.conv(x)
        return self.pool(y).sum((2, 3)) + self.adaptive(y).sum((2, 3))


TRACED = (18, 10)
SIZES = [(22, 13), (20, 12), (31, 40), (9, 11)]  # 20x12: same shapes as traced with frozen k4x8, other windows


def _export(module) -> onnx.ModelProto:
    return export_symbolic_hw(module, TRACED, low=8, high=256)


@pytest.fixture(scope="module")
def exports():
    with torch.random.fork_rng():  # torch's global seed as it was for the test files after this one
        torch.manual_seed(0)
        made = {"literal": Literal(), "module": Module(), "bat": Bat(), "oned": OneD(), "indices": Indices(),
                "genuine": Genuine()}
        return {name: (m, _export(m)) for name, m in made.items()}


def _errors(module, model: onnx.ModelProto, sizes) -> dict:
    """A window one element off moves a max by ~1, float noise of the sums below it is ~1e-6 of them."""
    return errors_vs_torch(module, model, sizes, seed=5, relative=True)


def _traced() -> dict:
    return {"x": [1, 3, *TRACED]}


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_the_exports_hold_frozen_max_pools_wrong_away_from_the_traced_size(exports):
    for name in ("literal", "module", "bat", "oned"):
        module, model = exports[name]
        assert "MaxPool" in _ops(model), name
        errs = _errors(module, model, [TRACED, *SIZES])
        assert errs[TRACED] < 1e-5 and max(errs.values()) > 1e-3, (name, errs)


@pytest.mark.parametrize("name", ["literal", "oned"])
def test_a_literal_size_needs_no_traced_shape(exports, name):
    module, model = exports[name]
    for kwargs in ({}, {"traced_shapes": _traced()}):
        result = patch(model, **kwargs)
        assert [n.lowering for n in result.report.nodes] == ["dynamic"], kwargs
        assert "MaxPool" not in _ops(result.model)
        errs = _errors(module, result.model, [TRACED, *SIZES])
        assert max(errs.values()) < 1e-5, (kwargs, errs)


@pytest.mark.parametrize("name", ["module", "bat"])
def test_a_size_known_only_at_the_traced_size_is_refused_then_exact_with_it(exports, name, tmp_path):
    module, model = exports[name]
    with pytest.raises(UnsupportedNodeError, match="frozen"):
        patch(model)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    refused = CliRunner().invoke(main, [str(src), str(out)])
    assert refused.exit_code == 4 and not out.exists(), refused.output
    done = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,18,10"])
    assert done.exit_code == 0, done.output
    patched = onnx.load(str(out))
    assert "MaxPool" not in _ops(patched)
    errs = _errors(module, patched, [TRACED, *SIZES])
    assert max(errs.values()) < 1e-5, errs


def test_read_indices_are_replaced_with_the_exporters_index_arithmetic(exports):
    """The exporter turns the MaxPool's flat indices into torch's through a kernel-1 MaxPool, a Slice and a Sub
    (frontends/dynamo/frozen_indices.py): that chain goes with the pool, and OUT's indices are torch's at every size
    (an index one off is 1/180 of the largest, far above the tolerance)."""
    module, model = exports["indices"]
    assert max(_errors(module, model, SIZES).values()) > 1e-3  # as exported: frozen values and indices
    for kwargs in ({}, {"traced_shapes": _traced()}):  # the size is written on the line: no option needed
        result = patch(model, **kwargs)
        assert [n.lowering for n in result.report.nodes] == ["dynamic"]
        assert not {"MaxPool", "Slice"} & set(_ops(result.model))
        errs = _errors(module, result.model, [TRACED, *SIZES])
        assert max(errs.values()) < 1e-5, errs


def test_a_genuine_max_pool_stays(exports):
    module, model = exports["genuine"]
    result = patch(model, traced_shapes=_traced())
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]
    assert _ops(result.model).count("MaxPool") == 1
    assert max(_errors(module, result.model, [TRACED, *SIZES]).values()) < 1e-5

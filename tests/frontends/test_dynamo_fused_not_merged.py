"""review49 F2: a separable conv (depthwise conv -> pointwise conv -> BatchNorm: timm's SeparableConvNormAct, VoVNet-dw)
is written by torch's optimizer as one Conv whose fx_node metadata is the BatchNorm's, naming the fused-away
``conv2d_<k+1>`` while the node reads ``conv2d_<k>``: merges.py reads that as a merge's stand-in. Every pool the file
keeps above it then became a suspect ("another adaptive call with the same windows there may stand behind it"),
so a genuine ``nn.MaxPool2d(3, 2, ceil_mode=True)`` refused a file with no adaptive pooling at all (exit 4; the file is
right at every size as written). A pool of windows torch's decomposition never writes (kernel != stride, padding,
ceil mode) cannot have an adaptive call merged into it: the file is now written as it is, exact against torch."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

import onnx
from dynamo_exports import errors_vs_torch, export_dynamic_hw, seeded

from onnxpoolfix.cli import main


class SeparableAfterPool(nn.Module):
    def __init__(self, head: bool):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.pw = nn.Conv2d(8, 16, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.head = head
        self.gap = nn.AdaptiveAvgPool2d((3, 5))

    def forward(self, x):
        y = torch.relu(self.bn(self.pw(self.dw(self.pool(self.stem(x))))))
        return self.gap(y) if self.head else y


SIZES = [(40, 31), (17, 66), (64, 64), (13, 9)]


@pytest.mark.parametrize("head", [False, True], ids=["no_adaptive_pool", "adaptive_head"])
def test_a_genuine_ceil_mode_max_pool_above_a_fused_separable_conv_is_no_merge(head, tmp_path):
    module = seeded(SeparableAfterPool(head))
    model = export_dynamic_hw(module, (29, 43))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    for flags in ([], ["--traced-shape", "x:1,3,29,43"]):
        r = CliRunner().invoke(main, [str(src), str(out), *flags])
        assert r.exit_code == 0, r.output
        errors = errors_vs_torch(module, onnx.load(out), [(29, 43), *SIZES], seed=1)
        assert max(errors.values()) < 1e-5, errors


class FoldBelowAdaptivePool(nn.Module):
    """An adaptive pool, then a layer and a second layer with a BatchNorm, which torch's optimizer folds into the second
    layer: the folded node keeps the BatchNorm's fx_node (naming ``conv2d_2`` / ``linear_1``) and reads ``conv2d_1`` /
    ``linear``, the same op's value, as a merge's stand-in would."""

    def __init__(self, layer: str):
        super().__init__()
        self.layer = layer
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.c1, self.c2, self.bn = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8)
        self.l1, self.l2, self.bn1 = nn.Linear(8 * 15, 16), nn.Linear(16, 16), nn.BatchNorm1d(16)

    def forward(self, x):
        p = nn.functional.adaptive_avg_pool2d(self.stem(x), (3, 5))
        if self.layer == "conv":
            return torch.relu(self.bn(self.c2(self.c1(p))))
        return self.bn1(self.l2(self.l1(p.flatten(1))))


@pytest.mark.parametrize("traced", [(29, 43), (30, 45)], ids=["decomposed", "frozen_pool"])
@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_a_batch_norm_folded_below_an_adaptive_pool_is_no_merge(layer, traced, tmp_path):
    """Was exit 4 ("torch's export merged a computation of 'conv2d_1'"); at 30x45 the pool is torch's frozen
    AveragePool, wrong at other sizes as written: patched and exact against torch at sizes other than the traced."""
    module = seeded(FoldBelowAdaptivePool(layer))
    with torch.no_grad():
        for bn in (module.bn, module.bn1):
            bn.running_mean.copy_(torch.linspace(-1, 1, bn.num_features))
            bn.running_var.copy_(torch.linspace(0.5, 2, bn.num_features))
    model = export_dynamic_hw(module, traced)
    folded = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")
              and any("batch_norm" in p.value for p in n.metadata_props)]
    assert folded, "torch no longer folds the BatchNorm: the case this test guards is gone"
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), [traced, *SIZES], seed=1)
    assert max(errors.values()) < 1e-5, errors


class NoOpBelowAdaptivePool(nn.Module):
    """A no-op torch's optimizer removes after a value of the same op: its reader reads ``mul`` where its fx_node
    names ``mul_1`` (``y * 1``), ``add`` for ``add_1`` (``y + 0``), or ``slice_2`` for the full-range Slices of
    ``y[:, :, :]`` and of axis 0 in ``z[:, :4]``."""

    def __init__(self, op: str):
        super().__init__()
        self.op = op
        self.stem = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        p = nn.functional.adaptive_avg_pool2d(self.stem(x), (5, 7))
        if self.op == "mul":
            y = p * 2
            return (y * 1) * 3
        if self.op == "add":
            y = p + 2
            return (y + 0) + 3
        y = p[:, 1:]
        z = y[:, :, :]
        return z[:, :4] * 2


@pytest.mark.parametrize("op", ["mul", "add", "slice"])
def test_a_no_op_the_optimizer_removed_below_an_adaptive_pool_is_no_merge(op, tmp_path):
    """Was exit 4 ("torch's export merged a computation of 'mul' ..."): patched, exact against torch."""
    from export_cache import dynamo_export

    module = seeded(NoOpBelowAdaptivePool(op)).eval()
    dims = {"x": {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    model = dynamo_export(module, (torch.randn(2, 3, 29, 43, generator=torch.Generator().manual_seed(0)),),
                          dynamic_shapes=dims, input_names=["x"])  # a symbolic batch keeps axis 0's full Slice
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), [(29, 43), *SIZES], seed=1)
    assert max(errors.values()) < 1e-5, errors

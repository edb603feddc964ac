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

"""A global pool of an adaptive module over an axis 1 long at the given traced size (a stride-8 stem on a 7-row
input; torchvision's r3d_18 traced at T = 7) is refused without more evidence: the module's size, 1 or torch's
None there, is nowhere in the file (reduces.ONE_LONG). A classifier after it that takes the channels alone is
that evidence: flattened, the pooled axes are 1 at every size the model runs at (review49: r3d_18 at 7x75x97
was refused with --traced-shape, exact without). Without the classifier the refusal stands."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

import onnx
from dynamo_exports import assert_cli_refuses, errors_vs_torch, export_dynamic_hw, seeded

from onnxpoolfix.cli import main


class Stem(nn.Module):
    def __init__(self, head: bool, size=1):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=(8, 2))
        self.pool = nn.AdaptiveAvgPool2d(size)
        self.fc = nn.Linear(8, 4) if head else None

    def forward(self, x):
        x = self.pool(torch.relu(self.conv(x)))
        return self.fc(x.flatten(1)) if self.fc is not None else x


SIZES = [(7, 23), (33, 41), (20, 13), (64, 9)]  # 7 rows: one row after the stem


def test_a_classifier_after_it_says_the_axis_pools_to_1(tmp_path):
    module = seeded(Stem(head=True))
    model = export_dynamic_hw(module, (7, 23))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,7,23"])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), SIZES, seed=0)
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("size", [1, (None, 1)], ids=["global", "none_1"])
def test_without_a_classifier_it_stays_refused(size, tmp_path):
    module = seeded(Stem(head=False, size=size))
    model = export_dynamic_hw(module, (7, 23))
    if size != 1:  # torch's None on the axis one row long: the file as exported is one row at every height
        assert max(errors_vs_torch(module, model, SIZES, seed=0).values()) > 1e-3
    assert_cli_refuses(model, tmp_path, (["--traced-shape", "x:1,3,7,23"],))

"""review71: a classifier head ``torch.flatten(pool(x), 1)`` / ``x.flatten(1)`` / ``x.view(x.size(0), -1)`` after an
adaptive pool to 1, exported by dynamo with the batch and H/W symbolic and traced where a pooled axis is 1 long
(torchvision resnet18 at 2x3x32x97, r3d_18 at T = 7). torch writes the flatten as a Reshape to [-1, C], which was
not read as keeping the batch, so the reduce was refused (exit 4) though torch's file is exact at every size.
torch's view sizes in the exporter's ``fx_node`` (a ``%sym_size_int`` first, the batch's symbol) tell it from a
per-position ``view(-1, C)``, which stays refused."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from dynamo_exports import assert_cli_refuses, seeded  # noqa: E402

from onnxpoolfix.cli import main  # noqa: E402


class Head(torch.nn.Module):
    def __init__(self, form: str):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=(8, 2), padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 5)
        self.form = form

    def forward(self, x):
        p = self.pool(self.conv(x))
        if self.form == "flatten":
            p = torch.flatten(p, 1)
        elif self.form == "method":
            p = p.flatten(1)
        elif self.form == "view_n":
            p = p.view(p.size(0), -1)
        else:  # per-position: 1 or None on the 1-long axis differ where the module runs
            p = p.view(-1, 8)
        return self.fc(p)


def _export(module):
    from export_cache import dynamo_export

    torch.manual_seed(0)
    dims = {"x": {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    return dynamo_export(module.eval(), (torch.randn(2, 3, 7, 13),), dynamic_shapes=dims, input_names=["x"])


@pytest.mark.parametrize("form", ["flatten", "method", "view_n"])
def test_a_flatten_of_the_batch_under_a_symbolic_batch_stays_as_written(form, tmp_path):
    module = seeded(Head(form)).eval()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_export(module), src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:2,3,7,13"])
    assert r.exit_code == 0, r.output
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch, hw in [(2, (7, 13)), (3, (29, 17)), (1, (40, 9)), (2, (8, 8))]:
        x = rng.standard_normal((batch, 3, *hw)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-5, (batch, hw)


def test_a_per_position_view_after_a_one_long_axis_stays_refused(tmp_path):
    assert_cli_refuses(_export(seeded(Head("view_m1"))), tmp_path, (["--traced-shape", "x:2,3,7,13"],))

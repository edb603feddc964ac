"""A CRNN's `AdaptiveAvgPool2d((None, 1))` of a permuted feature map, then `.squeeze(3)` (the OCR models'
`pool(f.permute(0, 3, 1, 2)).squeeze(3)`), exported by the dynamo exporter with symbolic H/W: torch freezes the
pool as a kernel (1, h) AveragePool/MaxPool, and the module's output size is nowhere in the file. The Squeeze
after it is: torch squeezed that axis, so it pooled to 1 there (the traced length was the kernel). Patched
without --traced-shape and exact at heights and widths other than the traced ones; an axis of one-element
windows (torch's None or the traced length) stays refused, Squeeze or not."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix.cli import main


class Crnn(nn.Module):
    """A conv stem (H / 4, W / 2), the sequence read along W: [b, c, h, w] -> [b, w, c, h], h pooled to 1."""

    def __init__(self, pool):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, (2, 1), 1))
        self.pool = pool
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        v = self.pool(self.cnn(x).permute(0, 3, 1, 2))  # [b, c, h, w] -> [b, w, c, h]
        return self.fc(v.squeeze(3))


class RowPool(nn.Module):
    """`AdaptiveAvgPool2d((1, None))` then `.squeeze(2)`: the width has one-element windows, torch's None or the
    traced width; the Squeeze says nothing of it."""

    def __init__(self):
        super().__init__()
        self.c, self.pool = nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((1, None))

    def forward(self, x):
        return self.pool(self.c(x)).squeeze(2)


TRACED = (32, 100)
SIZES = [TRACED, (20, 7), (47, 33), (64, 129)]  # heights whose features are 5, 12, 16 (the kernel at 32 was 8)


@pytest.mark.parametrize("pool", [nn.AdaptiveAvgPool2d((None, 1)), nn.AdaptiveMaxPool2d((None, 1))],
                         ids=["avg", "max"])
def test_a_squeezed_axis_says_the_pool_is_to_one_and_out_is_exact_at_other_heights(pool, tmp_path):
    torch.manual_seed(0)
    module = Crnn(pool).eval()
    model = export_symbolic_hw(module, TRACED)
    assert max(errors_vs_torch(module, model, SIZES[1:], seed=1).values()) > 1e-3  # the file as exported
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), SIZES, seed=2)
    assert max(errors.values()) < 1e-5, errors


def test_a_squeeze_does_not_decide_an_axis_of_one_element_windows(tmp_path):
    torch.manual_seed(0)
    model = export_symbolic_hw(RowPool(), TRACED)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 4 and not out.exists() and "torch's None" in r.stderr


def test_a_traced_size_the_squeeze_agrees_with_does_not_rest_on_the_traced_size_alone(tmp_path):
    """With --traced-shape at the export's own size the Squeeze still says the pool is to 1 (review57 F2: the run
    warned that the size rested on the traced size alone, "nothing in the graph confirms it", while the same file
    without the option was patched from the Squeeze). A traced size the Squeeze does not agree with still rests
    on the option alone: the Squeeze after it contradicts the given size, which is refused as a contradiction
    (exit 4, as any binding the graph contradicts), not left to the check."""
    torch.manual_seed(0)
    module = Crnn(nn.AdaptiveAvgPool2d((None, 1))).eval()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(export_symbolic_hw(module, TRACED), src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,32,100"])
    assert r.exit_code == 0, r.output
    assert "rests on" not in r.output and "a Squeeze of its result says" in r.output, r.output
    assert max(errors_vs_torch(module, onnx.load(out), SIZES, seed=2).values()) < 1e-5
    wrong = tmp_path / "wrong.onnx"
    r = CliRunner().invoke(main, [str(src), str(wrong), "--traced-shape", "x:1,3,64,100"])  # 16 by the kernel 8: 2
    assert r.exit_code == 4 and not wrong.exists(), r.output  # refused before any check (it exited 5 before)
    assert "contradicts the graph" in r.stderr and "Squeeze" in r.stderr, r.stderr

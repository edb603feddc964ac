"""An output size that is the pooled tensor's own length (mmocr-style heads: `F.adaptive_avg_pool2d(x, (1,
x.size(3)))`, `(x.shape[-2], 1)`), exported by the dynamo exporter with symbolic H/W: torch freezes the pool as
an AveragePool whose kept axis has windows of one element. The call reads the length of the tensor it pools along
that same axis: torch's None (review44: refused as a computed size). Patched and exact at sizes other than the
traced one. Where the written length is another axis's, or the call's rank is not known (an unbatched tensor,
whose axis 2 is its width), it stays a computed size: refused."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = nn.functional

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix.cli import main


class OwnWidth(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (1, x.size(3))).squeeze(2)  # the height to 1, the width kept


class OwnHeight(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, output_size=(x.shape[-2], 1)).flatten(2)


class OtherAxis(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x.size(3), 1))  # the height pooled to the width: not its own


class Unbatched(nn.Module):
    def forward(self, x):
        y = x[0]  # [C, H, W]: y.size(2) is the width
        return F.adaptive_avg_pool2d(y, (y.size(2), 1))


def _patch(module, traced, tmp_path, *flags):
    model = export_symbolic_hw(module, traced)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    return model, out, CliRunner().invoke(main, [str(src), str(out), *flags])


@pytest.mark.parametrize(("module", "traced"), [(OwnWidth(), (5, 23)), (OwnHeight(), (23, 5))],
                         ids=["size(3)", "shape[-2]"])
def test_a_length_of_the_pooled_tensor_is_torchs_none_and_out_is_exact(module, traced, tmp_path):
    sizes = [(7, 23), (3, 41), (1, 9), (40, 6), (11, 11)]
    for flags in ([], ["--traced-shape", "x:1,3," + ",".join(map(str, traced))]):
        model, out, r = _patch(module, traced, tmp_path, *flags)
        assert max(errors_vs_torch(module, model, sizes, seed=1).values()) > 1e-3  # the file as exported
        assert r.exit_code == 0, r.output
        errors = errors_vs_torch(module, onnx.load(out), [traced, *sizes], seed=2)
        assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize(("module", "traced"), [(OtherAxis(), (23, 23)), (Unbatched(), (23, 23))],
                         ids=["other-axis", "unbatched"])
def test_a_length_of_another_axis_stays_a_computed_size(module, traced, tmp_path):
    """Traced square, so the windows are those of torch's None on the pooled height: the line decides it."""
    _, out, r = _patch(module, traced, tmp_path)
    assert r.exit_code == 4 and not out.exists(), r.output

"""``F.adaptive_avg_pool2d(x, x.shape[2] // 4)``: one computed int for a 2-D (or 3-D) pool, which torch broadcasts
to every pooled axis and passes to the aten op as a one-entry list. onnxpoolfix.export wrote a one-entry size, and
the lowering read entry 1 of it: IndexError in the check (review25), a Gather out of bounds in OUT. Each pooled
axis now gets the entry; exact against torch at sizes other than the traced one."""
from __future__ import annotations

import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from dynamo_exports import assert_matches_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch


class Avg2d(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, x.shape[2] // 4)


class Max2d(nn.Module):
    def forward(self, x):
        return F.adaptive_max_pool2d(x, x.shape[3] // 3 + 1)


class Avg3d(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool3d(x, x.shape[2] // 2)


@pytest.mark.parametrize("make, traced, others", [
    (Avg2d, (1, 3, 17, 13), [(1, 3, 16, 12), (1, 3, 40, 9), (1, 3, 9, 31)]),
    (Max2d, (2, 3, 11, 14), [(2, 3, 7, 5), (2, 3, 20, 33)]),
    (Avg3d, (1, 2, 6, 7, 5), [(1, 2, 9, 4, 11), (1, 2, 4, 13, 6)]),
])
def test_one_computed_int_for_every_pooled_axis_is_exact_against_torch(make, traced, others, tmp_path):
    import onnx

    m = make().eval()
    dims = {a: torch.export.Dim(f"d{a}", min=4, max=64) for a in range(2, len(traced))}
    onnxpoolfix.export(m, (torch.randn(*traced),), str(tmp_path / "out.onnx"), input_names=["x"],
                       dynamic_shapes=(dims,))
    assert_matches_torch(onnx.load(str(tmp_path / "out.onnx")), m, [traced] + others, rtol=1e-5, atol=1e-6)

"""``F.adaptive_max_pool2d_with_indices`` on the line is torch's adaptive max (review12 F14: refused before): its
frozen MaxPool, traced where the size divides, is patched and exact against torch at other sizes."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch, export_symbolic_hw  # noqa: E402

from onnxpoolfix import patch  # noqa: E402

pytestmark = pytest.mark.torch


class WithIndices(nn.Module):
    def forward(self, x):
        y, i = F.adaptive_max_pool2d_with_indices(x, (8, 3))
        return y * 2.0, i


def test_adaptive_max_with_indices_on_the_line_is_patched_exactly():
    m = WithIndices().eval()
    model = export_symbolic_hw(m, (16, 12))  # (skipped where torch exports no adaptive max pooling: 2.9 to 2.11)
    out = patch(model, traced_shapes={"x": [1, 3, 16, 12]}).model
    errors = errors_vs_torch(m, out, [(16, 12), (20, 12), (9, 7), (23, 30), (17, 20), (40, 31)], seed=1)
    assert max(errors.values()) == 0.0, errors

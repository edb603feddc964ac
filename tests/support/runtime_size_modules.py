"""The modules of issue 23 whose pooled output size is computed from the input's size, shared by the
TorchScript test (tests/lowering/test_runtime_sizes.py) and the export test
(tests/torch_export/test_export_runtime_sizes.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Area(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale, mode="area")


class HalfThird(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x.shape[2] // 2, x.shape[3] // 3))


class MaxThirdPlusOne(torch.nn.Module):
    def __init__(self, indices: bool = True):
        super().__init__()
        self.indices = indices

    def forward(self, x):
        return F.adaptive_max_pool2d(x, (x.shape[2] // 3 + 1, 5), return_indices=self.indices)

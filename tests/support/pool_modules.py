"""Pooling modules the tests export with the dynamo exporter, defined apart from the tests that use them:
tests/support/export_cache.py keys a recorded export by the digest of the file defining the module's class, so
editing a test file does not make its exports live again."""
from __future__ import annotations

import torch


class AdaptiveAvgOrArea(torch.nn.Module):
    """``F.adaptive_avg_pool{rank}d(t, size)``, or ``F.interpolate(t, size, mode="area")`` with ``area``."""

    def __init__(self, rank: int, size, area: bool):
        super().__init__()
        self.rank, self.size, self.area = rank, tuple(size), area

    def forward(self, t):
        if self.area:
            return torch.nn.functional.interpolate(t, size=self.size, mode="area")
        return getattr(torch.nn.functional, f"adaptive_avg_pool{self.rank}d")(t, self.size)

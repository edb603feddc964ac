"""The benchmark cases: a torch module, the traced input shape, and (dynamic cases) the run shape.

The static cases are listed here; the dynamic ones (traced at one size, run at another) are in
cases_dynamic.py. :func:`all_cases` gives both, in that order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch.nn as nn


class Pyramid(nn.Module):
    """Several adaptive pools of one input (PSP-style pyramid), one output each."""

    def __init__(self, bins, kind="avg"):
        super().__init__()
        cls = nn.AdaptiveAvgPool2d if kind == "avg" else nn.AdaptiveMaxPool2d
        self.pools = nn.ModuleList(cls(b) for b in bins)

    def forward(self, x):
        return tuple(p(x) for p in self.pools)


@dataclass
class Case:
    name: str
    make: Callable[[], nn.Module]
    shape: tuple[int, ...]  # traced (and, unless run_shape, run) input shape
    desc: str
    dynamic_axes: dict | None = None  # e.g. {"x": {2: "h", 3: "w"}}: hook for dynamic cases
    run_shape: tuple[int, ...] | None = None  # size to run at (dynamic cases)
    patch_kwargs: dict = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.run_shape or self.shape)



def adaptive_avg(k, size):
    return lambda: {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[k](size)


def adaptive_max(k, size, indices=False):
    """AdaptiveMaxPool{k}d(size); with ``indices`` both outputs are graph outputs (the indices are read)."""
    cls = {1: nn.AdaptiveMaxPool1d, 2: nn.AdaptiveMaxPool2d, 3: nn.AdaptiveMaxPool3d}[k]
    return lambda: cls(size, return_indices=indices)


_avg, _max = adaptive_avg, adaptive_max
CASES: list[Case] = [
    Case("avg_9to7", adaptive_avg(2, 7), (1, 2048, 9, 9), "[1,2048,9,9] -> 7x7"),
    Case("avg_10to7", adaptive_avg(2, 7), (1, 512, 10, 10), "[1,512,10,10] -> 7x7"),
    Case("avg_64to5x7", adaptive_avg(2, (5, 7)), (8, 256, 64, 64), "[8,256,64,64] -> 5x7"),
    Case("psp_60", lambda: Pyramid((1, 2, 3, 6)), (1, 512, 60, 60), "[1,512,60,60] -> {1,2,3,6} (4 pools)"),
    Case("psp_64", lambda: Pyramid((1, 2, 3, 6)), (1, 512, 64, 64), "[1,512,64,64] -> {1,2,3,6} (4 pools)"),
    Case("avg_up4x5to6", adaptive_avg(2, 6), (1, 64, 4, 5), "[1,64,4,5] -> 6x6 (non-integer upsample)"),
    Case("avg_33to8", adaptive_avg(2, 8), (1, 256, 33, 33), "[1,256,33,33] -> 8x8"),
    Case("avg_128to3", adaptive_avg(2, 3), (32, 64, 128, 128), "[32,64,128,128] -> 3x3"),
    Case("avg_1024to7", adaptive_avg(2, 7), (1, 3, 1024, 1024), "[1,3,1024,1024] -> 7x7"),
    Case("avg_global", adaptive_avg(2, 1), (1, 2048, 7, 7), "[1,2048,7,7] -> 1x1"),
    Case("avg1d_1000to30", adaptive_avg(1, 30), (16, 256, 1000), "1D [16,256,1000] -> 30"),
    Case("avg3d_17to4", adaptive_avg(3, 4), (1, 64, 17, 17, 17), "3D [1,64,17,17,17] -> 4x4x4"),
    Case("max_10to7", adaptive_max(2, 7), (1, 512, 10, 10), "max [1,512,10,10] -> 7x7"),
    Case("max_64to5x7", adaptive_max(2, (5, 7)), (8, 256, 64, 64), "max [8,256,64,64] -> 5x7"),
    Case("max_33to8", adaptive_max(2, 8), (1, 256, 33, 33), "max [1,256,33,33] -> 8x8"),
    # max pooling with its indices read (issue 24: 3.5x slower than torch's kernel before `pool_indices`)
    Case("maxidx_10to7", adaptive_max(2, 7, True), (1, 512, 10, 10), "max+indices [1,512,10,10] -> 7x7"),
    Case("maxidx_33to8", adaptive_max(2, 8, True), (1, 256, 33, 33), "max+indices [1,256,33,33] -> 8x8"),
]


def all_cases() -> list[Case]:
    """The static cases, then cases_dynamic.py's."""
    from cases_dynamic import DYNAMIC_CASES  # a sibling script: benchmarks/ is on sys.path

    names = {c.name for c in CASES}
    return CASES + [c for c in DYNAMIC_CASES if c.name not in names]

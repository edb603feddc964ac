"""The exact lowerings, one module each, and the registry the planner chooses from.

| name          | kind     | exact when                                        | ops                               |
|---------------|----------|---------------------------------------------------|-----------------------------------|
| identity      | avg, max | every output size equals the input size           | Identity                          |
| global        | avg, max | every changed output size is 1                    | ReduceMean / ReduceMax            |
| pool          | avg, max | every changed axis has uniform windows            | AveragePool / MaxPool             |
| block_pool    | avg, max | one changed axis, uniform within each gcd period  | Reshape + AveragePool / MaxPool   |
| resize        | avg, max | every changed axis is an integer upsample         | Resize nearest (asymmetric,floor) |
| mixed         | avg, max | axes of different kinds (avg: any windows)        | pool + MatMul + Resize            |
| matmul        | avg      | always                                            | MatMul per axis                   |
| kronecker     | avg      | always (matrix size capped)                       | Reshape + MatMul                  |
| pool_gather   | max      | always                                            | MaxPool(kmin,1) + Gather + Max    |
| window_gather | max      | always                                            | Gather + ReduceMax                |
| pool_cover    | max      | a grid fits inside one non-uniform axis' windows  | MaxPool (ceil) + Gather + Max     |
| window_sum    | avg      | always; --target portable only                    | Pad + Gather + ReduceSum + Div    |
| window_slices | avg, max | symbolic pooled axes; --target portable only      | Shape/Div + Slice + Reduce*       |
| argmax        | max      | always; computes the indices output (static)      | Gather + ArgMax + GatherElements  |
| dynamic       | avg, max | a pooled axis is symbolic (indices too)           | Shape/Range/Div + MatMul/Gather   |
"""
from __future__ import annotations

from .argmax import ArgMaxLowering
from .base import Lowering
from .block_pool import BlockPoolLowering
from .cover_max import CoverMaxLowering
from .dynamic import DynamicLowering
from .global_pool import GlobalLowering
from .identity import IdentityLowering
from .kronecker import KroneckerMatMulLowering
from .matmul import SeparableMatMulLowering
from .mixed import MaxPoolGatherLowering, MixedLowering, WindowGatherLowering
from .pool import PoolLowering
from .resize import ResizeLowering
from .window_slices import WindowSlicesLowering
from .window_sum import WindowSumLowering

LOWERINGS: tuple[Lowering, ...] = (
    IdentityLowering(),
    GlobalLowering(),
    PoolLowering(),
    BlockPoolLowering(),
    ResizeLowering(),
    MixedLowering(),
    SeparableMatMulLowering(),
    KroneckerMatMulLowering(),
    WindowSumLowering(),
    MaxPoolGatherLowering(),
    WindowGatherLowering(),
    CoverMaxLowering(),
    ArgMaxLowering(),
    DynamicLowering(),
    WindowSlicesLowering(),
)

BY_NAME = {lw.name: lw for lw in LOWERINGS}

__all__ = ["LOWERINGS", "BY_NAME", "Lowering"]

"""The exact lowerings, one module each, and the registry the planner chooses from (each one's "exact when"
and ops: docs/lowerings.md; its ``summary`` and ``check``: here)."""
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

"""Dynamic-H/W cases for bench.py: traced at one size, run at another (issue: dynamic input sizes).

Each runs the `dynamic` lowering at a size it was not traced at, next to the static lowering of the same
module at that size and the dynamo exporter's dynamic export (which freezes the traced windows).
"""
import torch.nn as nn
from cases import Case, adaptive_avg, adaptive_max

DYN = {"x": {2: "h", 3: "w"}}


def _max_with_indices(size):
    return lambda: nn.AdaptiveMaxPool2d(size, return_indices=True)


DYNAMIC_CASES = [
    Case("dyn_avg_10to7", adaptive_avg(2, 7), (1, 512, 9, 9), "[1,512,9,9] -> run at 10x10 -> 7x7",
         dynamic_axes=DYN, run_shape=(1, 512, 10, 10)),
    Case("dyn_avg_64to5x7", adaptive_avg(2, (5, 7)), (8, 256, 60, 60), "[8,256,60,60] -> run at 64x64 -> 5x7",
         dynamic_axes=DYN, run_shape=(8, 256, 64, 64)),
    Case("dyn_avg_up4x5to6", adaptive_avg(2, 6), (1, 64, 5, 5), "[1,64,5,5] -> run at 4x5 -> 6x6",
         dynamic_axes=DYN, run_shape=(1, 64, 4, 5)),
    Case("dyn_max_33to8", adaptive_max(2, 8), (1, 256, 30, 30), "max [1,256,30,30] -> run at 33x33 -> 8x8",
         dynamic_axes=DYN, run_shape=(1, 256, 33, 33)),
    # max with its indices read (both outputs are graph outputs): static lowering 'argmax'
    Case("dyn_maxidx_33to8", _max_with_indices(8), (1, 256, 30, 30),
         "max+indices [1,256,30,30] -> run at 33x33 -> 8x8", dynamic_axes=DYN, run_shape=(1, 256, 33, 33)),
    Case("dyn_maxidx_10to7", _max_with_indices(7), (1, 512, 9, 9),
         "max+indices [1,512,9,9] -> run at 10x10 -> 7x7", dynamic_axes=DYN, run_shape=(1, 512, 10, 10)),
    Case("dyn_maxidx_up4x5to6", _max_with_indices(6), (1, 64, 5, 5),
         "max+indices [1,64,5,5] -> run at 4x5 -> 6x6", dynamic_axes=DYN, run_shape=(1, 64, 4, 5)),
]

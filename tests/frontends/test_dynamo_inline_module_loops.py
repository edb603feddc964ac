"""A pooling module built and called inside a comprehension on one line (``[nn.AdaptiveAvgPool2d(b)(x) for b in
(2, 3)]``) binds its size as ``F.adaptive_avg_pool2d(x, b)`` in the same comprehension does: the loop over
literals on the call's own line is read. It was refused (review50: the functional form was patched exactly, the
module form exit 4 with a hint saying such a loop is read). Real torch 2.13 dynamo exports."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class InlineLoop(nn.Module):
    def forward(self, x):
        return torch.cat([nn.AdaptiveAvgPool2d(b)(x).flatten(2) for b in (2, 3)], 2)


class InlineLoopFrozen(nn.Module):
    def forward(self, x):
        return torch.cat([nn.AdaptiveAvgPool2d(b)(x).flatten(2) for b in (2, 4)], 2)


class InlineLoopAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.bins = (2, 3)

    def forward(self, x):
        return torch.cat([nn.AdaptiveAvgPool2d(b)(x).flatten(2) for b in self.bins], 2)


class InlineLoopComputed(nn.Module):
    def forward(self, x):
        return torch.cat([nn.AdaptiveAvgPool2d(b)(x).flatten(2) for b in (2, x.shape[2] // 4)], 2)


SIZES = [(9, 11), (5, 3), (2, 2), (1, 7), (31, 17)]


@pytest.mark.parametrize("module", [InlineLoop(), InlineLoopAttr()], ids=["literals", "attribute"])
def test_a_module_built_in_a_comprehension_over_fixed_sizes_is_read(module):
    model = export_symbolic_hw(module, (13, 17))
    result = patch(model)  # decomposed regions, static 2x2 and 3x3: the line says they are fixed
    errs = errors_vs_torch(module, result.model, [(13, 17), *SIZES], seed=5)
    assert all(e < 1e-5 for e in errs.values()), errs


def test_frozen_pools_of_such_a_line_take_the_traced_shape():
    module = InlineLoopFrozen()
    model = export_symbolic_hw(module, (16, 20))  # uniform windows there: two frozen AveragePools
    assert max(errors_vs_torch(module, model, SIZES, seed=5).values()) > 1e-3  # wrong as exported
    with pytest.raises(UnsupportedNodeError):
        patch(model)  # the line's sizes are names: the traced size gives them
    result = patch(model, traced_shapes={"x": [1, 3, 16, 20]})
    errs = errors_vs_torch(module, result.model, [(16, 20), *SIZES], seed=5)
    assert all(e < 1e-5 for e in errs.values()), errs


def test_a_computed_size_in_the_loop_stays_refused():
    model = export_symbolic_hw(InlineLoopComputed(), (16, 20))
    with pytest.raises(UnsupportedNodeError):
        patch(model, traced_shapes={"x": [1, 3, 16, 20]})

"""A dynamo export whose layers after a frozen pool are sized from it (pool -> flatten -> Linear; max pooling
whose indices go through gather and view_as): the check at its own sizes refuses it (exit 5, naming
onnxpoolfix.export). With --check-shape equal to --traced-shape, where OUT equals the file as torch wrote it,
nothing failed and OUT went out (exit 0), failing in onnxruntime at every other size (found by review); and the
indices case's refusal advised exactly that (other check sizes). Both are now refused for what they are."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional

from dynamo_exports import errors_vs_torch
from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.errors import ArgumentError, CheckFailedError


class FlattenHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.AdaptiveAvgPool2d((4, 6))
        self.fc = nn.Linear(3 * 24, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.p(x), 1))


class IndicesGathered(nn.Module):
    def forward(self, x):
        y, i = F.adaptive_max_pool2d(x, (4, 6), return_indices=True)
        return torch.gather(x.flatten(2), 2, i.flatten(2)).view_as(y)


TRACED = {"x": [2, 3, 24, 30]}


def _export(module):
    dims = {"x": {0: torch.export.Dim("N", min=1, max=64), 2: torch.export.Dim("H", min=1, max=4096),
                  3: torch.export.Dim("W", min=1, max=4096)}}
    return dynamo_export(module.eval(), (torch.randn(*TRACED["x"]),), dynamic_shapes=dims, input_names=["x"])


@pytest.mark.parametrize("cls", [FlattenHead, IndicesGathered], ids=lambda c: c.__name__)
def test_a_layer_sized_from_the_frozen_pool_is_refused_naming_export(cls):
    torch.manual_seed(0)
    module = cls()
    model = _export(module)
    errs = errors_vs_torch(module, model, [(12, 18), (13, 17)], seed=1)
    assert min(errs.values()) == float("inf")  # the premise: as exported, it crashes there
    with pytest.raises(CheckFailedError, match="after the replaced dynamo pool") as err:
        patch(model, traced_shapes=TRACED)
    assert "onnxpoolfix.export" in err.value.hint


@pytest.mark.parametrize("cls", [FlattenHead, IndicesGathered], ids=lambda c: c.__name__)
def test_a_check_at_the_traced_size_alone_is_refused(cls):
    torch.manual_seed(0)
    model = _export(cls())
    with pytest.raises(ArgumentError, match="prove nothing") as err:
        patch(model, traced_shapes=TRACED, check_shapes=[TRACED])
    assert err.value.data["argument"] == "check_shapes"
    with pytest.raises(CheckFailedError, match="after the replaced dynamo pool"):
        patch(model, traced_shapes=TRACED, check_shapes=[TRACED, {"x": [1, 3, 12, 18]}])

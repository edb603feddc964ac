"""Layers after a frozen pool that the dynamo exporter sized from it: torchvision VGG's ``torch.flatten(pool(x),
1)`` traced where 7 divides the map (28x28 -> 14x14, AveragePool k2) writes the flatten's length as
C * (H // 4) * (W // 4), the frozen pool's output. Replacing the pool by the exact one (always 7x7) left that
Reshape as written: exit 0, and OUT crashed in onnxruntime at every size but the traced one's kind (found by
review: VGG heads, torchvision's InceptionAux, PVTv2's reshape(B, C, -1), a 1-D token pool). The check runs
the layers after such a pool too, and the patch is refused naming the node and onnxpoolfix.export. Real
dynamo exports."""
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
from onnxpoolfix.errors import CheckFailedError


class FlattenHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.classifier = nn.Linear(4 * 7 * 7, 5)

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), (7, 7)), 1))


def test_a_flatten_sized_from_the_frozen_pool_is_refused():
    """With the batch symbolic too (a static batch of 1 is flattened by a Reshape to [1, -1], which holds)."""
    torch.manual_seed(0)
    module = FlattenHead().eval()
    dims = {"x": {0: torch.export.Dim("N", min=1, max=64), 2: torch.export.Dim("H", min=14, max=1024),
                  3: torch.export.Dim("W", min=14, max=1024)}}
    model = dynamo_export(module, (torch.randn(2, 3, 28, 28),), dynamic_shapes=dims, input_names=["x"])
    errs = errors_vs_torch(module, model, [(56, 42), (33, 47)], seed=1)
    assert min(errs.values()) == float("inf")  # the premise: as exported, it crashes there
    try:
        out = patch(model).model
    except CheckFailedError as err:  # torch 2.13, 2.14: the flatten's length is the frozen pool's
        assert "after the replaced dynamo pool" in str(err) and "onnxpoolfix.export" in err.hint
        return
    # torch 2.9 writes the flatten's length from the pool's output: patched, and then exact at other sizes
    assert max(errors_vs_torch(module, out, [(28, 28), (56, 42), (33, 47)], seed=1).values()) < 1e-5

"""A frozen AveragePool behind a Reshape to a computed shape, with --traced-shape: transformers' PVTv2 with
linear_attention (tokens reshaped back to a map, AdaptiveAvgPool2d(7)) traced at 224x224, where 7 divides
both 56 and 28, so the dynamo exporter froze both pools as AveragePools. onnx's inference loses the map's
size at the Reshape, and the patch refused even with the traced size ("its input size at the bound input
shapes is unknown"); the exporter's own declared dims give it. Real torch 2.13 dynamo exports."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class Attention(nn.Module):
    """PVT's linear attention: keys/values from the token map reshaped and pooled by AdaptiveAvgPool2d(7)."""

    def __init__(self, c=8):
        super().__init__()
        self.embed = nn.Conv2d(3, c, 4, stride=4)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.q, self.kv = nn.Linear(c, c), nn.Linear(c, 2 * c)

    def forward(self, x):
        t = self.embed(x)
        b, c, h, w = t.shape
        tokens = t.flatten(2).transpose(1, 2)
        reduced = self.pool(tokens.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        k, v = self.kv(reduced).chunk(2, -1)
        a = (self.q(tokens) @ k.transpose(1, 2)).softmax(-1)
        return (a @ v).transpose(1, 2).reshape(b, c, h, w)


TRACED = (112, 84)  # a 28x21 map: 7 divides both, the exporter writes AveragePool k4x3
SIZES = [(64, 64), (96, 72), (60, 100), (132, 88)]


@pytest.fixture(scope="module")
def exported():
    torch.manual_seed(0)
    module = Attention().eval()
    return module, export_symbolic_hw(module, TRACED, low=8)


def _errors(module, model, sizes) -> dict:
    return errors_vs_torch(module, model, sizes, seed=3)


def test_the_frozen_pool_is_what_the_export_froze(exported):
    module, model = exported
    assert [n.op_type for n in model.graph.node].count("AveragePool") == 1
    assert max(_errors(module, model, SIZES).values()) > 1e-3  # as written: wrong or crashing elsewhere
    with pytest.raises(UnsupportedNodeError):
        patch(model)  # its output size is known only at the traced size


def test_with_the_traced_shape_it_is_replaced_and_exact_at_every_size(exported):
    module, model = exported
    result = patch(model, traced_shapes={"x": [1, 3, *TRACED]})
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]
    assert "AveragePool" not in [n.op_type for n in result.model.graph.node]
    errs = _errors(module, result.model, [TRACED, *SIZES])
    assert all(e < 1e-5 for e in errs.values()), errs

"""A dynamo export declared with Dim expressions (``{2: 4*h, 3: 4*w}``) and a stem before the pool: the
exporter names the stem's output sizes anew (``2*s39``: no relation to ``h`` in the file), so the traced
size given with --traced-shape bound no symbol of the pooled tensor and every such export was refused as
"contradicting the graph". The pooled symbols are now solved from the whole model inferred at the given
size. Real torch 2.13 dynamo exports, compared with torch at other sizes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch
from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.errors import PoolFixError


class Stem(nn.Module):
    """Conv (stride 2) + ReLU + max pool (stride 2), pooled adaptively: a ResNet-like stem, stride 4."""

    def __init__(self, size):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 7, stride=2, padding=3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.pool = nn.AdaptiveAvgPool2d(size)

    def forward(self, x):
        return self.pool(self.stem(x))


def _export(module, k, hw):
    torch.manual_seed(0)
    module.eval()
    h, w = torch.export.Dim("h", min=1, max=64), torch.export.Dim("w", min=1, max=64)
    return dynamo_export(module, (torch.randn(1, 3, k * hw[0], k * hw[1]),),
                         dynamic_shapes={"x": {2: k * h, 3: k * w}}, input_names=["x"])


@pytest.mark.parametrize("size,k,hw", [(3, 4, (13, 17)), ((5, 7), 8, (3, 4))])
def test_the_traced_shape_of_a_dim_expression_export_proves_its_pool(size, k, hw):
    module = Stem(size)
    model = _export(module, k, hw)
    assert "*" in model.graph.input[0].type.tensor_type.shape.dim[2].dim_param  # declared as an expression
    traced = [1, 3, k * hw[0], k * hw[1]]
    result = patch(model, traced_shapes={"x": traced})
    sizes = [tuple(traced[2:]), (k * 3, k * 9), (k * 11, k * 2), (k * 7, k * 7)]
    errs = errors_vs_torch(module, result.model, sizes, seed=2)
    assert all(e < 1e-5 for e in errs.values()), errs
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]


def test_a_wrong_traced_shape_of_a_dim_expression_export_is_still_refused():
    """At a size in another branch class the region is not adaptive pooling: the binding is contradicted."""
    model = _export(Stem(3), 4, (13, 17))
    with pytest.raises(PoolFixError, match="contradicts"):
        patch(model, traced_shapes={"x": [1, 3, 4 * 12, 4 * 17]})

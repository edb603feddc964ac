"""``--input-shape`` on a dynamo file that binds some inputs only (review66): a region pooling an input the binding
leaves symbolic was proven at the traced size, which OUT then held at every size of that input (a static lowering
with the input still symbolic: exit 0, OUT wrong elsewhere, where the check ran the traced size only, as the default
check does where the static spec's size is the traced one). OUT keeps that pool's symbolic lowering and equals torch
at other sizes of the unbound input."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

from export_cache import dynamo_export

from onnxpoolfix import patch

pytestmark = pytest.mark.torch


class TwoInputs(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(size)

    def forward(self, x, y):
        return self.pool(x) + y.mean()


@pytest.mark.parametrize("hw, size, narrow", [
    ((15, 14), (5, 7), True),  # a frozen AveragePool, --check-shape at the traced size alone
    ((17, 13), (5, 7), True),  # a decomposed region, the same
    ((16, 16), (4, 4), False),  # the default check: it ran the static spec's size, the traced one (exit 0, 0.47 off)
])
def test_a_pool_of_an_unbound_input_stays_exact_at_its_every_size(hw, size, narrow):
    module = TwoInputs(size).eval()
    dims = torch.export.Dim.DYNAMIC
    model = dynamo_export(module, (torch.randn(1, 3, *hw), torch.randn(1, 4, 9)), input_names=["x", "y"],
                          dynamic_shapes=({2: dims, 3: dims}, {2: dims}))
    out = patch(model, traced_shapes={"x": [1, 3, *hw]}, input_shapes={"y": [1, 4, 9]},
                check_shapes=[{"x": [1, 3, *hw], "y": [1, 4, 9]}] if narrow else None).model
    sess = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for hw2 in (hw, (16, 15), (17, 18), (40, 33)):
        x, y = torch.randn(1, 3, *hw2), torch.randn(1, 4, 9)
        with torch.no_grad():
            want = module(x, y).numpy()
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy(), "y": y.numpy()})[0], want, rtol=1e-5, atol=1e-5)

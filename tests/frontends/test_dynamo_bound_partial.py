"""``--input-shape`` on a dynamo file that binds some inputs only (review66): a region pooling an input the binding
leaves symbolic was proven at the traced size, which OUT then held at every size of that input (a static lowering
with the input still symbolic: exit 0, OUT wrong elsewhere, where the check ran the traced size only, as the default
check does where the static spec's size is the traced one). OUT keeps that pool's symbolic lowering and equals torch
at other sizes of the unbound input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.cli import main

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


def test_a_bound_size_the_file_is_not_right_at_is_refused_in_input_shape_words(tmp_path):
    """--input-shape alone at a size off the traced size's branches (30x30 for a file traced at 17x13, where torch's
    decomposition is 0.31 off): refused (exit 4) as before, now saying the size is the one --input-shape gives and
    naming --input-shape as the remedy (review66: it spoke of a given traced size and named --traced-shape, which
    beside another --input-shape is refused)."""
    dims = torch.export.Dim.DYNAMIC
    model = dynamo_export(nn.AdaptiveAvgPool2d((5, 7)).eval(), (torch.randn(1, 3, 17, 13),), input_names=["x"],
                          dynamic_shapes=({2: dims, 3: dims},))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--input-shape", "x:1,3,30,30"])
    assert r.exit_code == 4 and not out.exists(), r.output
    assert "the size --input-shape gives contradicts the graph" in r.stderr, r.stderr
    assert "bind a size the file is right at with --input-shape" in r.stderr and "--traced-shape" not in r.stderr

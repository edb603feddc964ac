"""verify_against_torch compares relative to the output's own scale: a file whose output is wrong must not
match torch just because the output is small (torchvision's mobilenet_v3_small with weights=None outputs
values of ~1e-9)."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxpoolfix.errors import TorchMismatchError
from onnxpoolfix.torch_export.torch_check import verify_against_torch

torch = pytest.importorskip("torch")


class SmallPool(torch.nn.Module):
    def forward(self, x):
        return 1e-6 * torch.nn.functional.adaptive_avg_pool2d(x, (3, 3))


def _file(tmp_path, factor: float) -> str:
    """AveragePool k3 s3 (exact for 9 -> 3) times ``factor``: 1e-6 is the module, 0 is all zeros."""
    g = helper.make_graph(
        [helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[3, 3], strides=[3, 3]),
         helper.make_node("Mul", ["p", "k"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor("k", TensorProto.FLOAT, [], [factor])])
    path = str(tmp_path / f"pool_{factor}.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_small_output_that_is_wrong_does_not_match_torch(tmp_path):
    x = torch.randn(1, 2, 9, 9)
    with pytest.raises(TorchMismatchError, match="differs from torch"):
        verify_against_torch(_file(tmp_path, 0.0), SmallPool(), (x,))


def test_a_small_output_that_is_right_matches_torch(tmp_path):
    x = torch.randn(1, 2, 9, 9)
    check = verify_against_torch(_file(tmp_path, 1e-6), SmallPool(), (x,))
    assert check.max_error <= 1e-4 * float(SmallPool()(x).abs().max())


class HalfInside(torch.nn.Module):
    """A float32 module that pools in half: its float32 output holds values rounded to float16."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(self.conv(x).half(), (5, 7)).float()


@pytest.mark.parametrize("dynamo", [True, False])
def test_a_float32_output_rounded_to_half_inside_is_compared_at_half_tolerance(dynamo, tmp_path):
    # torch and the file each round to float16 once, apart: one float16 step (1.2e-4 here) used to be refused
    # at the example size itself, against float32's 1e-4 relative
    pytest.importorskip("onnxscript")
    import numpy as np
    import onnxruntime as ort

    import onnxpoolfix

    torch.manual_seed(0)
    module, x, out = HalfInside().eval(), torch.randn(1, 3, 11, 13), tmp_path / "m.onnx"
    onnxpoolfix.export(module, (x,), out, dynamo=dynamo)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    want = module(x).detach().numpy()
    assert np.abs(got - want).max() <= 2.0 ** -10 * np.abs(want).max()  # within float16's rounding


def test_a_half_file_that_is_wrong_is_still_refused(tmp_path):
    # the same AveragePool file, its output through float16: a factor of 0 instead of 1 is no rounding
    x = torch.randn(1, 2, 9, 9)

    class HalfPool(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.adaptive_avg_pool2d(x.half(), (3, 3)).float()

    path = _file(tmp_path, 0.0)
    m = onnx.load(path)
    m.graph.node.insert(0, helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16))
    m.graph.node.insert(1, helper.make_node("Cast", ["xh"], ["xf"], to=TensorProto.FLOAT))
    m.graph.node[2].input[0] = "xf"
    onnx.save(m, path)
    with pytest.raises(TorchMismatchError, match="differs from torch"):
        verify_against_torch(path, HalfPool(), (x,))

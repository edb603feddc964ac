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

"""The TorchScript exporter writes F.adaptive_avg_pool2d(h, 1) of an unbatched (C, H, W) input as a
GlobalAveragePool, which ONNX reads as (N, C, L): an average over W alone. The file looks like a batched 1D pool
to 1, so nothing in it tells the CLI; onnxpoolfix.export compares with torch, refuses it, and names the remedy
(the dynamo exporter, whose file is exact)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnxpoolfix
from onnxpoolfix.errors import TorchMismatchError


class UnbatchedToOne(nn.Module):
    def forward(self, h):
        return F.adaptive_avg_pool2d(h, 1) * h


class UnbatchedToOneAlone(nn.Module):
    """review21 F2: the pool's own output, whose shape differs (onnxruntime [3, 10, 1], torch [3, 1, 1])."""

    def forward(self, h):
        return F.adaptive_avg_pool2d(h, 1)


@pytest.mark.parametrize("module", [UnbatchedToOne, UnbatchedToOneAlone], ids=["times-h", "alone"])
@pytest.mark.parametrize("train", [False, True])
def test_the_torchscript_exporters_unbatched_pool_to_one_is_refused_naming_dynamo(tmp_path, module, train):
    m = module().train(train)
    path = tmp_path / "m.onnx"
    with pytest.raises(TorchMismatchError) as err:
        onnxpoolfix.export(m, (torch.randn(3, 10, 6),), path, dynamo=False)
    assert "dynamo=True" in err.value.hint and not path.exists()
    assert ("eval()" in err.value.hint) is train  # the training-mode hint keeps the general one behind it


def test_the_dynamo_exporters_unbatched_pool_to_one_is_exact(tmp_path):
    m, path = UnbatchedToOne().eval(), tmp_path / "m.onnx"
    onnxpoolfix.export(m, (torch.randn(3, 10, 6),), path, dynamo=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 10, 6)
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    want = x.numpy() * x.numpy().astype(np.float64).mean((1, 2), keepdims=True)  # numpy: each channel's mean
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""A ReduceMean of a whole tensor on the same source line as a pool is no adaptive pool (issue 22, item 5):
``F.adaptive_avg_pool2d(x, (5, 7)) * emb(ids).mean()`` used to report the mean as a suspect."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from export_cache import dynamo_export

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch
F = torch.nn.functional


class PoolTimesMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, x, ids):
        return F.adaptive_avg_pool2d(x, (5, 7)) * self.emb(ids).mean()


def test_a_whole_tensor_mean_on_the_pool_line_is_no_suspect(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = PoolTimesMean().eval()
    x, ids = torch.randn(1, 3, 10, 9), torch.tensor([[1, 2, 3]])
    result = onnxpoolfix.patch(dynamo_export(m, (x, ids)))
    assert result.report.suspects == [], result.report.suspects
    assert len(result.report.nodes) == 1 and "stack trace" in result.report.nodes[0].evidence
    import onnxruntime as ort

    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {i.name: v for i, v in zip(result.model.graph.input, (x.numpy(), ids.numpy()))})
    with torch.no_grad():
        np.testing.assert_allclose(got, m(x, ids).numpy(), rtol=1e-5, atol=1e-6)

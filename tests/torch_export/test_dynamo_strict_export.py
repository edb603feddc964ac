"""A strict ``torch.export`` (``strict=True``) keeps the rows of ``^`` Python 3.11 marks a traceback line with in
the nodes' stack traces: the caret row was read as the call's source line, an opaque one, and every frozen pool
refused (review25). The line above it is the call; patched, exact against torch at other sizes."""
from __future__ import annotations

import contextlib
import io

import onnx
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from dynamo_exports import assert_matches_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch


class Frozen(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 3))


def test_a_strict_exports_frozen_pool_is_read_from_its_call_and_exact(tmp_path):
    m, traced = Frozen().eval(), (1, 3, 16, 12)
    dims = {"x": {2: torch.export.Dim("H", min=2, max=256), 3: torch.export.Dim("W", min=2, max=256)}}
    ep = torch.export.export(m, (torch.randn(*traced),), dynamic_shapes=dims, strict=True)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(ep, (torch.randn(*traced),), str(tmp_path / "in.onnx"), dynamo=True, input_names=["x"])
    model = onnx.load(str(tmp_path / "in.onnx"))
    traces = [p.value for n in model.graph.node for p in n.metadata_props if p.key == "pkg.torch.onnx.stack_trace"]
    if not any(line.strip(" ").startswith("^") for t in traces for line in t.splitlines()):
        pytest.skip("this torch writes no caret rows into the stack traces")
    out = onnxpoolfix.patch(model, traced_shapes={"x": list(traced)}).model
    assert_matches_torch(out, m, [traced, (1, 3, 20, 9), (1, 3, 31, 12), (1, 3, 9, 7)], rtol=1e-5, atol=1e-6)

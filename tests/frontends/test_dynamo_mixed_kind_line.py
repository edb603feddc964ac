"""An average and a max pool called on one source line (the task's "several calls on one line"): torch writes a
global max pool as a ReduceMax, a global average as a ReduceMean, and only a call of that kind can have made it.
Before, every adaptive call on the line was read for it, so the average's written ``None`` (it follows the
input) made the max's ReduceMax "frozen where the computed size is 1", and that in turn made the average's own
frozen pool look like one of two calls: exact files refused (exit 4)."""
from __future__ import annotations

import pytest
from export_cache import dynamo_export
from helpers import compare_with_torch_at

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch
F = torch.nn.functional


class AvgNoneMaxGlobal(torch.nn.Module):
    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (None, 2)); b = F.adaptive_max_pool2d(x, 1)  # noqa: E702 - one line
        return a, b


class AvgPartMaxGlobal(torch.nn.Module):
    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (1, None)); b = F.adaptive_max_pool2d(x, 1)  # noqa: E702 - one line
        return a, b


class AvgComputedMaxGlobal(torch.nn.Module):
    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (1, x.shape[3] // 4)); b = F.adaptive_max_pool2d(x, 1)  # noqa: E702
        return a, b


@pytest.mark.parametrize("module", [AvgNoneMaxGlobal, AvgPartMaxGlobal], ids=lambda m: m.__name__)
@pytest.mark.parametrize("traced", [(32, 28), (17, 23)])
def test_a_global_max_beside_an_average_on_its_line_is_no_suspect(module, traced):
    torch.manual_seed(0)
    m = module().eval()
    dims = {"x": {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}}
    model = dynamo_export(m, (torch.randn(1, 3, *traced),), dynamic_shapes=dims, input_names=["x"])
    result = onnxpoolfix.patch(model)
    assert result.report.suspects == [], result.report.suspects
    ran = compare_with_torch_at(result.model, m, [traced, (traced[0] + 5, traced[1] + 2), (9, 40), (50, 11), (3, 3)])
    assert ran >= 4, ran  # H and W stay symbolic: OUT is compared away from the traced size


def test_the_averages_computed_size_on_that_line_still_refuses():
    """The kind filter narrows who made a node; it reads no more: the average's own size, computed from W, is
    still frozen at the traced size."""
    torch.manual_seed(0)
    dims = {"x": {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}}
    model = dynamo_export(AvgComputedMaxGlobal().eval(), (torch.randn(1, 3, 32, 28),), dynamic_shapes=dims,
                          input_names=["x"])
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as err:
        onnxpoolfix.patch(model)
    assert err.value.exit_code == 4
    maxima = {n.output[0] for n in model.graph.node if n.op_type == "ReduceMax"}
    left = onnxpoolfix.patch(model, allow_partial=True).report.suspects
    assert len(left) == 1 and left[0]["frozen"] and left[0]["result"] not in maxima, left

"""Two adaptive calls pooling one tensor under symbolic H/W: torch's export shares the nodes that read the
tensor's shape between them, and those keep the first call's source line. A region of the second call then
carried the first call's line too, and the first call's ``None`` (or computed size) was read as the second's:
its static output on a symbolic axis looked computed, and an exact file was refused (exit 4). A call whose
literal size differs from the region's output on some axis made another region. Found by a sweep of random
dynamo exports; OUT is compared with torch away from the traced size."""
from __future__ import annotations

import pytest
from export_cache import dynamo_export
from helpers import compare_with_torch_at

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch
F = torch.nn.functional


class TwoHeads(torch.nn.Module):
    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (3, None))  # a None first: it used to mark b's W as computed
        b = F.adaptive_avg_pool2d(x, (5, 6))
        return a, b


class PoolOfAnArea(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(F.interpolate(x, size=(8, 5), mode="area"), (None, 2))


class ComputedBeside(torch.nn.Module):
    """The first call's W is computed and its H equals the second's: which call a shared node's line
    stands for, the file cannot say."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (5, x.shape[3] // 4))
        b = F.adaptive_avg_pool2d(x, (5, 6))
        return a, b


DIMS = {"x": {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}}


@pytest.mark.parametrize("module", [TwoHeads, PoolOfAnArea], ids=lambda m: m.__name__)
@pytest.mark.parametrize("traced", [(32, 28), (17, 23)])
def test_a_call_of_another_size_is_not_read_for_the_region(module, traced):
    torch.manual_seed(0)
    m = module().eval()
    model = dynamo_export(m, (torch.randn(1, 3, *traced),), dynamic_shapes=DIMS, input_names=["x"])
    result = onnxpoolfix.patch(model)
    assert result.report.suspects == [], result.report.suspects
    ran = compare_with_torch_at(result.model, m, [traced, (traced[0] + 5, traced[1] + 2), (9, 40), (50, 11), (6, 7),
                                                (64, 3)])
    assert ran >= 5, ran


def test_a_call_whose_sizes_do_not_rule_it_out_still_refuses():
    torch.manual_seed(0)
    model = dynamo_export(ComputedBeside().eval(), (torch.randn(1, 3, 17, 23),), dynamic_shapes=DIMS,
                          input_names=["x"])
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as err:
        onnxpoolfix.patch(model)
    assert err.value.exit_code == 4

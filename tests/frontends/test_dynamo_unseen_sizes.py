"""Frozen dynamo pools whose output size the source line does not show are refused, never read off the traced
size (review12: each of these was exit 0, and OUT the traced size's output at every size where torch's follows
the input). The torch comparison shows what a file read that way would get wrong."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import export_symbolic_hw  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.errors import UnsupportedNodeError  # noqa: E402

pytestmark = pytest.mark.torch

TRACED = (16, 12)  # 16 -> 8 and 12 -> 4 divide: every pool below is one frozen AveragePool


class SizeInAVariable(nn.Module):
    def forward(self, x):
        s = (x.shape[2] // 2, 4)
        return F.adaptive_avg_pool2d(x, s)


class MergedByTheExport(nn.Module):
    """Two calls with the same windows at 16x12: torch writes one AveragePool (the first call's metadata) and an
    Identity without metadata for the second result."""

    def forward(self, x):
        a = F.adaptive_avg_pool2d(x, (None, 4))
        b = F.adaptive_avg_pool2d(x, (16, 4))
        return a, b


class ops:  # noqa: N801 - a user's namespace, as `helpers.relu` in another file
    @staticmethod
    def relu(x):
        return F.adaptive_avg_pool2d(x * 2, (None, 4))


class HelperNamedLikeATorchOp(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (16, 4)), ops.relu(x)


class ModuleBuiltOnTheLine(nn.Module):
    def forward(self, x):
        return nn.AdaptiveAvgPool2d((x.shape[2] // 2, 4))(x)


@pytest.mark.parametrize("module", [SizeInAVariable, MergedByTheExport, HelperNamedLikeATorchOp,
                                    ModuleBuiltOnTheLine], ids=lambda m: m.__name__)
def test_a_size_the_line_does_not_show_is_refused(module):
    m = module().eval()
    at_other = torch.randn(1, 3, 20, 12)
    with torch.no_grad():
        traced_shapes = [tuple(t.shape) for t in _outputs(m(torch.randn(1, 3, *TRACED)))]
        other_shapes = [tuple(t.shape) for t in _outputs(m(at_other))]
    assert traced_shapes != other_shapes  # some output follows the input: the traced size's is wrong there
    model = export_symbolic_hw(m, TRACED)
    with pytest.raises(UnsupportedNodeError) as err:
        patch(model, traced_shapes={"x": [1, 3, *TRACED]})
    assert err.value.exit_code == 4 and "onnxpoolfix.export" in err.value.hint


def _outputs(y):
    return y if isinstance(y, tuple) else (y,)

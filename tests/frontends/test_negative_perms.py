"""torch's TorchScript exporter (2.9 to 2.14) writes permute's and movedim's negative axes into a Transpose's perm
as given (``[0, 2, 3, -3]``), which ONNX refuses. Reading them as torch means them is not enough: torch's own inference over
such a perm can size what follows from made-up dims (review21 F0: ``MaxPool(kernel_shape=[49, 3])`` over a
symbolic W, exit 0 and 1.4 off at 60x60 when onnxpoolfix read the perm). So every such file is refused, at the
stage that meets it first (the checker, shape inference, the check of the layers after), naming the remedy, and
the remedy (non-negative axes) is exact against torch."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from onnxpoolfix.cli import main


class MovedimBetweenPools(nn.Module):
    def __init__(self, negative=True):
        super().__init__()
        self.axes = (-3, -1) if negative else (1, 3)

    def forward(self, x):
        h = F.adaptive_avg_pool2d(x, (2, 4))
        return F.adaptive_max_pool2d(h.movedim(*self.axes), (4, 11)).movedim(*self.axes[::-1])


class PermuteAfterAPool(nn.Module):
    def __init__(self, negative=True):
        super().__init__()
        self.perm = (0, -2, -1, 1) if negative else (0, 2, 3, 1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (3, 4)).permute(*self.perm) * 2


class PermutedInputPooled(nn.Module):
    def __init__(self, negative=True):
        super().__init__()
        self.perm = (0, -1, 1, 2) if negative else (0, 3, 1, 2)

    def forward(self, x):
        return F.adaptive_max_pool2d(x.permute(*self.perm), (4, 3))


class ExporterPoolAfterANegativePerm(nn.Module):
    """review21 F0: torch sizes the first pool from its inference of the bad perm (a fixed kernel over W)."""

    def __init__(self, negative=True):
        super().__init__()
        self.perm = (0, -2, -1, 1) if negative else (0, 2, 3, 1)

    def forward(self, x):
        return F.adaptive_max_pool2d(x.permute(*self.perm), (1, 1)), F.adaptive_avg_pool2d(x, (5, 3))


class PermutedInputOnly(nn.Module):
    def forward(self, x):
        return x.permute(0, -1, 1, 2).relu()


MODULES = [MovedimBetweenPools, PermuteAfterAPool, PermutedInputPooled, ExporterPoolAfterANegativePerm]


def _export(module, dynamic, path):
    torch.onnx.export(module, (torch.randn(2, 3, 12, 10),), path, dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}} if dynamic else None,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_negative_perm_is_refused_naming_the_remedy(tmp_path, module, dynamic):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    _export(module(), dynamic, src)
    if not any(p < 0 for n in onnx.load(str(src)).graph.node if n.op_type == "Transpose"
               for a in n.attribute for p in a.ints):
        pytest.skip("this torch writes the perm non-negative")
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code in (3, 4, 5) and not out.exists(), r.output
    assert "non-negative" in r.stderr and "dynamo=True" in r.stderr


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_remedy_non_negative_axes_is_exact_against_torch(tmp_path, module):
    torch.manual_seed(0)
    m = module(negative=False).eval()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    _export(m, True, src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for shape in [(2, 3, 12, 10), (1, 3, 13, 5), (3, 3, 4, 17), (1, 3, 60, 60)]:
        x = torch.randn(*shape)
        want = m(x)
        got = sess.run(None, {"x": x.numpy()})
        for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_a_negative_perm_in_a_model_without_leftovers_is_refused_naming_the_remedy(tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    buf = io.BytesIO()
    torch.onnx.export(PermutedInputOnly(), (torch.randn(2, 3, 7, 9),), buf, dynamo=False, input_names=["x"])
    src.write_bytes(buf.getvalue())
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 3 and not out.exists()
    assert "non-negative" in r.stderr and "dynamo=True" in r.stderr

"""review20 case 0: after a leftover, whose rank the TorchScript exporter does not know, it writes permute's and
movedim's negative axes into the Transpose's perm as given (``[0, 2, 3, -3]``), which ONNX refuses: onnx's shape
inference stopped there, and the next pool's input was unknown (exit 4), or the check refused the layers after
(exit 5). Each perm is normalized (its length is the rank) and OUT is compared with torch itself."""
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

from onnxpoolfix import patch
from onnxpoolfix.cli import main


class MovedimBetweenPools(nn.Module):
    def forward(self, x):
        h = F.adaptive_avg_pool2d(x, (2, 4))
        return F.adaptive_max_pool2d(h.movedim(-3, -1), (4, 11)).movedim(-1, -3)


class PermuteWithNegativeAxes(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (3, 4)).permute(0, -2, -1, 1) * 2


def _export(module, dynamic):
    buf = io.BytesIO()
    torch.onnx.export(module, (torch.randn(2, 3, 7, 9),), buf, dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}} if dynamic else None,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("module", [MovedimBetweenPools, PermuteWithNegativeAxes], ids=lambda m: m.__name__)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_negative_perm_axes_after_a_leftover_are_read_as_torch_reads_them(module, dynamic):
    model = _export(module(), dynamic)
    assert any(p < 0 for n in model.graph.node if n.op_type == "Transpose" for p in n.attribute[0].ints)
    result = patch(model)
    assert [n.code for n in result.report.notes].count("negative-perms") == 1
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(2, 3, 7, 9)] + ([(1, 3, 13, 5), (3, 3, 4, 17), (1, 3, 1, 2)] if dynamic else []):
        x = torch.randn(*shape)
        want = module()(x).numpy()
        (got,) = sess.run(None, {"x": x.numpy()})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_inplace_patches_the_callers_model():
    model = _export(PermuteWithNegativeAxes(), False)
    result = patch(model, inplace=True)
    assert result.model is model and not any(n.domain == "org.pytorch.aten" for n in model.graph.node)
    assert all(p >= 0 for n in model.graph.node if n.op_type == "Transpose" for p in n.attribute[0].ints)


class PermutedInputPooled(nn.Module):
    """The Transpose reads the input, whose rank torch knows, and still gets ``[0, -1, 1, 2]``: the ONNX checker
    refuses the file before any front end runs (review20 cases 45, 83: exit 3)."""

    def forward(self, x):
        return F.adaptive_max_pool2d(x.permute(0, -1, 1, 2), (4, 3))


class PermutedInputOnly(nn.Module):
    def forward(self, x):
        return x.permute(0, -1, 1, 2).relu()


def test_the_cli_reads_negative_perm_axes_the_checker_refuses_and_matches_torch(tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_export(PermutedInputPooled(), False), src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 0, r.output
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 3, 7, 9)
    np.testing.assert_array_equal(sess.run(None, {"x": x.numpy()})[0], PermutedInputPooled()(x).numpy())


def test_a_negative_perm_in_a_model_without_leftovers_is_refused_naming_the_remedy(tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_export(PermutedInputOnly(), False), src)
    r = CliRunner().invoke(main, [str(src), str(out)])
    assert r.exit_code == 3 and not out.exists()
    assert "non-negative" in r.stderr and "dynamo=True" in r.stderr

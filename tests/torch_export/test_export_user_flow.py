"""The two-step flow from PyTorch: the caller's own ``torch.onnx.export(..., dynamo=True,
custom_translation_table=onnxpoolfix.translation_table())``, then the command line ``onnxpoolfix IN OUT`` on
the file it wrote; and ``onnxpoolfix.export`` leaving the graph's other outputs as torch computes them.

Each result is compared here, in onnxruntime, with the torch module itself (not with the tool's own checks).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxpoolfix
from onnxpoolfix.frontends.leftovers import find_pool_nodes

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _user_export(module, args: tuple, path: Path, **kwargs) -> onnx.ModelProto:
    """What a caller writes: torch's default exporter, onnxpoolfix's table, nothing else of onnxpoolfix."""
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter prints its progress
        torch.onnx.export(module, args, str(path), dynamo=True, external_data=False,
                          custom_translation_table=onnxpoolfix.translation_table(), **kwargs)
    model = onnx.load(str(path))
    assert find_pool_nodes(model.graph), "the table should have kept the adaptive pool as a leftover node"
    return model


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxpoolfix", *args], capture_output=True, text=True, env=ENV,
                          timeout=300)


def _run_ort(path: Path, *xs: torch.Tensor) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), xs)})


def _torch_outs(module, *xs: torch.Tensor) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*xs))]


def _assert_standard(path: Path) -> onnx.ModelProto:
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert not find_pool_nodes(model.graph)
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    assert "GatherND" not in {n.op_type for n in model.graph.node}  # no decomposition
    return model


class ConvMaxWithIndices(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveMaxPool2d((5, 7), return_indices=True)

    def forward(self, x):
        return self.pool(self.conv(x))


def test_user_export_then_cli_max_pool_with_indices_static(tmp_path: Path) -> None:
    """11x13 -> 5x7: non-uniform windows on both axes; the indices must equal torch's, element for element."""
    m = ConvMaxWithIndices().eval()
    x = torch.randn(1, 3, 11, 13)
    exported, out = tmp_path / "max.onnx", tmp_path / "max.fixed.onnx"
    leftover = _user_export(m, (x,), exported, output_names=["values", "indices"])
    (node,) = find_pool_nodes(leftover.graph)
    assert node.op == "adaptive_max_pool2d" and node.indices_output == "indices"
    r = _cli(str(exported), str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    model = _assert_standard(out)
    assert [o.name for o in model.graph.output] == ["values", "indices"]
    for probe in (x, torch.randn(1, 3, 11, 13)):
        (values, indices), (want_values, want_indices) = _run_ort(out, probe), _torch_outs(m, probe)
        np.testing.assert_allclose(values, want_values, rtol=1e-6, atol=1e-6)
        assert indices.dtype == np.int64
        np.testing.assert_array_equal(indices, want_indices)


class ConvArea(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.interpolate(self.conv(x), size=(5, 7), mode="area")


def test_user_export_then_cli_area_interpolation_symbolic_h_w(tmp_path: Path) -> None:
    """F.interpolate(mode="area") with torch.export.Dim H/W: the CLI's output must hold at sizes other than the
    traced one (a frozen decomposition is right only at the traced size)."""
    m = ConvArea().eval()
    H, W = torch.export.Dim("H", min=2, max=64), torch.export.Dim("W", min=2, max=64)
    exported, out = tmp_path / "area.onnx", tmp_path / "area.fixed.onnx"
    leftover = _user_export(m, (torch.randn(1, 3, 11, 13),), exported, dynamic_shapes={"x": {2: H, 3: W}})
    assert [n.op for n in find_pool_nodes(leftover.graph)] == ["adaptive_avg_pool2d"]
    r = _cli(str(exported), str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    model = _assert_standard(out)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[2:] == ["H", "W"], dims
    # traced; uniform (10 -> 5, 14 -> 7); non-uniform (23 -> 5, 9 -> 7); upsampling (3 -> 5, 4 -> 7); large
    for shape in [(1, 3, 11, 13), (1, 3, 10, 14), (1, 3, 23, 9), (1, 3, 3, 4), (1, 3, 64, 50)]:
        x = torch.randn(*shape)
        (got,), (want,) = _run_ort(out, x), _torch_outs(m, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"at {shape}")


class PoolAndOthers(nn.Module):
    """A pooled branch next to outputs that have nothing to do with pooling: a cumulative sum of a second
    input, top-k indices of the first, and the pooled features through a linear layer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((3, 5))
        self.head = nn.Linear(4 * 3 * 5, 6)

    def forward(self, x, y):
        pooled = self.pool(self.conv(x))
        top = torch.topk(x.flatten(1), 4, dim=1).indices
        return pooled, self.head(pooled.flatten(1)), torch.cumsum(y, dim=1) * 2.0, top


@pytest.mark.parametrize("dynamo", [True, False])
def test_export_keeps_the_unrelated_outputs(tmp_path: Path, dynamo: bool) -> None:
    m = PoolAndOthers().eval()
    x, y = torch.randn(1, 3, 11, 13), torch.randn(2, 9)
    out = tmp_path / "m.onnx"
    onnxpoolfix.export(m, (x, y), out, dynamo=dynamo, input_names=["x", "y"],
                       output_names=["pooled", "logits", "csum", "top"])
    model = _assert_standard(out)
    assert [o.name for o in model.graph.output] == ["pooled", "logits", "csum", "top"]
    ops = {n.op_type for n in model.graph.node}
    assert {"CumSum", "TopK"} <= ops, ops
    for probe in ((x, y), (torch.randn(1, 3, 11, 13), torch.randn(2, 9))):
        got, want = _run_ort(out, *probe), _torch_outs(m, *probe)
        assert len(got) == len(want) == 4
        for name, g, w in zip(("pooled", "logits", "csum"), got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(got[3], want[3])

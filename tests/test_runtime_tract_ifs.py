"""tract and the default target's NaN/inf guards: tract 0.23 wires every `If` of a graph under the one name "If",
so a graph holding two fails its load ("Duplicate node name"), whatever joins them (two pools of one tensor,
a pool of a pool). The other targets write no If and are exact there; the report's If note names tract where
OUT's graph holds two. A refusal asserted as one: the test fails the day tract takes it (docs/targets.md)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
tract = pytest.importorskip("tract")
F = torch.nn.functional


class TwoOfOne(torch.nn.Module):  # two pools of one tensor, added: two guards side by side
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (5, 7)) + F.adaptive_max_pool2d(x, (5, 7))


class PoolOfPool(torch.nn.Module):  # a pool of a pool: one guard's output feeds the next
    def forward(self, x):
        return F.adaptive_avg_pool2d(F.adaptive_avg_pool2d(x, (6, 9)), (5, 7))


def _export(module: torch.nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
        return onnx.load(path)


def _tract(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(model, path)
        inference = tract.onnx().load(str(path))
        inference.set_input_fact(0, ",".join(map(str, x.shape)) + ",f32")
        return inference.into_model().into_runnable().run([x])[0].to_numpy()


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("module", [TwoOfOne, PoolOfPool], ids=["side_by_side", "chained"])
def test_two_guards_in_one_graph(module, target: str) -> None:
    x = torch.randn(2, 3, 17, 13)
    want = module()(x).numpy()
    result = onnxpoolfix.patch(_export(module(), x), target=target)
    tops = [n for n in result.model.graph.node if n.op_type == "If"]
    (note,) = [n for n in result.report.notes if n.code == "if-guards"] or [None]
    if target == "onnxruntime":
        assert len(tops) == 2 and note is not None and "tract" in note and note.data["top_level_ifs"] == 2
        with pytest.raises(tract.TractError, match="Duplicate node name: If"):
            _tract(result.model, x.numpy())
    else:
        assert not tops and note is None
        np.testing.assert_allclose(_tract(result.model, x.numpy()), want, rtol=1e-5, atol=1e-5)

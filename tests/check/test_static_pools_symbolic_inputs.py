"""Static pooled axes behind symbolic input dims (a resize to a fixed size before the pool, exported with
dynamic_axes on H/W): the check used to stop at "cannot choose sizes for the check" (exit 4), and
onnxpoolfix.export(dynamo=False) refused such a model, though the pools are the same at every input size.
The check now runs at the first probe size the model accepts; a model that runs at none is still refused."""
from __future__ import annotations

import io
import math
import warnings

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

import onnxpoolfix
from onnxpoolfix.errors import ShapeError


class ResizeThenPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.interpolate(self.conv(x), size=(10, 11), mode="bilinear"), (3, 4))


class SquareTokens(nn.Module):
    """PerceptionLM's projector pool: h = int(sqrt(tokens)), which the TorchScript tracer freezes."""

    def forward(self, x):
        tokens = x.flatten(2).transpose(1, 2)
        b, n, c = tokens.shape
        h = int(math.sqrt(n))
        return F.adaptive_avg_pool2d(tokens.transpose(1, 2).reshape(b, c, h, h), (h // 2, h // 2))


def _export(module, shape) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(*shape),), f, dynamo=False, input_names=["x"],
                          opset_version=17, operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    return onnx.load_from_string(f.getvalue())


def _max_error(module, model, shapes) -> float:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 0.0
    for shape in shapes:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        (got,) = sess.run(None, {"x": x})
        worst = max(worst, float(np.abs(got - want).max()))
    return worst


def test_a_static_pool_behind_symbolic_dims_is_checked_at_a_size_that_runs():
    torch.manual_seed(0)
    module = ResizeThenPool()
    result = onnxpoolfix.patch(_export(module, (1, 3, 13, 17)))
    assert result.report.check_passed and "the first size tried that the model runs at" in result.report.check_note
    assert _max_error(module, result.model, [(1, 3, 13, 17), (2, 3, 40, 9), (1, 3, 5, 64)]) < 1e-5


def test_export_through_torchscript_with_dynamic_axes_no_longer_refuses_it(tmp_path):
    torch.manual_seed(0)
    module = ResizeThenPool().eval()
    onnxpoolfix.export(module, (torch.randn(1, 3, 13, 17),), tmp_path / "m.onnx", dynamo=False,
                       input_names=["x"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    assert _max_error(module, onnx.load(tmp_path / "m.onnx"), [(2, 3, 31, 8)]) < 1e-5


def test_a_graph_that_runs_at_none_of_the_sizes_is_still_refused():
    model = _export(SquareTokens(), (1, 8, 15, 15))  # the tracer froze h = 15: 225 tokens only
    with pytest.raises(ShapeError) as err:
        onnxpoolfix.patch(model)
    assert "ran at none of the sizes tried" in str(err.value) and "check_shapes" in err.value.hint


def test_export_names_its_own_arguments_when_no_size_runs(tmp_path):
    """The TorchScript path has dynamic_axes, no Dim ranges and no input_shapes=."""
    with pytest.raises(ShapeError) as err:
        onnxpoolfix.export(SquareTokens().eval(), (torch.randn(1, 8, 15, 15),), tmp_path / "m.onnx", dynamo=False,
                           input_names=["x"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    hint = err.value.hint
    assert "input_shapes" not in hint and "dynamic_shapes" not in hint and "check_shapes" not in hint, hint
    assert "dynamic_axes" in hint and "check=False" in hint, hint
    assert not (tmp_path / "m.onnx").exists()

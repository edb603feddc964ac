"""float16: the check compares with what the replaced subgraph really consumes (issue 22, item 4).

onnxruntime runs a float16 Conv/ReLU in float32 and drops the Cast pair between the ReLU and the
lowering's own Cast to float32, so the pool consumes the unrounded ReLU, while the tensor fetched for the
reference is rounded to float16. A correct replacement must pass at every seed; a wrong one must still fail
and be called a bug.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from export_cache import dynamo_export

import onnxpoolfix
from onnxpoolfix import reference

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional
pytestmark = pytest.mark.torch


class ConvReluPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.pool(y), F.interpolate(y, size=(6, 4), mode="area")


def _module(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return ConvReluPools().eval().half()


def _dims():
    return {"x": {2: torch.export.Dim("H", min=8, max=64), 3: torch.export.Dim("W", min=8, max=64)}}


@pytest.fixture(scope="module")
def exported() -> dict[int, onnx.ModelProto]:
    """The dynamo export with onnxpoolfix's table (the aten nodes still in), for two weight seeds."""
    return {seed: dynamo_export(_module(seed), (torch.randn(1, 3, 20, 22).half(),), dynamic_shapes=_dims(),
                                custom_translation_table=onnxpoolfix.translation_table())
            for seed in (0, 3)}


@pytest.mark.parametrize("weights", [0, 3])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_correct_half_pools_pass_at_every_seed(exported, weights: int, seed: int) -> None:
    result = onnxpoolfix.patch(exported[weights], seed=seed)
    assert result.report.check_passed and [n.lowering for n in result.report.nodes] == ["dynamic", "dynamic"]
    # and the file is right: each pool's output against the reference of the tensor onnxruntime fetches
    # for it, run alone (the rounding question does not arise there)
    import onnxruntime as ort

    model = result.model
    model.graph.output.append(onnx.helper.make_tensor_value_info("relu", onnx.TensorProto.FLOAT16, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed).standard_normal((1, 3, 13, 17)).astype(np.float16)
    pooled, area, relu = sess.run(None, {"x": x})
    for got, size in ((pooled, (5, 7)), (area, (6, 4))):
        ref = reference.adaptive_avg_pool(relu.astype(np.float64), size)
        # within a float16 ulp of the output plus the input's own rounding (half an ulp of |relu| <= 4)
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


def test_export_in_half_precision_passes_and_matches_torch(tmp_path: Path) -> None:
    m = _module(0)
    out = tmp_path / "half.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 20, 22).half(),), out, dynamic_shapes=_dims(),
                                external_data=False)
    assert report.check_passed and "matched torch" in report.check_note


def test_a_wrong_half_replacement_is_still_called_a_bug(exported, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-run alone must not excuse a replacement that is wrong: shift the reference the check holds
    the output to by a window's worth, and the failure stands, blamed on onnxpoolfix."""
    real = reference.adaptive_avg_pool

    def shifted(x, size):
        return real(np.roll(x, 1, axis=-1), size)

    monkeypatch.setattr(reference, "adaptive_avg_pool", shifted)
    with pytest.raises(onnxpoolfix.CheckFailedError) as info:
        onnxpoolfix.patch(exported[0], seed=0)
    assert "bug in onnxpoolfix" in info.value.hint

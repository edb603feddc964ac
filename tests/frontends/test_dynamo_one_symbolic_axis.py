"""A dynamo file whose pooled tensor is symbolic on one pooled axis only (an OCR line: the height fixed, the width
dynamic; or torch specialised the other axis): the proof's size search bound the symbolic axis's classes but
found no size at all for the static one, tried nothing, and refused an exact file (exit 4, "0 sizes tried")
unless the user gave --traced-shape. The static axis has one length at every binding; OUT is compared with torch
at many lengths of the symbolic one."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from export_cache import dynamo_export

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.torch
F = torch.nn.functional


class Pool(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size = size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.size)


class Area(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, size=(5, 9), mode="area")


CASES = [(Pool((3, 5)), "pool_3x5"), (Pool((1, 5)), "pool_1x5"), (Pool((40, 3)), "pool_40x3"),
         (torch.nn.AdaptiveAvgPool2d((2, 40)), "module_2x40"), (Area(), "area_5x9")]


@pytest.mark.parametrize("symbolic", [3, 2], ids=["width", "height"])
@pytest.mark.parametrize("module", [c[0] for c in CASES], ids=[c[1] for c in CASES])
def test_a_pool_symbolic_on_one_axis_is_proven_and_exact(module, symbolic):
    traced = (17, 23)
    dims = ({symbolic: torch.export.Dim("n", min=2, max=512)},)
    model = dynamo_export(module.eval(), (torch.randn(1, 3, *traced),), dynamic_shapes=dims, input_names=["x"])
    result = onnxpoolfix.patch(model)
    assert [n.lowering for n in result.report.nodes] == ["dynamic"], result.report.nodes
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n in (traced[symbolic - 2], 2, 3, 5, 9, 11, 40, 41, 80, 97):
        shape = [1, 3, *traced]
        shape[symbolic] = n
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = sess.run(None, {"x": x})
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=str(shape))

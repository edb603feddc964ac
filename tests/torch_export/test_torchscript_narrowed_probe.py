"""onnxpoolfix.export(dynamo=False, dynamic_axes=...) where torch.export, probing the module, narrows a dim by more
than the sizes compared one by one: an in-place Hardswish after each strided convolution makes torch.export guard
every feature map above 1 (a stride computation, no branch of the module), so seven stride-2 blocks give W in
[129, inf]. The TorchScript file keeps to no such range (it is exact at W = 2 .. 129, checked here), yet a gap of
127 sizes cannot be compared size by size: still refused, but the error says the range is torch.export's probe,
not the file's, and why the file was not compared there (it used to say the file follows the module only there).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
pytestmark = pytest.mark.torch


class _Strided(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.f = nn.Sequential(*[nn.Sequential(nn.Conv2d(3 if i == 0 else 4, 4, 3, 2, 1), nn.BatchNorm2d(4),
                                               nn.Hardswish(inplace=True)) for i in range(n)])
        self.p = nn.AdaptiveAvgPool2d((1, None))

    def forward(self, x):
        return self.p(self.f(x))


def _probe_low_end(m, x) -> int:
    D = torch.export.Dim.DYNAMIC
    ep = torch.export.export(m, (x,), dynamic_shapes=({2: D, 3: D},), strict=False)
    return max(int(vr.lower) for vr in ep.range_constraints.values())


def test_a_wide_gap_torch_export_narrowed_is_refused_as_the_probes_not_the_files(tmp_path: Path) -> None:
    m, x = _Strided(7).eval(), torch.randn(1, 3, 384, 384)
    if _probe_low_end(m, x) != 129:
        pytest.skip("this torch's export does not narrow the in-place Hardswish stack to [129, inf]")
    out = tmp_path / "m.onnx"
    with pytest.raises(onnxpoolfix.ShapeError) as e:
        onnxpoolfix.export(m, (x,), out, dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    message = str(e.value)
    assert "torch.export, probing the module, narrowed it to [129, inf]" in message
    assert "TorchScript file need not keep to that range" in message and "one by one (64)" in message
    assert "the exported file follows the module only there" not in message
    assert not out.exists()
    # the premise: the TorchScript file, patched, is the module at sizes the probe's range leaves out
    raw, fixed = tmp_path / "raw.onnx", tmp_path / "fixed.onnx"
    torch.onnx.export(m, (x,), str(raw), dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    onnx.save(onnxpoolfix.patch(onnx.load(str(raw))).model, str(fixed))
    sess = ort.InferenceSession(str(fixed), providers=["CPUExecutionProvider"])
    for h, w in [(40, 2), (40, 3), (2, 2), (40, 64), (40, 128), (40, 129), (384, 384)]:
        xx = torch.randn(1, 3, h, w)
        np.testing.assert_allclose(sess.run(None, {"x": xx.numpy()})[0], m(xx).detach().numpy(), atol=1e-5)


def test_verify_false_says_the_gap_was_not_compared(tmp_path: Path) -> None:
    """A gap of 3 (W in [5, inf]) is compared with torch under verify=True and written; verify=False cannot
    compare it, and the refusal says so rather than that the file follows the module only in [5, inf]."""
    m, x = _Strided(2).eval(), torch.randn(1, 3, 12, 12)
    if _probe_low_end(m, x) != 5:
        pytest.skip("this torch's export does not narrow the in-place Hardswish stack to [5, inf]")
    onnxpoolfix.export(m, (x,), tmp_path / "a.onnx", dynamo=False, input_names=["x"],
                       dynamic_axes={"x": {2: "H", 3: "W"}})
    with pytest.raises(onnxpoolfix.ShapeError, match=r"narrowed it to \[5, inf\]; the TorchScript file need not keep "
                                                     r"to that range, but verify=False compares nothing with torch"):
        onnxpoolfix.export(m, (x,), tmp_path / "b.onnx", dynamo=False, verify=False, input_names=["x"],
                           dynamic_axes={"x": {2: "H", 3: "W"}})

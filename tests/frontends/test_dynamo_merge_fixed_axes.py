"""review50 F3: two calls torch's export merged (the same windows at the traced size) over an axis the file fixes.
``for s in (x.size(2) // 4, x.size(2) // 4): F.interpolate(x, size=s, mode="area")`` exported with N and L declared
dynamic: torch specialises L to 23 and keeps N symbolic. With ``--traced-shape`` the region was found and made a merge
suspect ("another adaptive call ... may stand behind it"), exit 4, a sentence false for a file whose pooled axis
takes one length: every twin has the windows of that length. Written as a pool of 23 now, exact against torch at
every batch; without ``--traced-shape`` the file is left as it is (right as written)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn
F = torch.nn.functional

import onnx
import onnxruntime as ort
from export_cache import dynamo_export

from onnxpoolfix.cli import main


class TwinAreaCalls(nn.Module):
    def forward(self, x):
        ys = []
        for s in (x.size(2) // 4, x.size(2) // 4): ys.append(F.interpolate(x, size=s, mode="area").flatten(2))  # noqa: E701
        return torch.cat(ys, 2)


@pytest.mark.parametrize("flags", [[], ["--traced-shape", "x:2,3,23"]], ids=["no_traced_shape", "traced_shape"])
def test_a_merge_over_an_axis_the_file_fixes_is_written(flags, tmp_path):
    module = TwinAreaCalls().eval()
    dims = {"x": {0: torch.export.Dim("N", min=2), 2: torch.export.Dim("L", min=2)}}
    model = dynamo_export(module, (torch.randn(2, 3, 23),), dynamic_shapes=dims, input_names=["x"])
    shape = model.graph.input[0].type.tensor_type.shape.dim
    assert shape[0].dim_param and shape[2].dim_value == 23, "torch no longer fixes L: the case is gone"
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), *flags])
    assert r.exit_code == 0, r.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for n in (1, 2, 5):
        x = torch.randn(n, 3, 23, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], want, rtol=1e-6, atol=1e-6)

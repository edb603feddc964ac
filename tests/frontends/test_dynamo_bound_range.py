"""review65: ``--input-shape`` binding a dynamo file's OUT outside the range torch.export proved the file's program for
(its ``range_constraints``: a Python branch on a size narrows it, silently under ``Dim.DYNAMIC``, and the file holds the
branch taken alone). OUT bound there accepts that size alone, where the file is not torch's model: refused (exit 4)."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import assert_matches_torch, export_dynamic_hw  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.cli import main  # noqa: E402
from onnxpoolfix.errors import ShapeError  # noqa: E402
from onnxpoolfix.frontends.dynamo.ranges import RANGE_KEY, outside_ranges  # noqa: E402

pytestmark = pytest.mark.torch


class Branchy(nn.Module):
    """A Python branch on a size: torch.export narrows H to [17, oo) under Dim.DYNAMIC (silently) and the file holds
    only the branch taken, so below 17 it is not torch's model (review56 F7)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        if x.shape[2] > 16:
            x = x * 2
        return self.pool(x)


def test_binding_outside_the_exported_range_refused(tmp_path):
    """review65: --input-shape 1x3x16x15 (a size the pooling regions are right at, but outside the file's
    range_constraints) bound OUT at a size where the file runs the other branch: exit 0 with an OUT 0.95 off torch at
    the one size it accepts. Refused now (exit 4, nothing written); a size inside the range still binds, exact."""
    module = Branchy().eval()
    model = export_dynamic_hw(module, (17, 13))
    for target in ("onnxruntime", "portable"):
        try:
            out = patch(model, target=target, input_shapes={"x": [1, 3, 16, 15]}).model
        except ShapeError:
            continue
        torch.manual_seed(1)
        assert_matches_torch(out, module, [[1, 3, 16, 15]], rtol=1e-5, atol=1e-6)  # what exit 0 promises
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(dst), "--input-shape", "x:1,3,16,15"])
    assert r.exit_code == 4 and not dst.exists(), r.output
    r = patch(model, target="portable", input_shapes={"x": [1, 3, 20, 15]})
    assert [d.dim_value for d in r.model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 20, 15]
    torch.manual_seed(1)
    assert_matches_torch(r.model, module, [[1, 3, 20, 15]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("env, want", [
    ({"s53": 40, "s0": 30}, [("s53", 40, "41", "256")]),
    ({"s53": 41, "s0": 256}, []),
    ({"s53": 300, "s0": 3}, [("s53", 300, "41", "256"), ("s0", 3, "4", "256")]),
    ({"H": 12}, []),  # a named Dim's symbols are not the inputs' dim names: nothing said
])
def test_sizes_outside_the_narrowed_ranges(env, want):
    """review65: a binding --input-shape gives, checked against the file's range_constraints (values by hand)."""
    model = onnx.ModelProto()
    model.metadata_props.add(key=RANGE_KEY, value="{s53: VR[41, 256], s0: VR[4, 256]}")
    assert outside_ranges(model, env) == want

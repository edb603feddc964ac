"""review75: a refusal of a dynamo file says what would work, and nothing that would not.

1. A binding the graph contradicts: the hint named a size the region was proven at even where that size lies
   outside the range torch.export proved the file's program for (review65: 12x13 pointed at x:1,3,16,8 where H >=
   17), which a binding then refuses in turn. Every size it names now binds, exact against torch.
2. One input of two bound: refused as a contradiction of the graph by the other input's region, with no word of that
   input (review65 F4). It asks for that input's size now (data ``unbound``, ``argument``: the knob).
3. Two pools flattened under a dynamic batch (review69's d_batch3): OUT fails after the replaced pools at other sizes
   (the flatten's length was computed at the traced size), and the hint offered check sizes, which change nothing
   there. The input file runs there: the hint names what does work (onnxpoolfix.export, or a binding at the export's
   example input).
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import assert_matches_torch  # noqa: E402
from export_cache import dynamo_export  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.check.whole import runs_through  # noqa: E402
from onnxpoolfix.cli import main  # noqa: E402
from onnxpoolfix.errors import CheckFailedError, ShapeError  # noqa: E402
from onnxpoolfix.graph.shapes import light_copy  # noqa: E402

pytestmark = pytest.mark.torch
D = torch.export.Dim


class Branchy(nn.Module):
    """A Python branch on H: torch.export narrows H to [17, ..], the file holds only the doubling branch."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        if x.shape[2] > 16:
            x = x * 2
        return self.pool(x)


class TwoIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.p, self.q = nn.AdaptiveAvgPool2d((5, 7)), nn.AdaptiveAvgPool2d((3, 2))

    def forward(self, x, y):
        return self.p(x) + self.q(y).sum()


class TwoFlattened(nn.Module):
    def forward(self, x):
        a, b = F.adaptive_avg_pool2d(x, (4, 3)), F.adaptive_avg_pool2d(x, (3, 4))
        return a.flatten(1) * 2 + b.flatten(1)


def _cli(model, tmp_path, *args):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(dst), *args])
    assert r.exit_code == 0 or not dst.exists(), r.output
    return r


@pytest.mark.parametrize("how", ["dynamic", "named"])
def test_a_contradiction_names_no_size_outside_the_proved_range(how, tmp_path):
    """12x13 is refused (the region is not adaptive pooling there); before, the hint pointed at x:1,3,16,8, where
    torch's model does not double (H <= 16) and the binding is refused in turn. Every size named now is one a
    binding takes, exact against torch there."""
    dims = {"dynamic": {2: D.DYNAMIC, 3: D.DYNAMIC}, "named": {2: D("H", min=4, max=64), 3: D("W", min=4, max=64)}}
    module = Branchy().eval()
    torch.manual_seed(0)
    model = dynamo_export(module, (torch.randn(1, 3, 17, 13),), input_names=["x"], dynamic_shapes={"x": dims[how]})
    with pytest.raises(ShapeError) as err:
        patch(model, input_shapes={"x": [1, 3, 12, 13]})
    right_at = err.value.data["right_at"]
    named = [[int(d) for d in m.split(",")] for m in re.findall(r"x:(\d+(?:,\d+){3})", err.value.hint)]
    named += [right_at["x"]] if right_at else []
    for shape in named:
        assert shape[2] > 16, err.value.hint  # torch's branch the file holds
        torch.manual_seed(1)
        assert_matches_torch(patch(model, input_shapes={"x": shape}).model, module, [shape])
    if not named:  # no size: the range is named instead (torch's branch: H from 17)
        assert "[17, " in err.value.hint
    r = _cli(model, tmp_path, "--input-shape", "x:1,3,12,13")
    assert r.exit_code == 4 and "x:1,3,16,8" not in r.output


def test_one_input_bound_of_two_asks_for_the_other(tmp_path):
    """x bound alone: y's region was "contradicted" at a size nobody gave, the hint silent on y. The refusal names y
    as unbound now (data, and the flag or argument that takes it); given y too, OUT binds, exact against torch."""
    module = TwoIn().eval()
    torch.manual_seed(0)
    model = dynamo_export(module, (torch.randn(1, 3, 17, 13), torch.randn(1, 2, 11, 9)), input_names=["x", "y"],
                          dynamic_shapes={"x": {2: D.DYNAMIC, 3: D.DYNAMIC}, "y": {2: D.DYNAMIC, 3: D.DYNAMIC}})
    x, y = [1, 3, 17, 13], [1, 2, 11, 9]
    for given, knob in (({"input_shapes": {"x": x}}, "input_shapes"), ({"traced_shapes": {"x": x}}, "traced_shapes")):
        with pytest.raises(ShapeError) as err:
            patch(model, **given)
        assert err.value.data["unbound"] == ["y"] and err.value.data["argument"] == knob
        assert f"of y with {knob} too" in err.value.hint
    r = _cli(model, tmp_path, "--input-shape", "x:" + ",".join(map(str, x)))
    assert r.exit_code == 4 and "of y with --input-shape too" in r.output, r.output
    out = patch(model, input_shapes={"x": x, "y": y}).model
    torch.manual_seed(1)
    a, b = torch.randn(*x), torch.randn(*y)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": a.numpy(), "y": b.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, module(a, b).numpy(), rtol=1e-5, atol=1e-6)


def test_a_flatten_computed_at_the_traced_size_names_what_would_work(tmp_path):
    """OUT fails after the replaced pools at the check's size, where the input file runs: no check size helps, so
    the hint names onnxpoolfix.export and a binding at the export's example input, not --check-shape. The binding
    is exact against torch."""
    module = TwoFlattened().eval()
    torch.manual_seed(0)
    model = dynamo_export(module, (torch.randn(3, 3, 36, 24),), input_names=["x"],
                          dynamic_shapes=({0: D("N", min=1, max=8), 2: D("H", min=8, max=96),
                                           3: D("W", min=8, max=96)},))
    with pytest.raises(CheckFailedError) as err:
        patch(model)
    assert "check_shapes" not in err.value.hint and "onnxpoolfix.export" in err.value.hint, err.value.hint
    assert err.value.data["cause"] == "computed-at-traced-size"
    shapes = err.value.data["shapes"]
    feed = {"x": np.random.default_rng(0).standard_normal(shapes["x"]).astype(np.float32)}
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)  # it runs
    r = _cli(model, tmp_path)
    assert r.exit_code == 5 and "--check-shape" not in r.output.split("hint:")[-1], r.output
    torch.manual_seed(1)
    assert_matches_torch(patch(model, input_shapes={"x": [3, 3, 36, 24]}).model, module, [[3, 3, 36, 24]])


def test_runs_through_tells_a_node_that_fails_in_the_input_file():
    """By hand: a Reshape to 12 elements after a MatMul with a weight too large to keep (fed as zeros) runs at 12,
    fails in itself at 13; a node the file lacks says nothing."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], name="t"), helper.make_node("MatMul", ["t", "w"], ["m"], name="m"),
         helper.make_node("Reshape", ["m", "s"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, numpy_helper.from_array(np.array([12, 64], np.int64), "s")])
    light = light_copy(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert runs_through(light, "r", {"x": [64, 12]}, 0) is True
    assert runs_through(light, "r", {"x": [64, 13]}, 0) is False
    assert runs_through(light, "nothing", {"x": [64, 12]}, 0) is None

"""Output sizes the exporter computes in float32 (``F.interpolate(x, scale_factor=s, mode="area")`` under dynamic
H/W: ``Floor(Cast(Shape(x)[2], float) * s)``) where torch computes them in double: at 90 x 0.7 torch's size is
62 (90 * 0.7 = 62.99999999999999), the file's 63. Where the two differ at some length the file is refused;
where they agree, OUT matches torch. The expected sizes come from torch itself."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from helpers import ort_run

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _area(scale: float, dynamic: bool = True, opset: int = 17):
    import onnx

    class Area(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=scale, mode="area")

    f = io.BytesIO()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(Area(), (torch.randn(1, 2, 20, 20),), f, dynamo=False, opset_version=opset,
                          input_names=["x"], operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": {2: "H", 3: "W"}} if dynamic else None)
    return Area(), onnx.load_from_string(f.getvalue())


def _torch_size(module, n: int) -> int:
    return module(torch.zeros(1, 1, n, 5)).shape[2]


def test_a_size_torch_computes_otherwise_is_refused():
    module, model = _area(0.7)
    assert _torch_size(module, 90) == 62  # torch's own arithmetic, the premise
    with pytest.raises(UnsupportedNodeError, match="float32"):
        onnxpoolfix.patch(model)
    with pytest.raises(UnsupportedNodeError, match="float32"):  # bound where they differ
        onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 90, 90]})


@pytest.mark.parametrize("scale", [0.5, 0.25, 0.75])
def test_a_size_both_compute_alike_is_exact(scale):
    module, model = _area(scale)
    out = onnxpoolfix.patch(model).model
    rng = np.random.default_rng(0)
    for n in (90, 97, 20, 3, 171):
        x = rng.standard_normal((1, 2, n, n + 7)).astype(np.float32)
        got = ort_run(out, {"x": x})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_bound_where_both_agree_is_exact():
    """0.7 bound at 91 x 31: every double torch may hold gives 63 and 21 (at 30, 0.7 gives 21 and a double two
    units below it 20: refused)."""
    module, model = _area(0.7)
    with pytest.raises(UnsupportedNodeError, match="at input shape 1x2x91x30"):
        onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 91, 30]})
    out = onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 91, 31]}).model  # 63 and 21: torch's too
    x = np.random.default_rng(1).standard_normal((1, 2, 91, 31)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ort_run(out, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_a_size_that_first_differs_past_2048_is_refused():
    """Scale 0.94: float32 and torch's double first differ at 2150 (2021 against torch's 2020), past the lengths
    onnxruntime runs the subgraph at: the numpy reading of the lengths beyond refuses it."""
    module, model = _area(0.94)
    assert _torch_size(module, 2150) == 2020  # torch's own size, the premise
    assert all(_torch_size(module, n) == int(np.float32(n) * np.float32(0.94)) for n in (90, 500, 2048))
    with pytest.raises(UnsupportedNodeError, match="at length 2150 on axis 2"):
        onnxpoolfix.patch(model)


def _ort_sizes(sess, x: str, base: list[int], axis: int, index: int, lengths) -> list[int]:
    """Entry ``index`` of the size the subgraph session computes from a float32 tensor of zeros shaped ``base``
    with ``axis`` at each length (the file's own input, not the tool's shape-fed form)."""
    out = []
    for n in lengths:
        shape = list(base)
        shape[axis] = int(n)
        out.append(int(np.asarray(sess.run(None, {x: np.zeros(shape, np.float32)})[0]).reshape(-1)[index]))
    return out


@pytest.mark.parametrize("scale", [0.94, 0.7, 2.3])
def test_the_numpy_reading_of_a_size_subgraph_is_onnxruntimes(scale):
    """graph/size_vectors.py evaluates the subgraph at every length at once; where it is used, it must read each
    length as onnxruntime does (here every length to 600, the file's float32 and the double reading both)."""
    import onnx

    from onnxpoolfix.graph.size_precision import in_double
    from onnxpoolfix.graph.size_subgraph import size_subgraph
    from onnxpoolfix.graph.size_vectors import size_at_lengths
    from onnxpoolfix.sessions import ort_session

    _, model = _area(scale)
    pool = next(n for n in model.graph.node if n.domain == "org.pytorch.aten")
    sub = size_subgraph(model, pool.input[1], pool.input[0], onnx.TensorProto.FLOAT)
    lengths = np.arange(1, 601)
    for m in (sub, *in_double(sub)):
        for axis, index in ((2, 0), (3, 1)):
            want = _ort_sizes(ort_session(m), pool.input[0], [1, 2, 7, 7], axis, index, lengths)
            np.testing.assert_array_equal(size_at_lengths(m, [1, 2, 7, 7], axis, index, lengths), want)



def test_a_fraction_is_read_as_the_fraction_torch_holds():
    """scale_factor=3/11: the file holds 0.27272728; torch computes with 0.2727272727272727, and at 55 its size is
    14 where the file's is 15. Read as the shortest decimal (0.27272728) the two agreed and OUT went out wrong
    at 55, 99, 110, ...; refused now."""
    module, model = _area(3 / 11)
    assert _torch_size(module, 55) == 14 and int(np.float32(55) * np.float32(3 / 11)) == 15  # the premise
    with pytest.raises(UnsupportedNodeError, match="at length 55 on axis 2"):
        onnxpoolfix.patch(model)


@pytest.mark.parametrize("written,computed,n", [(10 / 13, 1 / 1.3, 39), (0.9, 0.3 * 3, 30), (0.8, 0.7 + 0.1, 5)])
def test_a_scale_torch_may_have_computed_is_refused(written, computed, n):
    """The file holds one float32 for a literal and for a scale torch computed a unit in the last place beside it
    (1/1.3 is 10/13's nearest double less one unit): the two files are the same, torch's sizes are not (found by
    a review: 1/1.3 went out with exit 0, 30 rows at 39 where torch gives 29). Refused, both."""
    (m1, f1), (m2, f2) = _area(written), _area(computed)
    assert np.float32(written) == np.float32(computed) and _torch_size(m1, n) != _torch_size(m2, n)  # the premise
    for model in (f1, f2):
        with pytest.raises(UnsupportedNodeError, match="float32"):
            onnxpoolfix.patch(model)


def test_the_numpy_reading_takes_dynamos_truncation():
    """The dynamo exporter truncates a float size as Sign(v) * Floor(Abs(v)) (TruncToInt): read at every length
    as onnxruntime reads it (built here, no torch needed)."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxpoolfix.graph.size_vectors import size_at_lengths
    from onnxpoolfix.sessions import ort_session

    nodes = [helper.make_node("Shape", ["x"], ["s"], start=2, end=3),
             helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "k"], ["v"]),
             helper.make_node("Sign", ["v"], ["sg"]), helper.make_node("Abs", ["v"], ["a"]),
             helper.make_node("Floor", ["a"], ["fl"]), helper.make_node("Mul", ["sg", "fl"], ["t"]),
             helper.make_node("Cast", ["t"], ["size"], to=TensorProto.INT64)]
    graph = helper.make_graph(nodes, "size", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("size", TensorProto.INT64, None)],
                              [numpy_helper.from_array(np.array([0.94], np.float32), "k")])
    sub = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lengths = np.arange(1, 400)
    want = _ort_sizes(ort_session(sub), "x", [1, 1, 7], 2, 0, lengths)
    np.testing.assert_array_equal(size_at_lengths(sub, [1, 1, 7], 2, 0, lengths), want)


@pytest.mark.parametrize("form", ["value_floats", "ConstantOfShape"])
def test_every_constant_form_is_read_in_double(form):
    """The scale written as a Constant's ``value_floats`` or a ConstantOfShape's value: both read in double too
    (before, the double model failed to load, float32 against double, and that was taken for agreement:
    a review found it). The file's 0.7 is refused at 90 as when it is a plain Constant."""
    from onnx import TensorProto, helper, numpy_helper

    _, model = _area(0.7)
    graph = model.graph
    (k,) = [n for n in graph.node if n.op_type == "Constant" and n.output[0] == "/Constant_1_output_0"]
    at = list(graph.node).index(k)
    if form == "value_floats":
        new = [helper.make_node("Constant", [], ["k_list"], value_floats=[0.7]),
               helper.make_node("Constant", [], ["k_axes"], value_ints=[0]),
               helper.make_node("Squeeze", ["k_list", "k_axes"], [k.output[0]])]
    else:
        graph.initializer.append(numpy_helper.from_array(np.zeros(0, np.int64), "scalar_shape"))
        new = [helper.make_node("ConstantOfShape", ["scalar_shape"], [k.output[0]],
                                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.7]))]
    graph.node.remove(k)
    for i, n in enumerate(new):
        graph.node.insert(at + i, n)
    with pytest.raises(UnsupportedNodeError, match="float32, torch in double"):
        onnxpoolfix.patch(model)


def test_readings_of_a_non_finite_constant_are_itself():
    """A size subgraph may hold an inf or NaN constant (a clamp): read as itself, no error of the reading's own
    (round(inf * q) raised)."""
    from onnxpoolfix.graph.size_precision import torch_readings

    assert torch_readings(float("inf")) == [float("inf")] and torch_readings(float("-inf")) == [float("-inf")]
    assert [np.isnan(v) for v in torch_readings(float("nan"))] == [True]
    assert torch_readings(0.5) == [0.5] and 0.7 in torch_readings(0.7) and 1 / 1.3 in torch_readings(0.7692308)


def test_a_double_torch_is_known_to_hold_is_read_alone():
    """onnxpoolfix.export passes the doubles the exported program computes with: a float32 constant one of them
    rounds to is read as that double only (no neighbours, no fractions); others as before."""
    from onnxpoolfix.graph.size_precision import torch_doubles, torch_readings

    with torch_doubles([0.6, 1 / 1.3]):
        assert torch_readings(0.6) == [0.6] and torch_readings(0.7692308) == [1 / 1.3]
        assert len(torch_readings(0.7)) > 1
    assert len(torch_readings(0.6)) > 1



def test_a_computed_output_length_of_zero_is_torchs_empty_output():
    """Scale 1/32 under a dynamic length: torch gives an empty output below 32 (floor(18 / 32) = 0), and the check
    aims at such lengths; its reference crashed there (exit 1, a review found it). OUT matches torch on both sides."""
    import onnx

    class Area(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=1 / 32, mode="area")

    f = io.BytesIO()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(Area(), (torch.randn(1, 2, 3000),), f, dynamo=False, opset_version=17, input_names=["x"],
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": {2: "L"}})
    out = onnxpoolfix.patch(onnx.load_from_string(f.getvalue())).model
    rng = np.random.default_rng(0)
    for n in (1, 18, 31, 32, 65, 3000):
        x = rng.standard_normal((1, 2, n)).astype(np.float32)
        with torch.no_grad():
            want = Area()(torch.from_numpy(x)).numpy()
        got = ort_run(out, {"x": x})[0]
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _behind_relu(scale: float):
    """_area's file with a Relu in front of the pool, the size still read from the graph input's shape: what a
    dynamo file holds for a pool behind a layer (it reads sizes from the input's symbols)."""
    from onnx import helper

    module, model = _area(scale)
    pool = next(n for n in model.graph.node if n.domain == "org.pytorch.aten")
    model.graph.node.insert(0, helper.make_node("Relu", [pool.input[0]], ["x_relu"]))
    pool.input[0] = "x_relu"
    return model


def test_a_size_read_from_another_tensors_shape_is_compared_too():
    """The size subgraph could only be cut from the pooled tensor's own Shape; one reading the graph input's was
    not compared at all, and 0.7 and 1/1.3 behind a convolution went out with exit 0 (found by review: 30 rows
    at 39 where torch gives 29). Now that tensor's axes are swept: refused, naming it; 0.5 exact as torch."""
    module, _ = _area(0.7)
    assert _torch_size(module, 90) == 62  # torch's own size, the premise (the file's float32 gives 63)
    with pytest.raises(UnsupportedNodeError, match="at length 90 on axis 2 of 'x'"):
        onnxpoolfix.patch(_behind_relu(0.7))
    half, _ = _area(0.5)
    out = onnxpoolfix.patch(_behind_relu(0.5)).model
    x = np.random.default_rng(2).standard_normal((1, 2, 97, 20)).astype(np.float32)
    with torch.no_grad():
        want = half(torch.relu(torch.from_numpy(x))).numpy()
    np.testing.assert_allclose(ort_run(out, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_sizes_are_compared_as_far_as_an_average_can_run():
    """Scale 0.0636: float32 and torch's double first differ at 66,761, where the runtime pooling matrix has 2.8e8
    entries and OUT runs; the comparison stopped at 65,536 and OUT went out wrong there (found by review)."""
    module, model = _area(0.0636)
    n = 66_761
    assert _torch_size(module, n) != int(np.float32(n) * np.float32(0.0636))  # the premise
    with pytest.raises(UnsupportedNodeError, match=f"at length {n} on axis 2"):
        onnxpoolfix.patch(model)


def test_an_entry_sized_from_another_axis_is_compared_on_that_axis():
    """adaptive_avg_pool2d(x, (floor(W * 0.7), floor(H * 0.7))): each entry reads the other axis, and only its own
    was swept (the other held at 7), so 0.7 went out with exit 0, 63 rows at W = 90 where torch gives 62 (found by
    review). Every symbolic axis is swept for every entry now: refused at W = 90; 0.5 exact as torch."""
    import onnx

    def swapped(scale):
        _, model = _area(scale)
        first, second = [next(c for c in model.graph.node if c.output[0] == g.input[1])
                         for g in model.graph.node if g.op_type == "Gather"]
        a, b = onnx.AttributeProto(), onnx.AttributeProto()
        a.CopyFrom(first.attribute[0])
        b.CopyFrom(second.attribute[0])
        first.attribute[0].CopyFrom(b)
        second.attribute[0].CopyFrom(a)
        return model

    def module(x):
        h, w = x.shape[2:]
        return torch.nn.functional.adaptive_avg_pool2d(x, (int(w * 0.5), int(h * 0.5)))

    with pytest.raises(UnsupportedNodeError, match="at length 90 on axis 3"):
        onnxpoolfix.patch(swapped(0.7))
    out = onnxpoolfix.patch(swapped(0.5)).model
    rng = np.random.default_rng(3)
    for h, w in ((20, 20), (13, 41), (40, 9)):
        x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = ort_run(out, {"x": x})[0]
        assert got.shape == want.shape, ((h, w), got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_opset_9_size_is_compared_too():
    """Opset 9 (Shape has no start/end, Slice no bound inputs): the size subgraph fed its input's shape must still
    run there; an opset-9 file bound with input_shapes was refused as "does not run" (found by review)."""
    module, model = _area(0.5, opset=9)
    out = onnxpoolfix.patch(model, input_shapes={"x": [1, 2, 21, 30]}).model
    x = np.random.default_rng(4).standard_normal((1, 2, 21, 30)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ort_run(out, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_max_pooling_with_indices_to_a_computed_length_of_zero_is_torchs_empty_output():
    """adaptive_max_pool2d(x, (floor(H / 32), floor(W / 4)), return_indices=True): torch gives empty values and
    indices below 32 rows or 4 columns; the lowering's window layout could not be reshaped there (onnxruntime
    failed, the check too: exit 5; with the check off OUT went out failing; found by review). Values and
    indices as torch's on both sides."""
    import onnx

    class MaxIdx(torch.nn.Module):
        def forward(self, x):
            h = torch.floor(torch.tensor(x.size(2)) * (1 / 32)).long()
            w = torch.floor(torch.tensor(x.size(3)) * 0.25).long()
            return torch.nn.functional.adaptive_max_pool2d(x, (h, w), return_indices=True)

    f = io.BytesIO()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(MaxIdx(), (torch.randn(1, 2, 64, 40),), f, dynamo=False, opset_version=17,
                          input_names=["x"], operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          dynamic_axes={"x": {2: "H", 3: "W"}})
    out = onnxpoolfix.patch(onnx.load_from_string(f.getvalue())).model
    rng = np.random.default_rng(5)
    for h, w in ((18, 18), (1, 1), (40, 3), (31, 9), (32, 4), (70, 33), (64, 40)):
        x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        with torch.no_grad():
            want = [t.numpy() for t in MaxIdx()(torch.from_numpy(x))]
        got = ort_run(out, {"x": x})
        assert [g.shape for g in got] == [v.shape for v in want], ((h, w), [g.shape for g in got])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])

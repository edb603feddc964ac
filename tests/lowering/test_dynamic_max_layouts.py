"""Max pooling over symbolic axes without indices (issue 24): the two layouts of DynamicWindowMaxStep, chosen
at run time by an If on the input's size (in place from 2^16 elements, the pooled axes moved in front
below), and the window tables shared by the axes pooled to one m (end_i - kmax .. end_i - 1 clamped at
start_i). ONE patched file per module runs at sizes on both sides of the threshold (n < m, n = m, n = 1,
odd, non-square, batch 2) against torch and onnxpoolfix.reference, bit for bit, NaN and -inf included.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_bits_equal, constant_tensors, make_leftover, ort_session

import onnxpoolfix
from onnxpoolfix.lowering.dynamic_max import IN_PLACE_MIN_ELEMENTS
from onnxpoolfix.reference import adaptive_max_pool_values

C = 64  # channels: 64 x 32 x 32 is the threshold itself

# (batch, H, W): in place (>= 2^16 elements) and moved in front, each with n < m, n = m, n = 1, odd and
# non-square sizes
SIZES_2D = [(1, 33, 33), (1, 32, 32), (2, 40, 29), (1, 1, 1100), (1, 1100, 1), (1, 257, 5), (1, 4, 300),
            (1, 31, 32), (2, 10, 10), (1, 4, 5), (1, 8, 8), (1, 1, 1), (3, 7, 3), (1, 2, 9), (2, 1, 6)]


def _patched(out_size, shape=("N", C, "H", "W"), opset: int = 17) -> onnx.ModelProto:
    result = onnxpoolfix.patch(make_leftover("max", shape, out_size, opset=opset))
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed
    return result.model


def _inputs(shape, rng):
    """A random input, then the same with NaNs and a window-sized run of -inf (the guarded exact path)."""
    x = rng.standard_normal(shape).astype(np.float32)
    yield x
    bad = x.copy()
    flat = bad.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = np.nan
    bad[..., : max(1, shape[-2] // 2), : max(1, shape[-1] // 2)] = -np.inf
    bad[0, 0] = -np.inf  # one whole plane: every window of it is -inf
    yield bad


def _assert_as_torch(sess, torch, out_size, shapes):
    pool = torch.nn.functional.adaptive_max_pool2d if len(out_size) == 2 else torch.nn.functional.adaptive_max_pool3d
    rng = np.random.default_rng(0)
    for shape in shapes:
        for x in _inputs(shape, rng):
            got = sess.run(None, {"x": x})[0]
            with torch.no_grad():
                want = pool(torch.from_numpy(x), out_size).numpy()
            assert_bits_equal(got, want, f"torch at {shape}")
            assert_bits_equal(got, adaptive_max_pool_values(x, out_size), f"reference at {shape}")


def test_the_sizes_cover_both_layouts():
    counts = [b * C * h * w for b, h, w in SIZES_2D]
    assert min(counts) < IN_PLACE_MIN_ELEMENTS <= max(counts)
    assert sum(c >= IN_PLACE_MIN_ELEMENTS for c in counts) >= 5 and sum(c < IN_PLACE_MIN_ELEMENTS for c in counts) >= 5


@pytest.mark.parametrize("out_size", [(8, 8), (5, 7), (6, 1)])
def test_one_file_is_exact_at_every_size_in_both_layouts(out_size, torch_mod):
    """(8, 8): H and W share one table construction; (5, 7): one each; (6, 1): W reduced, H alone."""
    sess = ort_session(_patched(out_size))
    _assert_as_torch(sess, torch_mod, out_size, [(b, C, h, w) for b, h, w in SIZES_2D])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_other_opsets_in_both_layouts(opset, torch_mod):
    """Before 12 the clamp is Where/Less (no int64 Max), before 15 the lengths a Gather of Shape, from 18 the
    Reduce axes an input."""
    sess = ort_session(_patched((8, 8), opset=opset))
    _assert_as_torch(sess, torch_mod, (8, 8), [(1, C, 33, 33), (2, C, 40, 29), (1, C, 4, 5), (2, C, 1, 9)])


def test_three_pooled_axes_two_of_them_in_place(torch_mod):
    """D and H gathered where they are, W moved to the front once they are pooled."""
    out_size = (3, 4, 4)
    sess = ort_session(_patched(out_size, ("N", 16, "D", "H", "W")))
    _assert_as_torch(sess, torch_mod, out_size,
                     [(1, 16, 16, 16, 16), (2, 16, 17, 9, 30), (1, 16, 2, 3, 5), (1, 16, 1, 40, 120)])


def test_the_layout_is_chosen_by_the_input_size():
    """One If whose condition reads Size(x) against the threshold, the In-place and front forms its branches;
    TensorRT (no If) gets the front form alone."""
    model = _patched((8, 8))
    guard = next(n for n in model.graph.node if n.op_type == "If")
    finite = next(a.g for a in guard.attribute if a.name == "then_branch")
    [choice] = [n for n in finite.node if n.op_type == "If"]
    less = next(n for n in finite.node if n.output[0] == choice.input[0])
    assert less.op_type == "Less" and any(n.op_type == "Size" and n.output[0] == less.input[1] for n in finite.node)
    threshold = next(i for i in constant_tensors(model) if i.name == less.input[0])
    assert int(onnx.numpy_helper.to_array(threshold)) == IN_PLACE_MIN_ELEMENTS - 1
    branches = {a.name: [n.op_type for n in a.g.node] for a in choice.attribute}
    assert branches["then_branch"][:2] == ["Gather", "ReduceMax"]  # H in place
    assert branches["else_branch"][0] == "Transpose"  # every pooled axis in front
    trt = onnxpoolfix.patch(make_leftover("max", ("N", C, "H", "W"), (8, 8)), target="tensorrt").model
    assert not [n for n in trt.graph.node if n.op_type in ("If", "Size")]


TABLE_NODES = ["Shape", "Mul", "Div", "Mul", "Add", "Div", "Sub", "ReduceMin", "Range", "Add", "Max"]


@pytest.mark.parametrize("out_size,more", [((8, 8), ["Unsqueeze", "Gather", "Gather"]), ((6, 1), [])])
def test_window_tables_take_eleven_nodes_alone_twelve_and_one_per_axis_shared(out_size, more):
    """Shape(start, end), start (Mul, Div), end (Mul, Add, Div), Sub, ReduceMin, Range, Add, Max; H and W
    pooled to 8 share them (the lengths Unsqueezed, a Gather per axis); (6, 1): H alone (W is a ReduceMax). The branch's constants are its own Constant nodes (not counted)."""
    model = _patched(out_size)
    guard = next(n for n in model.graph.node if n.op_type == "If")
    finite = next(a.g for a in guard.attribute if a.name == "then_branch")
    tables = [n.op_type for n in finite.node if n.op_type not in ("If", "Less", "Size", "ReduceMax", "Constant")]
    assert sorted(tables) == sorted(TABLE_NODES + more)


def test_one_pooled_last_axis_needs_no_choice(torch_mod):
    """AdaptiveMaxPool1d: both layouts would move L to the front alone, so no If on the size is emitted."""
    model = _patched((5,), ("N", C, "L"))
    guard = next(n for n in model.graph.node if n.op_type == "If")
    finite = next(a.g for a in guard.attribute if a.name == "then_branch")
    assert not [n for n in finite.node if n.op_type in ("If", "Size")]
    sess = ort_session(model)
    rng = np.random.default_rng(0)
    for shape in [(1, C, 1100), (2, C, 37), (1, C, 5), (1, C, 3), (1, C, 1)]:
        for x in _inputs(shape, rng):
            with torch_mod.no_grad():
                want = torch_mod.nn.functional.adaptive_max_pool1d(torch_mod.from_numpy(x), 5).numpy()
            assert_bits_equal(sess.run(None, {"x": x})[0], want, f"torch at {shape}")

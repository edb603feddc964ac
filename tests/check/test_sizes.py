"""check/sizes.py: the note that says at which sizes the symbolic pooled axes were checked."""
from __future__ import annotations

import numpy as np
import onnx
from helpers import ATEN
from onnx import TensorProto, helper

import onnxpoolfix


def _none_size_model() -> onnx.ModelProto:
    """adaptive_avg_pool2d(x, (None, 3)) with H, W symbolic and unnamed (as after a Conv of a TorchScript export:
    onnx's shape inference names them unk__N), the None written as Shape(x)[2]."""
    const = lambda name, v: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(v, dtype=np.int64), name + "_v"))
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), const("two", 2), const("three", [3]),
             helper.make_node("Gather", ["shape", "two"], ["h"], axis=0), const("axes", [0]),
             helper.make_node("Unsqueeze", ["h", "axes"], ["h1"]),
             helper.make_node("Concat", ["h1", "three"], ["size"], axis=0),
             helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["y"], name="pool", domain=ATEN)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, None, None])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, None, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ATEN, 1)])


def test_an_output_size_following_the_input_reads_as_a_question_mark() -> None:
    # the note said '-> unk__0x3' (onnx's name for the dim the None follows)
    note = next(n for n in onnxpoolfix.patch(_none_size_model()).report.notes if "checked at" in n)
    assert "unk__" not in note and "-> ?x3" in note, note


def test_dynamic_max_is_checked_on_both_sides_of_its_layout_switch() -> None:
    """The dynamic max picks its layout by the pooled tensor's element count at run time; the check's sizes
    must fall on both sides, whatever the channel count (3 channels: every probe size is small; 512: large)."""
    from helpers import make_leftover

    from onnxpoolfix.lowering.dynamic_max import IN_PLACE_MIN_ELEMENTS

    for channels in (3, 512):
        result = onnxpoolfix.patch(make_leftover("max", [1, channels, "H", "W"], [4, 5]))
        assert result.report.check_passed
        (shapes,) = [n.checked_shapes for n in result.report.nodes]
        sides = {int(np.prod(s)) >= IN_PLACE_MIN_ELEMENTS for s in shapes}
        assert sides == {True, False}, (channels, shapes)

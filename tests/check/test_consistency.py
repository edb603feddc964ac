"""The layers after the replaced nodes are not run by the check (it runs the cut computing the replaced nodes):
whether they take what the replacements compute is asked of onnx's strict shape inference, OUT against the input
file, without the weights."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_leftover
from onnx import TensorProto, helper, numpy_helper

import onnxpoolfix
from onnxpoolfix.errors import CheckFailedError


def _with_bias(bias_hw: tuple[int, int]):
    """x [1,4,17,13] -> leftover adaptive_avg_pool2d to 5x7 -> y, then z = y + bias[4, *bias_hw]."""
    model = make_leftover("avg", [1, 4, 17, 13], [5, 7])
    model.graph.initializer.append(numpy_helper.from_array(np.ones((4, *bias_hw), np.float32), "bias"))
    model.graph.node.append(helper.make_node("Add", ["y", "bias"], ["z"], name="add_bias"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, "a", "b"]))
    return model


def test_a_layer_after_the_pool_that_cannot_take_its_output_is_refused():
    """The bias is 6x6 and the pool writes 5x7: OUT would run at no size. The cut the check runs ends at the pool,
    so this is onnx's strict inference, which infers the input file cleanly (the leftover's output is unknown to
    it) and OUT not."""
    with pytest.raises(CheckFailedError, match="layers after the replaced nodes .* Incompatible dimensions"):
        onnxpoolfix.patch(_with_bias((6, 6)))


def test_a_layer_that_takes_it_passes():
    result = onnxpoolfix.patch(_with_bias((5, 7)))
    assert result.report.check_passed

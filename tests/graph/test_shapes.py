"""graph/shapes.py: validate_input_shape's words for the flag that gave the shape."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxpoolfix.errors import ArgumentError
from onnxpoolfix.graph.shapes import validate_input_shape
from onnxpoolfix.words import CHECK_SHAPES, INPUT_SHAPES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_a_check_shape_changing_a_fixed_dim_is_not_told_about_binding() -> None:
    # --check-shape binds nothing: its hint said 'only symbolic dims can be bound'
    model = onnx.load(FIXTURES / "dynamic_classifier.onnx")  # x: N x 3 x H x W
    with pytest.raises(ArgumentError, match="fixed to 3") as info:
        validate_input_shape(model, "x", [1, 4, 30, 27], CHECK_SHAPES)
    assert "bound" not in info.value.hint and "give 3 for dim 1" in info.value.hint
    with pytest.raises(ArgumentError, match="fixed to 3"):
        validate_input_shape(model, "x", [1, 4, 30, 27], INPUT_SHAPES)

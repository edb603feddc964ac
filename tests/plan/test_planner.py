"""plan/planner.py: the one check of a strategy name."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.errors import ArgumentError
from onnxpoolfix.frontends import PlanOptions
from onnxpoolfix.plan.model import plan_model
from onnxpoolfix.plan.planner import STRATEGIES, check_strategy, plan


def test_an_unknown_strategy_is_an_argument_error_not_a_model_problem():
    (node,) = plan_model(make_leftover("avg", [1, 3, 8, 9], [5, 7]), PlanOptions()).nodes
    with pytest.raises(ArgumentError, match="strategy must be one of") as err:
        plan(node.spec, "nonsense")
    assert isinstance(err.value, ValueError) and err.value.exit_code == 2 and err.value.hint
    for name in STRATEGIES:
        check_strategy(name)
    assert plan(node.spec, "matmul").lowering.name == "matmul"


def test_an_unnamed_symbolic_axis_reads_as_a_question_mark_in_the_refusal() -> None:
    # below opset 11 no lowering takes symbolic sizes: the error named onnx's unk__0 ('pooled axes unk__0->5')
    model = onnx.load(Path(__file__).resolve().parents[2] / "fixtures" / "dynamic_avg2d.onnx")
    for i, d in enumerate(model.graph.input[0].type.tensor_type.shape.dim[2:]):
        d.dim_param = f"unk__{i}"
    next(o for o in model.opset_import if o.domain == "").version = 9
    with pytest.raises(onnxpoolfix.UnsupportedNodeError, match=r"pooled axes \?->5, \?->7 are symbolic") as info:
        onnxpoolfix.patch(model)
    assert "unk__" not in str(info.value)

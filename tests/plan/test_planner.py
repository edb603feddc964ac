"""plan/planner.py: the one check of a strategy name."""
from __future__ import annotations

import pytest
from helpers import make_leftover

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

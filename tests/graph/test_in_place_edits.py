"""Graph edits move items by pointer: the items a removal keeps are the very messages they were, never copies
(``del field[:]`` + ``extend`` copied every kept item: seconds of weights on a 500 MB model)."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from onnxpoolfix.graph import arrange, keep_only


def _graph(n: int):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    inits = [numpy_helper.from_array(np.full((4,), i, np.float32), f"w{i}") for i in range(n)]
    return helper.make_graph(nodes, "g", [], [], inits)


def test_keep_only_keeps_the_same_messages_in_order():
    g = _graph(8)
    kept = g.initializer[5]  # a wrapper of the message itself
    assert keep_only(g.initializer, lambda t: t.name not in ("w1", "w4", "w7")) == 3
    assert [t.name for t in g.initializer] == ["w0", "w2", "w3", "w5", "w6"]
    kept.name = "renamed"  # a copy would leave the field as it was
    assert [t.name for t in g.initializer] == ["w0", "w2", "w3", "renamed", "w6"]
    assert keep_only(g.initializer, lambda t: True) == 0


def test_arrange_reorders_and_drops_by_pointer():
    g = _graph(5)
    g.node.extend([helper.make_node("Neg", ["a"], ["b"], name="new")])
    items = list(g.node)
    arrange(g.node, [items[0], items[5], items[3], items[1]])  # n2 and n4 go, "new" moves up
    assert [n.name for n in g.node] == ["n0", "new", "n3", "n1"]
    items[5].name = "moved"
    assert g.node[1].name == "moved"

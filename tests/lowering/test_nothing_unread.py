"""A patched model holds no initializer and no node output that nothing reads (issue 22, item 5): an unread
initializer makes onnxruntime warn at every load ("Removing initializer ... It is not used by any node").
The max pooling lowerings that compute the indices once left ``.../past_end`` behind."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import onnxpoolfix
from onnxpoolfix.graph import nodes_deep

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FILES = sorted(p.name for p in FIXTURES.glob("*.onnx") if "indices" in p.name or "max" in p.name)


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(g)


def _unread(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """Initializers and node outputs nothing reads, in the graph or in any branch or body (a node of an If
    branch that its branch neither reads nor returns is as unread as one at the top)."""
    graphs = list(_graphs(model.graph))
    read = {o.name for g in graphs for o in g.output}
    for node in nodes_deep(model.graph.node):
        read.update(node.input)
    inits = [t.name for g in graphs for t in g.initializer if t.name not in read]
    outputs = [n.name or n.op_type for g in graphs for n in g.node
               if n.output and not any(o in read for o in n.output)]
    return inits, outputs


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize("name", FILES)
def test_patched_max_pools_leave_nothing_unread(name: str, target: str) -> None:
    model = onnx.load(FIXTURES / name)
    try:
        patched = onnxpoolfix.patch_model(model, check=False, target=target)
    except onnxpoolfix.PoolFixError:
        pytest.skip(f"{name} does not patch for {target}")
    assert _unread(patched) == ([], []), name


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_dynamic_max_with_indices_leaves_nothing_unread(target: str) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", "W"])
    size = helper.make_node("Constant", [], ["size"], value=onnx.numpy_helper.from_array(
        __import__("numpy").array([5, 7], dtype="int64"), "size"))
    pool = helper.make_node("adaptive_max_pool2d", ["x", "size"], ["y", "i"], domain="org.pytorch.aten")
    graph = helper.make_graph([size, pool], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 7]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [1, 2, 5, 7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                     helper.make_opsetid("org.pytorch.aten", 1)])
    patched = onnxpoolfix.patch_model(model, target=target)
    assert _unread(patched) == ([], [])

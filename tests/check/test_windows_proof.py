"""Every window of the dynamic lowering proven (issue 23): the subgraph that builds the windows from the
runtime lengths runs alone for every n up to a bound (and every m the graph computes there), compared with
windows.py; the report states the bound. A construction wrong at one size the sampled check sizes never
reach (n = 300) fails the check."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import make_leftover
from onnx import helper

import onnxpoolfix
from onnxpoolfix.check import windows_proof
from onnxpoolfix.errors import CheckFailedError, UnsupportedNodeError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _runtime_size_model(kind: str, scale: float) -> onnx.ModelProto:
    """x (N, C, L) pooled to floor(L * scale), the size computed in the graph as torch writes it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["L"], axis=0),
        helper.make_node("Cast", ["L"], ["Lf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["Lf", "scale"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floor"]),
        helper.make_node("Unsqueeze", ["floor", "zero"], ["size"]),
        helper.make_node(f"adaptive_{kind}_pool1d", ["x", "size"], ["y"], domain="org.pytorch.aten", name="pool"),
    ]
    inits = [onnx.numpy_helper.from_array(np.array(2, np.int64), "two"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array(scale, np.float32), "scale")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, "L"])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3, "M"])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)])


@pytest.mark.parametrize("name,needle", [
    ("dynamic_classifier.onnx", "avg -> 6 (shared by 2 axes): n <= 512"),
    ("dynamic_max2d.onnx", "axis 2 max -> 5: n <= 512"),
])
def test_the_report_states_the_bound_of_a_constant_output_size(name, needle):
    note = onnxpoolfix.patch(onnx.load(FIXTURES / name)).report.check_note
    assert "every window of the dynamic lowering proven up to n = 512" in note and needle in note


@pytest.mark.parametrize("kind,scale,kinds", [("avg", 1.75, "(equal, up)"), ("max", 0.5, "(down)")])
def test_a_computed_output_size_is_proven_at_every_size_the_graph_computes(kind, scale, kinds):
    note = onnxpoolfix.patch(_runtime_size_model(kind, scale)).report.check_note
    assert "every window of the dynamic lowering proven up to n = " in note
    assert "each with the m the graph computes " + kinds in note


def test_a_max_pooling_sized_by_a_float32_product_is_compared_as_far_as_it_runs():
    """Max pooling to floor(L * 0.625): its runtime window tables grow with L alone, so OUT runs at any length,
    and at 3,355,451 the file's float32 product gives one more than torch's double (checked here in numpy, as
    torch computes: double). An average there would need a 7e12-entry matrix and cannot run: it is exact
    wherever it runs (above); the max is refused, naming that length."""
    n = 3_355_451
    assert int(np.floor(np.float32(n) * np.float32(0.625))) != int(np.floor(n * 0.625))  # the premise
    with pytest.raises(UnsupportedNodeError, match=f"at length {n} on axis 2"):
        onnxpoolfix.patch(_runtime_size_model("max", 0.625))


def _broken_at(n_bad: int):
    """runtime_window_table (one axis, 0-d n) with every index off by one at ``n_bad``."""
    real = windows_proof.runtime_window_table

    def broken(em, n, m):
        table, kmax = real(em, n, m)
        return _shifted_at(em, table, n, n_bad), kmax
    return broken


def _shared_broken_at(n_bad: int):
    """runtime_window_tables (the values-only max construction) with every index off by one where a length
    is ``n_bad``."""
    real = windows_proof.runtime_window_tables

    def broken(em, lengths, g, m):
        tables = real(em, lengths, g, m)
        # lengths [g] against tables [g, m, kmax] (several axes) or [m, kmax] (one)
        at = em.unsqueeze(lengths, [1, 2]) if g > 1 else lengths
        return _shifted_at(em, tables, at, n_bad)
    return broken


def _shifted_at(em, table: str, n: str, n_bad: int) -> str:
    bad = em.op("Equal", [n, em.const("bad", np.array(n_bad, np.int64))])
    return em.op("Where", [bad, em.op("Sub", [table, em.const("one", np.array(1, np.int64))]), table])


def test_a_window_table_wrong_at_one_large_size_fails_the_check(monkeypatch):
    """The sampled check sizes are small (< 20): only the proof reaches n = 300."""
    monkeypatch.setattr(windows_proof, "runtime_window_tables", _shared_broken_at(300))
    with pytest.raises(CheckFailedError, match="differs from windows.py at 300 -> 5"):
        onnxpoolfix.patch(onnx.load(FIXTURES / "dynamic_max2d.onnx"))


def test_shared_window_tables_wrong_at_one_large_size_fail_the_check(monkeypatch):
    """H and W pooled to 4 share one construction, proven over a vector of lengths."""
    monkeypatch.setattr(windows_proof, "runtime_window_tables", _shared_broken_at(300))
    with pytest.raises(CheckFailedError, match="shared window tables differ from windows.py at 300 -> 4"):
        onnxpoolfix.patch(make_leftover("max", ("N", 3, "H", "W"), (4, 4)))


def test_a_window_table_with_indices_wrong_at_one_large_size_fails_the_check(monkeypatch):
    """Max with its indices read builds each axis' table alone (runtime_window_table)."""
    monkeypatch.setattr(windows_proof, "runtime_window_table", _broken_at(300))
    with pytest.raises(CheckFailedError, match="differs from windows.py at 300 -> 4"):
        onnxpoolfix.patch(make_leftover("max", ("N", 3, "H", "W"), (4, 4), indices="output"))


def test_a_pooling_matrix_wrong_at_one_computed_size_fails_the_check(monkeypatch):
    real = windows_proof.runtime_size_matrix_t

    def broken(em, n, m, elem):
        pt = real(em, n, m, elem)
        bad = em.op("Equal", [n, em.const("bad", np.array(401, np.int64))])
        return em.op("Where", [bad, em.op("Mul", [pt, em.const("two", np.array(2, np.float32))]), pt])
    monkeypatch.setattr(windows_proof, "runtime_size_matrix_t", broken)
    with pytest.raises(CheckFailedError, match="differs from windows.py at 401 -> 250"):
        onnxpoolfix.patch(_runtime_size_model("avg", 0.625))


def test_no_proof_line_without_a_dynamic_lowering():
    note = onnxpoolfix.patch(make_leftover("avg", (1, 3, 8, 9), (5, 7))).report.check_note
    assert "proven up to" not in note


def _swapped_size_model() -> onnx.ModelProto:
    """x (N, 3, H, W) pooled to (W // 2 + 1, H // 3 + 1): each output size read from the OTHER axis."""
    def entry(axis: int, div: int, name: str) -> list:
        c = f"{name}_"
        return [helper.make_node("Gather", ["shape", c + "axis"], [c + "n"], axis=0),
                helper.make_node("Div", [c + "n", c + "div"], [c + "q"]),
                helper.make_node("Add", [c + "q", "one"], [c + "s"]),
                helper.make_node("Unsqueeze", [c + "s", "zero"], [name])]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), *entry(3, 2, "h"), *entry(2, 3, "w"),
             helper.make_node("Concat", ["h", "w"], ["size"], axis=0),
             helper.make_node("adaptive_avg_pool2d", ["x", "size"], ["y"], domain="org.pytorch.aten", name="pool")]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("h_axis", 3), ("h_div", 2), ("w_axis", 2), ("w_div", 3), ("one", 1))]
    inits.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3, "P", "Q"])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.pytorch.aten", 1)])


def test_a_size_read_from_another_axis_is_proven_at_every_pair(monkeypatch):
    """H pooled to W // 2 + 1: at H = 30 every m occurs as W varies. The proof once varied H with W held at two
    sizes (m 4 and 12 only) and still said "each with the m the graph computes"; a matrix wrong at 30 -> 20 (W
    = 38) went unproven. Every pair to 48 x 96 now, and that wrong matrix fails the check."""
    model = _swapped_size_model()
    sess = onnxpoolfix.patch(model)
    x = np.random.default_rng(0).standard_normal((2, 3, 30, 38)).astype(np.float32)
    import onnxruntime as ort
    got = ort.InferenceSession(sess.model.SerializeToString()).run(None, {"x": x})[0]
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), (38 // 2 + 1, 30 // 3 + 1)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "every n <= 48, m <= 96" in sess.report.check_note
    real = windows_proof.runtime_size_matrix_t

    def broken(em, n, m, elem):
        pt = real(em, n, m, elem)
        bad = em.op("And", [em.op("Equal", [n, em.const("bad_n", np.array(30, np.int64))]),
                            em.op("Equal", [m, em.const("bad_m", np.array(20, np.int64))])])
        return em.op("Where", [bad, em.op("Mul", [pt, em.const("two", np.array(2, np.float32))]), pt])
    monkeypatch.setattr(windows_proof, "runtime_size_matrix_t", broken)
    with pytest.raises(CheckFailedError, match="differs from windows.py at 30 -> 20"):
        onnxpoolfix.patch(model)

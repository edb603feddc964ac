"""Test helpers shared by the suite (``from helpers import ...``: tests/ is on pytest's pythonpath):
building leftover models in code, running onnxruntime, exact/rounded comparisons, and the round-trip case
counter that conftest.py prints at the end of the session."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ATEN = "org.pytorch.aten"

# filled by tests/test_roundtrip.py; printed by pytest_terminal_summary
ROUNDTRIP_COUNTS: Counter = Counter()


def make_leftover(kind: str, in_shape, out_size, *, dtype=TensorProto.FLOAT, opset: int = 17,
                  encoding: str = "aten-op", indices: str = "none", node_name: str = "pool",
                  size_as: str = "constant") -> onnx.ModelProto:
    """x -> one leftover ``adaptive_{kind}_pool{k}d`` -> y (as torch's FALLTHROUGH export writes it).

    ``out_size`` is the size constant (ints; -1 is not allowed by torch, so None is not expressible here).
    ``encoding``: "aten-op", "ATen-attr" (domain org.pytorch.aten) or "ATen-attr-default" (domain "").
    ``indices`` (max only): "none" (one output), "unused" (second output nobody reads), "output" (graph output).
    """
    k = len(out_size)
    op = f"adaptive_{kind}_pool{k}d"
    outs = ["y"] + (["y_indices"] if kind == "max" and indices != "none" else [])
    nodes, inits = [], []
    size = np.asarray(out_size, dtype=np.int64)
    if size_as == "constant" and opset >= 9:  # (an int64 Constant is not valid ONNX before opset 9)
        nodes.append(helper.make_node("Constant", [], ["size"], name="size_const",
                                      value=onnx.numpy_helper.from_array(size, "size_value")))
    else:
        inits.append(onnx.numpy_helper.from_array(size, "size"))
    if encoding == "aten-op":
        nodes.append(helper.make_node(op, ["x", "size"], outs, name=node_name, domain=ATEN))
    else:
        dom = ATEN if encoding == "ATen-attr" else ""
        nodes.append(helper.make_node("ATen", ["x", "size"], outs, name=node_name, domain=dom,
                                      operator=op, overload_name=""))
    r = len(in_shape)
    out_shape = list(in_shape[: r - k]) + list(out_size)
    graph_outs = [helper.make_tensor_value_info("y", dtype, out_shape)]
    if indices == "output":
        graph_outs.append(helper.make_tensor_value_info("y_indices", TensorProto.INT64, out_shape))
    graph = helper.make_graph(nodes, "leftover", [helper.make_tensor_value_info("x", dtype, list(in_shape))],
                              graph_outs, initializer=inits)
    imports = [helper.make_opsetid("", opset)]
    if encoding != "ATen-attr-default":
        imports.append(helper.make_opsetid(ATEN, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=min(onnx.IR_VERSION, 10 if opset >= 21 else 8))


def pyramid_leftovers(dtype: int, shape, sizes) -> onnx.ModelProto:
    """One tensor ``x`` of ``shape`` pooled to each of ``sizes`` (PSPNet's pyramid), as ATen leftovers."""
    nodes, outs = [], []
    for i, size in enumerate(sizes):
        nodes.append(helper.make_node("Constant", [], [f"size{i}"],
                                      value=onnx.numpy_helper.from_array(np.array(size, dtype=np.int64))))
        nodes.append(helper.make_node("adaptive_avg_pool2d", ["x", f"size{i}"], [f"y{i}"], name=f"pool{i}",
                                      domain="org.pytorch.aten"))
        outs.append(helper.make_tensor_value_info(f"y{i}", dtype, list(shape[:2]) + list(size)))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, list(shape))], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("org.pytorch.aten", 1)])


def to_aten_attr(model: onnx.ModelProto, domain: str) -> onnx.ModelProto:
    """Rewrite aten-op leftovers into the older ``ATen`` + ``operator`` attribute encoding (in place),
    as fixtures/make_fixtures.py does; drops the org.pytorch.aten import when the domain is ""."""
    for n in model.graph.node:
        if n.domain == ATEN and n.op_type.startswith("adaptive_"):
            op = n.op_type
            n.op_type, n.domain = "ATen", domain
            n.attribute.extend([helper.make_attribute("operator", op), helper.make_attribute("overload_name", "")])
    if domain != ATEN:
        keep = [o for o in model.opset_import if o.domain != ATEN]
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return model


def ort_session(model: onnx.ModelProto, log_level: int = 3):
    """A CPU session on one core, not spinning; ``log_level`` 4 where onnxruntime's errors are expected."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    so.intra_op_num_threads = 1  # the CI machines are shared: stay on one core
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_run(model: onnx.ModelProto, feed: dict, outputs=None) -> list[np.ndarray]:
    return ort_session(model).run(outputs, feed)


def force_first_max(monkeypatch, construction: str) -> None:
    """Make the argmax lowering's finite branch take ``construction`` ("separable": lowering/first_max.py,
    "whole_windows": lowering/first_max_windows.py, where it applies) whatever the cost model says."""
    from onnxpoolfix.lowering import argmax, dynamic_max

    priced = argmax.ArgMaxStep._finite_costs

    def forced(self, lead, kmax, isz):
        return {name: (0.0 if name == construction else 1.0) for name in priced(self, lead, kmax, isz)}

    monkeypatch.setattr(argmax.ArgMaxStep, "_finite_costs", forced)
    # runtime window tables: an If at run time picks by window size; 0 emits the separable one alone
    monkeypatch.setattr(dynamic_max.DynamicArgMaxStep, "whole_windows_max", 0 if construction == "separable" else 1 << 30)


def finite_branch_construction(model: onnx.ModelProto) -> str:
    """Which first-maximum construction the argmax lowering's If sends finite inputs to: "whole_windows"
    (one Gather of every window's flat positions) or "separable"."""
    from onnxpoolfix.graph import nodes_deep

    (if_node,) = [n for n in model.graph.node if n.op_type == "If"]
    then_branch = next(a.g for a in if_node.attribute if a.name == "then_branch")
    gathered = {i for n in nodes_deep(then_branch.node) if n.op_type == "Gather" for i in n.input}
    whole = any("window_positions" in i for i in gathered)
    separable = any(n.op_type == "GatherElements" for n in nodes_deep(then_branch.node))
    return "chosen at run time" if whole and separable else "whole_windows" if whole else "separable"


def constant_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every constant a patched graph holds, in place (editing one edits the model): the main graph's
    initializers, then the value of each Constant node at any depth (an If branch writes its own constants
    as Constant nodes; each value's name is the node's output, as the emitter writes it)."""
    from onnxpoolfix.graph import nodes_deep

    values = [a.t for n in nodes_deep(model.graph.node) if n.op_type == "Constant"
              for a in n.attribute if a.name == "value"]
    return list(model.graph.initializer) + values


def leftover_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    from onnxpoolfix.frontends.leftovers import is_pool_leftover

    return [n for n in model.graph.node if is_pool_leftover(n)]


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str = "values") -> None:
    """Bit-for-bit equality (so -0.0 != 0.0), with any NaN matching any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if np.issubdtype(got.dtype, np.floating):
        gn, wn = np.isnan(got), np.isnan(want)
        assert np.array_equal(gn, wn), f"{what}: NaN positions differ at {int((gn != wn).sum())} places"
        u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        g, w = np.where(gn, 0, got).view(u), np.where(wn, 0, want).view(u)
    else:
        g, w = got, want
    bad = g != w
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ; first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {got[bad][0]!r} want {want[bad][0]!r}")


# float32 rounding of an average: relative 1e-6 of max|x|; one output rounding for the 16-bit types
AVG_REL_TOL = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-13,
               np.dtype(np.float16): 2.0 ** -10}


def assert_avg_close(got: np.ndarray, want: np.ndarray, x: np.ndarray, rel: float | None = None) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    rel = AVG_REL_TOL[np.dtype(x.dtype)] if rel is None else rel
    xf = np.asarray(x, dtype=np.float64)
    finite = np.abs(xf[np.isfinite(xf)])
    tol = rel * (float(finite.max()) if finite.size and finite.max() > 0 else 1.0)
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    assert np.array_equal(gn, wn), f"NaN positions differ at {int((gn != wn).sum())} places"
    inf_same = np.isinf(w) & (g == w)
    err = np.where(gn | inf_same, 0.0, np.abs(g - w))
    e = float(err.max()) if err.size else 0.0
    assert e <= tol, f"max error {e:.3g} > tolerance {tol:.3g} (rel {rel:g} of max|x|) at {np.unravel_index(err.argmax(), err.shape)}"


def slow_named(config) -> bool:
    """Whether ``-m`` names the slow marker (``make test-all``'s ``-m "slow or not slow"`` does): the tests that
    write gigabytes run only then, not under a bare ``pytest tests/io/test_io.py``."""
    return "slow" in (config.getoption("markexpr", "") or "")


def model_with_function() -> onnx.ModelProto:
    size = helper.make_node("Constant", [], ["size"], value=numpy_helper.from_array(np.array([5, 7], np.int64)))
    pool = helper.make_node("adaptive_avg_pool2d", ["fx", "size"], ["fy"], domain=ATEN)
    relu = helper.make_node("Relu", ["fy"], ["fz"])
    fn = helper.make_function("local", "Block", ["fx"], ["fz"], [size, pool, relu],
                              [helper.make_opsetid("", 17), helper.make_opsetid(ATEN, 1)])
    call = helper.make_node("Block", ["x"], ["y"], domain="local", name="block0")
    graph = helper.make_graph([call], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5, 7])])
    return helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ATEN, 1), helper.make_opsetid("local", 1)])


def leftovers_in_if_branches(*, opset: int = 17, ir_version: int = 8) -> onnx.ModelProto:
    """x [1, 2, 8, 9], c (bool) -> the user's If 'users', each branch one leftover adaptive_avg_pool2d of the
    outer x to 5x7 (the size an outer initializer, listed as a graph input too below IR 4) -> y."""
    def branch(name):
        return helper.make_graph(
            [helper.make_node("adaptive_avg_pool2d", ["x", "size"], [f"y_{name}"], domain=ATEN)],
            name, [], [helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, None)])

    size = numpy_helper.from_array(np.array([5, 7], np.int64), "size")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 9]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    if ir_version < 4:
        inputs.append(helper.make_tensor_value_info("size", TensorProto.INT64, [2]))
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"), name="users")],
        "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 7])], initializer=[size])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ATEN, 1)],
                             ir_version=ir_version)


#: ops ncnn (through pnnx) has no layer for (measured, docs/targets.md)
NCNN_LACKS = frozenset({"Gather", "GatherElements", "Equal", "Less", "Greater", "Where", "IsNaN", "Not", "If"})


#: (input shape, output size, opset) of the max pooling the runtime tests feed :func:`non_finite_max_input`:
#: non-uniform 2-D (window ReduceMaxes; from opset 18, whose ReduceMax takes its axes as an input, runs of MaxPools),
#: uniform 2-D (a MaxPool), 1-D, 3-D (two 2-D pools: ReduceMaxes; from opset 18 MaxPools), axes pooled to 1
#: (a MaxPool spanning them: pnnx converts no ReduceMax over two axes, nor one from opset 18), and a 3-D integer
#: upsample (a copy: two 4-D Resizes, review81), 3-D pools to 1 (two 2-D pools: a 5-D ReduceMax fails to load in
#: ncnn, review87)
NON_FINITE_MAX_CASES = [((1, 6, 8, 9), (5, 7), 17), ((1, 6, 8, 9), (5, 7), 18), ((1, 6, 7, 7), (3, 3), 17),
                        ((1, 6, 11), (4,), 17), ((1, 6, 11), (4,), 21), ((1, 6, 4, 5, 6), (2, 3, 4), 17),
                        ((1, 6, 8, 9), (1, 1), 17), ((1, 6, 8, 9), (5, 1), 18), ((1, 6, 4, 5, 6), (2, 3, 4), 18),
                        ((1, 6, 2, 3, 4), (4, 6, 8), 17), ((1, 6, 4, 5, 6), (1, 1, 1), 17),
                        ((1, 6, 4, 5, 6), (4, 1, 1), 18)]
NON_FINITE_MAX_IDS = ["2d", "2d_opset18", "2d_uniform", "1d", "1d_opset21", "3d", "global", "2d_to_one_opset18",
                      "3d_opset18", "3d_upsample", "3d_global", "3d_to_one_opset18"]
#: the channel of :func:`non_finite_max_input` whose every window's maximum is -3e38 (MNN's MaxPool: -2^24)
BELOW_MNN_MAXPOOL = 5


def non_finite_max_input(shape, seed: int = 0) -> np.ndarray:
    """What max pooling's NaN handling is tested on, one case per channel: 0, numbers with NaN, +inf and -inf
    scattered; 1, only -inf (windows of -inf: -inf, where runtimes' max starts from -FLT_MAX or -2^24); 2, a
    column of -FLT_MAX (a window whose max is -FLT_MAX, not -inf) and a NaN; 3, only -0.0 (-0.0 out); 4, only
    +inf and huge numbers (3e38, 1e32: MNN's Relu made NaN of their negations); 5, only -3e38."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(shape).astype(np.float32)
    r = g.random(shape[2:])
    x[0, 0][r < 0.08] = np.nan
    x[0, 0][(r >= 0.08) & (r < 0.16)] = np.inf
    x[0, 0][(r >= 0.16) & (r < 0.4)] = -np.inf
    x[0, 1] = -np.inf
    x[0, 2, ..., 0] = -np.finfo(np.float32).max
    x[0, 2].flat[x[0, 2].size // 2] = np.nan
    x[0, 3] = -0.0
    x[0, 4] = np.where(r < 0.3, np.inf, np.where(r < 0.6, 1e32, 3e38)).astype(np.float32)
    x[0, BELOW_MNN_MAXPOOL] = -3e38
    return x


def portable_max(shape, size, opset: int) -> onnx.ModelProto:
    """One max pooling node patched for the portable target as ncnn needs it: ``--strategy window_slices``, or
    ``pool`` where every window is uniform (one MaxPool), ``global`` where every size is 1; the form without
    comparisons each way."""
    import onnxpoolfix

    ins = shape[len(shape) - len(size):]
    uniform = all(n % m == 0 for n, m in zip(ins, size))
    # every changed axis an integer upsample: a copy (a static 3-D pool's as two 4-D Resizes: window Slices of length
    # 1 alone give pnnx no pooling op to drop the batch at, and ncnn fails to load them)
    upsample = all(m % n == 0 for n, m in zip(ins, size)) and any(m > n for n, m in zip(ins, size))
    to_one = all(m in (1, n) for n, m in zip(ins, size))  # every changed axis pooled to 1
    strategy = "global" if to_one else "pool" if uniform else "resize" if upsample else "window_slices"
    return onnxpoolfix.patch(make_leftover("max", shape, size, opset=opset), target="portable",
                             strategy=strategy).model


#: the average fixtures below opset 11 (8x9 -> 5x7): the default target's MatMul guard tests NaN without Equal
#: there (opset 9; opset 7 takes window sums), the portable target's windows are Slice-1s (docs/targets.md)
OLD_OPSET_AVG = ("avg2d_opset7", "avg2d_opset9")


def non_finite_avg_input(x: np.ndarray) -> np.ndarray:
    """A copy of an [N, C, 8, 9] input (pooled to 5x7) with, in channel 0: a NaN with the sign bit (x86's
    ``inf - inf``) and one without, a window of +inf alone (W window 0), one of -inf alone (W window 1), one
    holding both (W window 2: NaN), all in H window 4; the other channels finite (a MatMul spreads NaN there)."""
    x = np.array(x, np.float32)
    x[0, 0, 0, 0] = np.uint32(0xFFC00000).view(np.float32)
    x[0, 0, 2, 8] = np.nan
    x[0, 0, 7, 0], x[0, 0, 7, 2], x[0, 0, 7, 3] = np.inf, -np.inf, np.inf
    return x


def assert_same_non_finite(got: np.ndarray, want: np.ndarray) -> None:
    """NaN, +inf and -inf at the same places; the finite values close."""
    got, want = np.asarray(got, np.float64).reshape(want.shape), np.asarray(want, np.float64)
    for what, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        np.testing.assert_array_equal(test(got), test(want), err_msg=f"{what} positions differ")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def torch_adaptive_pool(kind: str, x: np.ndarray, size) -> np.ndarray:
    """torch's ``adaptive_{kind}_pool{k}d`` of ``x`` (values only), k = len(size)."""
    import torch
    fn = getattr(torch.nn.functional, f"adaptive_{kind}_pool{len(size)}d")
    return fn(torch.from_numpy(x), size).numpy()


#: a symbolic leftover's sizes where :func:`scattered_non_finite_input` runs it
RUN_SIZES = {"N": 2, "H": 13, "W": 10}


def scattered_non_finite_input(shape, seed: int = 5) -> np.ndarray:
    """Normal numbers at ``shape`` (symbolic dims at :data:`RUN_SIZES`) with a NaN, a +inf and, in channel 0, the
    last two columns -inf (whole windows of -inf where the last axis is pooled to windows of two or less)."""
    run_shape = tuple(d if isinstance(d, int) else RUN_SIZES[d] for d in shape)
    x = np.random.default_rng(seed).standard_normal(run_shape).astype(np.float32)
    x[(0,) * (x.ndim - 1) + (0,)] = np.nan
    x[(0, 1) + (2,) * (x.ndim - 2)] = np.inf
    x[(0, 0) + (slice(None),) * (x.ndim - 3) + (slice(-2, None),)] = -np.inf
    return x


def non_finite_pool_input(shape, seed: int = 0) -> np.ndarray:
    """What the portable averages' NaN handling is tested on (any rank): channel 0 normal numbers with NaN of either
    sign, +inf and -inf scattered, a NaN with the sign bit (x86's ``inf - inf``) in the first window and both
    infinities in the last; 1, -inf alone; 2, +inf alone; 3, -0.0; the others normal numbers."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(shape).astype(np.float32)
    r = g.random(shape[2:])
    x[0, 0][r < 0.06] = np.nan
    x[0, 0][(r >= 0.06) & (r < 0.09)] = np.uint32(0xFFC00000).view(np.float32)
    x[0, 0][(r >= 0.09) & (r < 0.2)] = np.inf
    x[0, 0][(r >= 0.2) & (r < 0.32)] = -np.inf
    x[0, 0].flat[0] = np.uint32(0xFFC00000).view(np.float32)
    x[0, 0].flat[-2:] = -np.inf, np.inf
    x[0, 1], x[0, 2], x[0, 3] = -np.inf, np.inf, -0.0
    return x


#: (input shape, output size, opset) of every portable average form with an AveragePool (whose NaN mean TFLite
#: makes -inf: lowering/avg_non_finite.py, PooledNanStep): 1-D and 2-D runs (Slice cuts; Split below opset 10),
#: uniform windows (one AveragePool), axes averaged to 1 from opset 18 (a pool spanning them), a uniform axis beside
#: runs (mixed), a non-integer upsample, 3-D as two 2-D pools, 3-D pools to 1 (two 2-D pools too: ncnn)
POOLED_AVG_CASES = [((1, 6, 11), (4,), 17), ((1, 6, 11), (4,), 21), ((1, 6, 12), (4,), 17), ((1, 6, 11), (1,), 18),
                    ((1, 6, 8, 9), (5, 7), 7), ((1, 6, 8, 9), (5, 7), 9), ((1, 6, 8, 9), (5, 7), 11),
                    ((1, 6, 8, 9), (5, 7), 17), ((1, 6, 8, 9), (5, 7), 18), ((1, 6, 8, 8), (4, 4), 17),
                    ((1, 6, 8, 9), (1, 1), 18), ((1, 6, 8, 9), (5, 1), 18), ((1, 6, 8, 9), (4, 7), 17),
                    ((1, 6, 4, 5), (6, 6), 17), ((1, 6, 4, 5, 6), (2, 3, 4), 17), ((1, 6, 4, 5, 6), (2, 3, 4), 18),
                    ((1, 6, 4, 6, 8), (2, 3, 4), 17), ((1, 6, 4, 5, 6), (1, 3, 4), 17), ((1, 6, 4, 5, 6), (1, 1, 1), 17),
                    ((1, 6, 4, 5, 6), (1, 1, 1), 18), ((1, 6, 4, 5, 6), (4, 1, 1), 17), ((1, 6, 4, 5, 6), (1, 5, 6), 17)]
POOLED_AVG_IDS = [f"{'x'.join(map(str, i[2:]))}_to_{'x'.join(map(str, s))}_opset{o}" for i, s, o in POOLED_AVG_CASES]
#: the few of them the slow runtimes (a conversion each) run: 1-D, 2-D below opset 10, 2-D runs, uniform, to one
#: from opset 18, 3-D, and 3-D pools to 1
POOLED_AVG_FEW = [POOLED_AVG_CASES[i] for i in (0, 3, 5, 8, 9, 11, 14, 18, 20)]
POOLED_AVG_FEW_IDS = [POOLED_AVG_IDS[i] for i in (0, 3, 5, 8, 9, 11, 14, 18, 20)]


def portable_pooled_avg(shape, size, opset: int) -> onnx.ModelProto:
    """One average pooling node patched for the portable target (each of :data:`POOLED_AVG_CASES` writes an
    AveragePool)."""
    import onnxpoolfix

    return onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), target="portable").model


def compare_with_torch_at(model: onnx.ModelProto, module, sizes, *, channels: int = 3) -> int:
    """Run ``model`` (one input named ``x``) at each (H, W) of ``sizes`` that its input accepts (a dim torch
    specialised stays fixed) against ``module`` itself; returns how many sizes ran."""
    import torch

    dims = model.graph.input[0].type.tensor_type.shape.dim
    sess = ort_session(model)
    ran = 0
    for size in sizes:
        x = torch.randn(1, channels, *size)
        if not all(not d.HasField("dim_value") or d.dim_value == n for d, n in zip(dims, x.shape)):
            continue
        with torch.no_grad():
            want = module(x)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(sess.run(None, {"x": x.numpy()}), want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6, err_msg=str(size))
        ran += 1
    return ran

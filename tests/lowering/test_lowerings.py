"""Per-lowering tests on tiny leftover models built in code (onnx.helper): which lowering fired, what it
emitted, that the result passes the full onnx checker and matches onnxpoolfix.reference (max: bit for bit),
why a lowering refuses a node, and the graph surgery around it (names, imports, dead constants, indices)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import ATEN, assert_avg_close, assert_bits_equal, make_leftover, ort_run
from onnx import TensorProto, helper

from onnxpoolfix import patch, reference
from onnxpoolfix import windows as W
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph import read_names
from onnxpoolfix.graph.emit import op_types
from onnxpoolfix.graph.shapes import model_opset, resolve_specs
from onnxpoolfix.plan.planner import candidates
from onnxpoolfix.words import CLI, render

F32, F16, F64, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16
NP = {F32: np.float32, F16: np.float16, F64: np.float64}
GLUE = {"Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}
NAN_GUARD = {"IsNaN", "Equal", "Less", "Greater", "Where", "Cast", "ReduceSum", "Sub", "Not", "If", "Identity",
             "Abs", "Or", "Constant"}  # max: NaN / -inf as torch (Sub, Equal, Abs, Or, Not: the portable target's NaN test)
# the portable target's max without comparisons (lowering/max_steps.py): window means of a NaN carrier, window maxes
# of a -inf code
ARITH_NAN_GUARD = {"Sub", "Relu", "Neg", "Max", "Min", "Add", "Abs", "Exp", "Mul", "ReduceMean", "AveragePool"}
# averages of the onnxruntime target through a MatMul: the weights as Div(Cast(indicator), lengths), and the If
# whose else-branch keeps NaN/inf in their windows (tests/lowering/test_avg_non_finite.py)
AVG_GUARD = {"Div", "ReduceSum", "Sub", "IsNaN", "Equal", "Abs", "Not", "If", "Identity", "Greater", "Less", "Or",
             "And", "Where", "Cast", "Constant"}
ARGMAX = {"Gather", "Transpose", "Reshape", "IsNaN", "Where", "ArgMax", "Cast", "ReduceMax", "Greater", "Mul",
          "GatherElements", "Add", "Shape", "Concat", "Unsqueeze", "Slice", "Equal", "Squeeze", "Sub", "Flatten", "Size", "And"}


def spec_of(model, target="onnxruntime"):
    nodes = find_pool_nodes(model.graph)
    return resolve_specs(model, nodes, opset=model_opset(model), target=target)


def reasons(model, target="onnxruntime") -> dict[str, str | None]:
    (spec,) = spec_of(model, target)
    return {c.name: c.reason for c in candidates(spec)}


def rand(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(NP[dtype])


def check_numeric(model, kind, x, out_size, indices=False):
    outs = ort_run(model, {"x": x})
    if kind == "avg":
        want = reference.adaptive_avg_pool(x.astype(np.float64), out_size).astype(x.dtype)
        assert_avg_close(outs[0], want, x)
    else:
        v, i = reference.adaptive_max_pool(x, out_size)
        assert_bits_equal(outs[0], v, "max values")
        if indices:
            assert_bits_equal(outs[1], i, "max indices")
    return outs


def emitted_ops(model) -> set[str]:
    """Op types in the graph and in If branches (the lazy NaN/-inf guard of max lowerings)."""
    def walk(graph):
        for n in graph.node:
            yield n.op_type
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from walk(a.g)
    return set(walk(model.graph))


# (lowering, kind, input shape, output size, ops that must appear)
CASES = [
    ("identity", "avg", (2, 3, 5, 6), (5, 6), {"Identity"}),
    ("identity", "max", (2, 3, 5, 6), (5, 6), {"Identity"}),
    ("identity", "avg", (2, 3, 1), (1,), {"Identity"}),  # 1 -> 1
    ("global", "avg", (2, 3, 5, 7), (1, 1), {"ReduceMean"}),
    ("global", "max", (2, 3, 5, 7), (1, 1), {"ReduceMax"}),
    ("global", "avg", (2, 3, 5, 7), (5, 1), {"ReduceMean"}),  # H kept, W global
    ("global", "max", (2, 3, 5), (1,), {"ReduceMax"}),  # 5 -> 1
    ("global", "avg", (3, 6, 4, 5), (1, 1, 1), {"ReduceMean"}),  # unbatched 3D
    ("pool", "avg", (2, 3, 7, 5), (3, 4), {"AveragePool"}),  # 7->3 k3 s2, 5->4 k2 s1: uniform, not divisible
    ("pool", "max", (2, 3, 7, 5), (3, 4), {"MaxPool"}),
    ("pool", "avg", (2, 2, 9), (3,), {"AveragePool"}),
    ("pool", "max", (1, 2, 6, 8, 4), (3, 4, 2), {"MaxPool"}),
    ("pool", "avg", (2, 3, 8, 6), (4, 6), {"AveragePool"}),  # W kept
    ("block_pool", "avg", (2, 3, 1000), (30,), {"AveragePool"}),  # 10 periods of 100 -> 3 (k34 s33)
    ("block_pool", "max", (2, 3, 4, 40), (4, 16), {"MaxPool"}),  # H kept; 8 periods of 5 -> 2 (k3 s2)
    ("resize", "avg", (2, 3, 3, 4), (6, 12), {"Resize"}),
    ("resize", "max", (1, 2, 3), (9,), {"Resize"}),
    ("resize", "avg", (2, 3, 1, 4), (5, 4), {"Resize"}),  # 1 -> 5
    ("resize", "max", (3, 2, 3), (4, 6), {"Resize"}),  # unbatched
    ("mixed", "avg", (2, 3, 8, 9), (4, 7), {"AveragePool", "MatMul"}),  # H uniform, W not
    ("mixed", "max", (2, 3, 8, 3), (4, 6), {"MaxPool", "Resize"}),
    ("mixed", "avg", (1, 2, 4, 10), (8, 5), {"AveragePool", "Resize"}),
    ("mixed", "avg", (2, 2, 6, 5, 7), (3, 10, 4), {"AveragePool", "Resize", "MatMul"}),
    ("matmul", "avg", (2, 3, 10, 11), (4, 4), {"MatMul"}),
    ("matmul", "avg", (2, 2, 5, 6, 7), (3, 4, 5), {"MatMul"}),
    ("matmul", "avg", (2, 3, 5), (6,), {"MatMul"}),  # non-integer upsample
    ("matmul", "avg", (3, 10, 11), (4, 4), {"MatMul"}),  # unbatched
    ("kronecker", "avg", (2, 3, 10, 11), (4, 4), {"MatMul", "Reshape"}),
    ("kronecker", "avg", (2, 2, 5, 6, 7), (3, 4, 5), {"MatMul", "Reshape"}),
    ("kronecker", "avg", (2, 3, 5, 6), (1, 5), {"MatMul", "Reshape"}),  # 5 -> 1 too
    ("pool_gather", "max", (2, 3, 11, 13), (4, 5), {"MaxPool", "Gather", "Max"}),
    ("pool_gather", "max", (2, 3, 10), (4,), {"MaxPool", "Gather"}),  # equal lengths, uneven starts
    ("pool_gather", "max", (2, 3, 5), (6,), {"Gather", "Max"}),  # kmin 1: no MaxPool
    ("pool_gather", "max", (1, 2, 8, 11), (4, 4), {"MaxPool", "Gather", "Max"}),  # H uniform, W not
    ("window_gather", "max", (2, 3, 11, 13), (4, 5), {"Gather", "ReduceMax"}),
    ("window_gather", "max", (3, 11, 13), (4, 5), {"Gather", "ReduceMax"}),  # unbatched
    ("window_gather", "max", (2, 2, 5, 6, 7), (3, 4, 5), {"Gather", "ReduceMax"}),
    ("pool_cover", "max", (2, 3, 64, 64), (5, 7), {"MaxPool", "Gather", "Max"}),  # H on a grid, W uniform
    ("pool_cover", "max", (2, 3, 10), (4,), {"MaxPool", "Gather", "ReduceMax", "Max"}),  # 2 missed in a window
    ("pool_cover", "max", (2, 3, 11, 13), (4, 5), {"MaxPool", "Gather", "ReduceMax", "Max"}),  # + a window Gather
    ("argmax", "max", (2, 3, 11, 13), (4, 5), {"ArgMax", "GatherElements"}),
    ("argmax", "max", (2, 2, 5, 6, 7), (3, 4, 5), {"ArgMax", "GatherElements"}),
    ("argmax", "max", (2, 3, 7), (3,), {"ArgMax", "GatherElements"}),
    # window sums: where an axis has more windows than window_slices cuts (64)
    ("window_sum", "avg", (2, 3, 70, 11), (65, 4), {"Pad", "Gather", "ReduceSum", "Div"}),
    ("window_sum", "avg", (2, 2, 5, 6, 70), (3, 4, 65), {"Pad", "Gather", "ReduceSum", "Div"}),
    ("window_sum", "avg", (2, 3, 60), (66,), {"Pad", "Gather", "ReduceSum", "Div"}),  # non-integer upsample
    ("window_sum", "avg", (3, 70, 11), (65, 4), {"Pad", "Gather", "ReduceSum", "Div"}),  # unbatched
    # batched 1-D/2-D averages: runs of windows, one AveragePool each (float64: a ReduceMean per window)
    ("window_slices", "avg", (2, 3, 10, 11), (4, 4), {"Slice", "AveragePool", "Concat"}),
    # 3-D: two 2-D pools, over H/W of [N, C*D, H, W] and over D of [N, C, D, H'*W'] (lowering/separable.py)
    ("window_slices", "avg", (2, 2, 5, 6, 7), (3, 4, 5), {"Reshape", "Slice", "AveragePool", "Concat"}),
    ("window_slices", "avg", (2, 3, 5), (6,), {"Slice", "AveragePool", "Concat"}),  # non-integer upsample
    ("window_slices", "avg", (3, 10, 11), (4, 4), {"Slice", "ReduceMean", "AveragePool", "Concat"}),  # unbatched: H reduced
    ("window_slices", "max", (2, 3, 11, 13), (4, 5), {"Slice", "ReduceMax", "Concat"}),
]
# lowerings only the portable target plans (their cases run with it)
PORTABLE_ONLY = {"window_sum", "window_slices"}


def _cid(c):
    return f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}-to-{'x'.join(map(str, c[3]))}"


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=["f32", "f16", "f64"])
@pytest.mark.parametrize("case", CASES, ids=_cid)
def test_lowering(case, dtype):
    name, kind, shape, size, required = case
    model = make_leftover(kind, shape, size, dtype=dtype)
    target = "portable" if name in PORTABLE_ONLY else "onnxruntime"
    why = reasons(model, target)
    if dtype == F64 and why[name] and "float64" in why[name]:
        assert why[name].startswith("onnxruntime has no float64 kernel for AveragePool")
        pytest.skip(why[name])
    assert why[name] is None, why[name]
    res = patch(model, check=False, strategy=name, target=target)
    (rep,) = res.report.nodes
    assert rep.lowering == name
    out = res.model
    ops = emitted_ops(out)
    assert all(n.domain in ("", "ai.onnx") for n in out.graph.node)
    if dtype == F64 and "Resize" in required:  # no Resize kernel for float64: the same copy as a Gather
        required = required - {"Resize"} | {"Gather"}
    if dtype == F64 and name == "window_slices" and "AveragePool" in required:  # nor AveragePool: ReduceMeans
        required = required - {"AveragePool"} | {"ReduceMean"}
    assert required <= ops, ops
    guarded = kind == "avg" and target == "onnxruntime" and "MatMul" in required
    max_guard = ARITH_NAN_GUARD if target == "portable" else NAN_GUARD
    # the portable target's averages through AveragePool: TFLite's lost NaN taken back (avg_non_finite.PooledNanStep)
    lost_nan = {"Neg", "Max", "Min", "Sub"} if kind == "avg" and target == "portable" and "AveragePool" in ops else set()
    allowed = (required | GLUE | (max_guard if kind == "max" else set()) | (ARGMAX if name == "argmax" else set())
               | (AVG_GUARD if guarded else set()) | lost_nan)
    assert ops <= allowed, ops - allowed
    assert ("If" in ops) == (guarded or (kind == "max" and "If" in ops))
    assert rep.ops == op_types(out.graph.node)  # the If branches' nodes too
    read = read_names(out.graph)
    assert not [t.name for t in out.graph.initializer if t.name not in read]  # onnxruntime warns at each load
    onnx.checker.check_model(out, full_check=True)
    check_numeric(out, kind, rand(shape, dtype), size)


def test_every_lowering_has_cases():
    from onnxpoolfix.lowering import BY_NAME

    static = {n for n, lw in BY_NAME.items() if not lw.dynamic} | {"window_slices", "global"}  # (both)
    assert static == {c[0] for c in CASES}


# ---- why a lowering does not apply --------------------------------------------------------------------

@pytest.mark.parametrize("kind,shape,size,kw,lowering,reason", [
    ("avg", (1, 2, 10), (4,), {}, "pool", "axis 10->4 non-uniform has no single kernel/stride"),
    ("max", (1, 2, 11, 8), (4, 4), {}, "pool", "axis 11->4 non-uniform has no single kernel/stride"),
    ("avg", (1, 2, 5), (6,), {}, "resize", "axis 5->6 non-uniform is not an integer upsample"),
    ("avg", (1, 2, 6, 8), (3, 8), {}, "resize", "axis 6->3 uniform k2 s2 is not an integer upsample"),
    ("avg", (1, 2, 5, 6), (5, 3), {}, "identity", "axis 6->3 uniform k2 s2 changes length"),
    ("avg", (1, 2, 5, 6), (5, 6), {}, "global", "nothing to pool (every size is kept)"),
    ("avg", (1, 2, 5, 6), (1, 3), {}, "global", "axis 6->3 uniform k2 s2 has output size > 1"),
    ("avg", (1, 1, 48, 48), (47, 47), {}, "kronecker", "the Kronecker matrix would take 19 MiB (limit 16 MiB)"),
    ("avg", (1, 2, 10), (4,), {}, "argmax", "only for max pooling"),
    ("avg", (1, 2, 10), (4,), {}, "window_gather", "only for max pooling"),
    ("max", (1, 2, 10), (4,), {}, "matmul", "only for avg pooling"),
    ("max", (1, 2, 11), (4,), {"indices": "output"}, "window_gather",
     "the indices output is read, and this lowering does not compute it"),
    ("max", (1, 2, 11), (4,), {"indices": "output"}, "pool_gather",
     "the indices output is read, and this lowering does not compute it"),
    ("max", (1, 2, 6), (3,), {"indices": "output"}, "pool",
     "the indices output is read, and this lowering does not compute it"),
    ("avg", (1, 2, 7), (3,), {"dtype": F64}, "pool", "onnxruntime has no float64 kernel for AveragePool"),
    ("avg", (1, 2, 5, 6), (1, 1), {"dtype": F64}, "global", None),  # ReduceMean has float64
    ("avg", (1, 2, 3), (6,), {"opset": 10}, "resize", "needs opset 11, the model has 10"),
    ("avg", (1, 2, 10, 11), (4, 4), {}, "mixed", "no axis has uniform windows or an integer upsample (that is plain 'matmul')"),
    ("avg", (1, 2, 3, 4), (6, 8), {"opset": 9}, "mixed", "every changed axis is of one kind (that is plain 'pool' or 'resize')"),
    ("max", (1, 2, 8, 3), (4, 6), {"opset": 9}, "mixed", None),  # upsample as a Gather before opset 11
    ("avg", (1, 2, 7), (3,), {"dtype": BF16, "opset": 11}, "pool",
     "bfloat16 needs opset 13 (no operator takes bfloat16 before), the model has 11"),
    ("avg", (3, 7, 9), (3, 4), {}, "pool", "input rank 3 is not N, C + 2 spatial axes (pooling ops need that layout)"),
    ("max", (3, 11), (4,), {}, "pool_gather", "input rank 2 is not N, C + 1 spatial axes (pooling ops need that layout)"),
    ("max", (1, 2, 7, 9), (3, 3), {}, "window_gather", "no axis has non-uniform windows (that is plain 'pool' or 'resize')"),
    ("max", (1, 2, 7, 9), (3, 5), {}, "mixed", "a max-pooled axis has non-uniform windows (that is 'pool_gather' or 'window_gather')"),
    ("avg", (1, 2, 10), (4,), {}, "window_sum",
     "MatMul runs faster in onnxruntime, its guard keeping NaN and inf in their windows (below opset 9, without the "
     "guard, the window sums do)"),
    ("max", (1, 3, 7, 7), (3, 3), {"dtype": F64, "opset": 7}, "pool",
     "onnxruntime has no float64 kernel for MaxPool at opset 7"),
    ("avg", (1, 2, 10), (4,), {"opset": 8}, "matmul",
     "a MatMul carries a NaN or inf beyond its windows, and its guard needs opset 9 (Where), the model has 8"),
])
def test_reason(kind, shape, size, kw, lowering, reason):
    model = make_leftover(kind, shape, size, **kw)
    got = reasons(model)[lowering]
    assert render(got, CLI) == reason  # (a reason names a flag by reference: onnxpoolfix.words)
    if reason is not None:
        with pytest.raises(UnsupportedNodeError, match="does not apply to"):
            patch(model, check=False, strategy=lowering)


def test_bfloat16_before_opset13_is_refused_not_broken():
    """No operator takes bfloat16 before opset 13 (Cast included): refuse with every reason, do not emit
    a model onnxruntime cannot load."""
    model = make_leftover("avg", (1, 2, 7), (3,), dtype=BF16, opset=11)
    with pytest.raises(UnsupportedNodeError, match="bfloat16 needs opset 13"):
        patch(model, check=False)


# ---- several nodes, surgery, idempotence ----------------------------------------------------------------

def _two_node_model():
    """x -> avg 2d 10x11 -> 4x4 (node a) -> max 2d 4x4 -> 3x3 (node b) -> y."""
    nodes = [
        helper.make_node("Constant", [], ["s1"], value=onnx.numpy_helper.from_array(np.array([4, 4], np.int64))),
        helper.make_node("adaptive_avg_pool2d", ["x", "s1"], ["h"], name="a", domain=ATEN),
        helper.make_node("Constant", [], ["s2"], value=onnx.numpy_helper.from_array(np.array([3, 3], np.int64))),
        helper.make_node("adaptive_max_pool2d", ["h", "s2"], ["y", "unused_idx"], name="b", domain=ATEN),
    ]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", F32, [2, 3, 10, 11])],
                          [helper.make_tensor_value_info("y", F32, [2, 3, 3, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ATEN, 1)])


def test_two_nodes_each_fired_once():
    res = patch(_two_node_model(), check=False)
    assert [n.name for n in res.report.nodes] == ["a", "b"]
    assert res.report.nodes[0].lowering in ("matmul", "kronecker")  # 10->4, 11->4: non-uniform average
    assert res.report.nodes[1].lowering == "pool"  # 4->3: uniform k2 s1
    assert res.report.nodes[1].indices == "dropped"
    x = rand((2, 3, 10, 11))
    (y,) = ort_run(res.model, {"x": x})
    h = reference.adaptive_avg_pool(x.astype(np.float64), (4, 4)).astype(np.float32)
    assert y.shape == (2, 3, 3, 3)
    assert_avg_close(y, reference.adaptive_max_pool(h, (3, 3))[0], x, rel=1e-6)  # max of a rounded average
    onnx.checker.check_model(res.model, full_check=True)
    res2 = patch(res.model, check=False)
    assert res2.report.nodes == [] and res2.model.SerializeToString() == res.model.SerializeToString()


@pytest.mark.parametrize("encoding", ["aten-op", "ATen-attr", "ATen-attr-default"])
@pytest.mark.parametrize("size_as", ["constant", "initializer"])
def test_surgery(encoding, size_as):
    model = make_leftover("max", (2, 3, 11, 13), (4, 5), encoding=encoding, indices="unused", node_name="feat/pool",
                          size_as=size_as)
    res = patch(model, check=False)
    out = res.model
    (rep,) = res.report.nodes
    assert rep.encoding == ("aten-op" if encoding == "aten-op" else "ATen-attr")
    assert rep.indices == "dropped"
    # no custom domain, no aten import, no dead size constant, no dropped output anywhere
    assert all(n.domain in ("", "ai.onnx") for n in out.graph.node)
    assert [o.domain for o in out.opset_import] == [""]
    assert not any("size" == o for n in out.graph.node for o in n.output)
    assert "size" not in {t.name for t in out.graph.initializer}
    assert not any("y_indices" in list(n.output) for n in out.graph.node)
    assert "y_indices" not in {v.name for v in out.graph.value_info}
    # new names carry the replaced node's name; the output tensor keeps its name
    assert all(n.name.startswith("feat/pool/") for n in out.graph.node)
    assert all(t.name.startswith("feat/pool/") for t in out.graph.initializer)
    assert [o.name for o in out.graph.output] == ["y"]
    assert out.graph.node[-1].output[0] == "y"
    onnx.checker.check_model(out, full_check=True)
    check_numeric(out, "max", rand((2, 3, 11, 13)), (4, 5))
    again = patch(out, check=False)
    assert again.report.nodes == []
    assert again.model.SerializeToString() == out.SerializeToString()


@pytest.mark.parametrize("kind,shape,size", [("avg", (2, 3, 8, 9), (4, 7)), ("max", (2, 3, 11, 13), (4, 5)),
                                             ("avg", (2, 3, 4), (8,)), ("max", (1, 2, 5, 6), (5, 6))])
def test_idempotent_bytes(kind, shape, size):
    once = patch(make_leftover(kind, shape, size), check=False).model
    twice = patch(once, check=False)
    assert twice.report.nodes == [] and twice.report.check_note == "nothing to patch"
    assert twice.model.SerializeToString() == once.SerializeToString()


def test_builtin_check_passes_for_every_lowering():
    for name, kind, shape, size, _ in CASES:
        target = "portable" if name in PORTABLE_ONLY else "onnxruntime"
        res = patch(make_leftover(kind, shape, size), check=True, strategy=name, target=target)
        assert res.report.check_passed, (name, shape, size)


# ---- max pooling: NaN, ties, -inf, indices as torch has them ----------------------------------------

def _torch_max(x, size):
    torch = pytest.importorskip("torch", reason="torch is not installed: compared with onnxpoolfix.reference only")
    fn = {1: torch.nn.functional.adaptive_max_pool1d, 2: torch.nn.functional.adaptive_max_pool2d,
          3: torch.nn.functional.adaptive_max_pool3d}[len(size)]
    v, i = fn(torch.from_numpy(x), size if len(size) > 1 else size[0], return_indices=True)
    return v.numpy(), i.numpy()


def _special_input(shape, seed, *, nan=0.05, neg_inf=0.05, zeros=True):
    g = np.random.default_rng(seed)
    x = np.round(g.standard_normal(shape) * 2) / 2  # ties
    r = g.random(shape)
    x[r < nan] = np.nan
    x[(r >= nan) & (r < nan + neg_inf)] = -np.inf
    if zeros:
        x[(r >= 0.5) & (r < 0.55)] = -0.0
    return x.astype(np.float32)


@pytest.mark.parametrize("shape,size", [((2, 3, 11, 13), (4, 5)), ((2, 3, 7), (3,)), ((1, 2, 5, 6, 7), (3, 4, 5)),
                                        ((2, 2, 4, 4), (8, 8)), ((2, 2, 9, 9), (3, 3))])
def test_argmax_nan_ties_match_torch(shape, size):
    x = _special_input(shape, 1)
    x[0, 0, ..., :2] = np.nan  # windows with several NaNs: torch takes the last one
    model = make_leftover("max", shape, size, indices="output")
    res = patch(model, check=False)
    assert res.report.nodes[0].lowering == "argmax" and res.report.nodes[0].indices == "computed"
    v, i = ort_run(res.model, {"x": x})
    rv, ri = reference.adaptive_max_pool(x, size)
    assert_bits_equal(i, ri, "indices vs reference")
    assert_bits_equal(v, rv, "values vs reference")
    # then torch itself; without it this skips (saying so) instead of comparing with the reference twice
    tv, ti = _torch_max(x, size)
    assert_bits_equal(i, ti, "indices vs torch")
    assert_bits_equal(v, tv, "values vs torch")


MAX_LOWERINGS = ["identity", "global", "pool", "resize", "mixed", "pool_gather", "window_gather", "pool_cover", "argmax"]


@pytest.mark.parametrize("shape,size", [((2, 3, 11, 13), (4, 5)), ((2, 3, 12, 9), (4, 3)), ((2, 3, 8, 8), (1, 1)),
                                        ((2, 2, 10), (4,)), ((2, 2, 5, 6, 7), (3, 4, 5)), ((2, 2, 3, 4), (6, 8)),
                                        ((2, 3, 8, 3), (4, 6)), ((1, 2, 8, 11), (4, 4))])
@pytest.mark.parametrize("data", ["neg_inf_blocks", "nan", "nan_last", "all_nan"])
def test_max_non_finite(shape, size, data):
    """Every applicable max lowering gives torch's values on -inf windows and NaN (NaN anywhere in a window
    -> NaN, a window of -inf -> -inf, never -FLT_MAX). Signed zeros are left out: see test_signed_zero."""
    x = _special_input(shape, 2, nan=0.0, neg_inf=0.0, zeros=False)
    if data == "neg_inf_blocks":
        x[..., : shape[-1] // 2] = -np.inf  # whole windows of -inf
    elif data == "nan":
        x.reshape(-1)[::7] = np.nan
    elif data == "nan_last":
        x[..., -1] = np.nan
    else:
        x[:] = np.nan
    model = make_leftover("max", shape, size)
    why = reasons(model)
    want, _ = reference.adaptive_max_pool(x, size)
    ran = 0
    for name in MAX_LOWERINGS:
        if why[name]:
            continue
        out = patch(model, check=False, strategy=name).model
        (v,) = ort_run(out, {"x": x})
        assert_bits_equal(v + np.float32(0), want + np.float32(0), f"{name} values")
        ran += 1
    assert ran >= 2


def test_signed_zero():
    """torch keeps the first of equal values; onnxruntime's MaxPool the last. Of 0.0 and -0.0 in one
    window the lowering may pick the other sign (equal as numbers); only 'argmax' orders ties as torch."""
    x = np.array([0.0, -0.0, -1.0, -0.0, 0.0, -2.0], np.float32).reshape(1, 1, 6)
    model = make_leftover("max", (1, 1, 6), (2,))
    want, _ = reference.adaptive_max_pool(x, (2,))
    (v,) = ort_run(patch(model, check=False, strategy="argmax").model, {"x": x})
    assert_bits_equal(v, want)
    (v,) = ort_run(patch(model, check=False, strategy="pool").model, {"x": x})
    assert np.array_equal(v, want)  # numerically; the sign of zero may differ


@pytest.mark.parametrize("name", ["pool", "global", "matmul", "kronecker"])
def test_avg_non_finite(name):
    """A NaN/inf in one window reaches only that window's outputs, as in torch, whichever lowering: AveragePool
    and ReduceMean by themselves, the MatMul lowerings through their guard (tests/lowering/test_avg_non_finite.py)."""
    shape, size = ((1, 2, 8, 8), (4, 4)) if name != "global" else ((1, 2, 8, 8), (1, 8))
    x = rand(shape)
    x[0, 0, 0, 0] = np.nan
    x[0, 1, 5, 5] = np.inf
    model = make_leftover("avg", shape, size)
    (y,) = ort_run(patch(model, check=False, strategy=name).model, {"x": x})
    want = reference.adaptive_avg_pool(x.astype(np.float64), size).astype(np.float32)
    assert np.array_equal(np.isnan(y), np.isnan(want)) and np.array_equal(np.isinf(y), np.isinf(want))


# ---- unbatched, batch > 1, int upsample, encodings, opsets ----------------------------------------------

@pytest.mark.parametrize("opset", [9, 11, 13, 17, 18, 21])
@pytest.mark.parametrize("kind,shape,size", [("avg", (2, 3, 8, 9), (4, 7)), ("max", (2, 3, 11, 13), (4, 5)),
                                             ("avg", (2, 3, 3, 4), (6, 8)), ("max", (2, 3, 8, 3), (4, 6)),
                                             ("max", (2, 3, 5, 7), (1, 1))])
def test_opsets_auto(opset, kind, shape, size):
    model = make_leftover(kind, shape, size, opset=opset)
    res = patch(model, check=False)
    onnx.checker.check_model(res.model, full_check=True)
    if opset < 11:
        assert "Resize" not in emitted_ops(res.model)
    x = rand(shape)
    if kind == "max":
        x[..., :1] = -np.inf
        x[0, 0, 0, -1] = np.nan
    check_numeric(res.model, kind, x, size)


@pytest.mark.parametrize("shape,size", [((2, 3, 1000), (30,)), ((2, 3, 12, 5), (8, 5)), ((1, 2, 6, 24), (4, 18)),
                                        ((2, 2, 3, 12, 4), (3, 8, 4))])
def test_matmul_block_form_for_periodic_windows(shape, size):
    """gcd(n, m) > 1: P is block-diagonal; the block form must give the reference's averages."""
    from onnxpoolfix.lowering.steps import MatMulStep

    model = make_leftover("avg", shape, size)
    res = patch(model, check=True, strategy="matmul")
    assert res.report.check_passed
    x = rand(shape, F32)
    check_numeric(res.model, "avg", x, size)
    if shape == (2, 3, 1000):  # 1000 -> 30 repeats every 100 inputs / 3 outputs: the block form wins
        assert MatMulStep(2, 1000, 30).layout(shape)[0] == 10  # (g, kron): the period of the block form
        (init,) = [t for t in res.model.graph.initializer if t.name.endswith("pool_block_t_indicator")]
        assert list(init.dims) == [100, 3]


# ---- block_pool: uniform within each gcd period ---------------------------------------------------------

def test_block_uniform_matches_the_windows():
    """block_uniform(n, m) claims: n -> m is g periods of a uniform p -> q. Check it window by window."""
    from onnxpoolfix.lowering.block_pool import block_uniform

    found = 0
    for n in range(2, 80):
        for m in range(1, n):
            bu = block_uniform(n, m)
            if bu is None:
                continue
            found += 1
            g, u = bu
            p, q = n // g, m // g
            want = [(b * p + j * u.stride, b * p + j * u.stride + u.kernel) for b in range(g) for j in range(q)]
            assert list(W.windows(n, m)) == want, (n, m)
    assert found > 300


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("in_shape,size", [((2, 3, 1000), (30,)), ((1, 4, 40), (16,)), ((2, 3, 200, 7), (6, 7)),
                                           ((2, 3, 12, 200), (12, 6)), ((1, 2, 4, 5, 60), (4, 5, 8))])
def test_block_pool_is_bit_exact(kind, in_shape, size):
    import onnxpoolfix
    from onnxpoolfix import reference

    model = make_leftover(kind, in_shape, size)
    result = onnxpoolfix.patch(model, strategy="block_pool")
    x = np.random.default_rng(1).standard_normal(in_shape).astype(np.float32)
    got = ort_run(result.model, {"x": x})[0]
    if kind == "avg":
        want = reference.adaptive_avg_pool(x.astype(np.float64), size)
        assert_avg_close(got, want.astype(np.float32), x)
    else:
        assert_bits_equal(got, reference.adaptive_max_pool_values(x, size))
    assert "Reshape" in result.report.nodes[0].ops or kind == "max"


def test_block_pool_says_why_not():
    from onnxpoolfix.frontends.leftovers import find_pool_nodes
    from onnxpoolfix.graph.shapes import model_opset, resolve_specs
    from onnxpoolfix.lowering.block_pool import BlockPoolLowering

    def reason(in_shape, size):
        m = make_leftover("avg", in_shape, size)
        spec = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target="onnxruntime")[0]
        return BlockPoolLowering().check(spec)

    assert reason((1, 2, 1000), (30,)) is None
    assert "no repeating period" in reason((1, 2, 9), (7,))
    assert "not uniform" in reason((1, 2, 44), (16,))  # 11 -> 4 per period: overlapping, uneven
    assert "exactly one changed axis" in reason((1, 2, 40, 40), (16, 16))
    assert "does not shrink" in reason((1, 2, 4), (8,))

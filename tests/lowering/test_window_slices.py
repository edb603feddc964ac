"""The portable target's symbolic pooled sizes (issue 33, item 2): one file, a Slice per window, exact at every
size against torch and a numpy loop over the window formula; no op a runtime of docs/targets.md lacks; the
window bounds proven for every n; what it cannot take refused with the --input-shape hint."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from helpers import assert_bits_equal, make_leftover, non_finite_max_input, portable_max

import onnxpoolfix
from onnxpoolfix.errors import CheckFailedError, UnsupportedNodeError
from onnxpoolfix.lowering import window_slices

torch = pytest.importorskip("torch")

# what the default target's runtime windows use and tract, TVM, onnx2tf, ncnn refuse; what MNN and ncnn lack
NOT_PORTABLE = {"Range", "If", "IsNaN", "MatMul", "Loop", "Scan", "Reshape", "Transpose"}


def loop_reference(x: np.ndarray, out_sizes, kind: str) -> np.ndarray:
    """Adaptive pooling of x's last axes by start = floor(i*n/m), end = ceil((i+1)*n/m), one window at a time."""
    k = len(out_sizes)
    ins = x.shape[-k:]
    y = np.empty(x.shape[:-k] + tuple(out_sizes), dtype=np.float64)
    for idx in np.ndindex(*out_sizes):
        sl = tuple(slice((i * n) // m, -(-((i + 1) * n) // m)) for i, n, m in zip(idx, ins, out_sizes))
        w = x[(...,) + sl].astype(np.float64).reshape(x.shape[:-k] + (-1,))
        y[(...,) + idx] = w.mean(-1) if kind == "avg" else w.max(-1)  # numpy's max propagates NaN, as torch
    return y


def torch_pool(x: np.ndarray, out_sizes, kind: str) -> np.ndarray:
    fn = getattr(torch.nn.functional, f"adaptive_{kind}_pool{len(out_sizes)}d")
    return fn(torch.from_numpy(x), tuple(out_sizes)).numpy()


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


# (kind, input shape with symbols, output size, the input sizes run) - windows of every kind at each n
CASES = [
    ("avg", ("N", 3, "H", "W"), (5, 7), [(1, 3, 17, 13), (2, 3, 5, 7), (1, 3, 1, 1), (1, 3, 4, 3), (1, 3, 64, 71)]),
    ("max", ("N", 3, "H", "W"), (4, 5), [(1, 3, 17, 13), (2, 3, 4, 5), (1, 3, 1, 2), (1, 3, 9, 3), (1, 3, 40, 41)]),
    ("avg", ("N", 2, "L"), (7,), [(2, 2, 30), (1, 2, 7), (1, 2, 3), (1, 2, 1), (3, 2, 100)]),
    ("max", ("N", 2, "L"), (7,), [(2, 2, 30), (1, 2, 7), (1, 2, 3), (1, 2, 1)]),
    ("avg", (1, 2, "D", "H", "W"), (2, 3, 4), [(1, 2, 5, 7, 9), (1, 2, 2, 3, 4), (1, 2, 1, 8, 3)]),
    ("avg", ("N", 3, "H", 13), (4, 5), [(1, 3, 11, 13), (2, 3, 3, 13)]),  # one axis static
    ("avg", ("N", 3, "H", "W"), (1, 6), [(1, 3, 11, 13), (1, 3, 1, 4)]),  # an axis pooled to 1
    ("max", (3, "H", "W"), (2, 3), [(3, 10, 11), (3, 1, 2)]),  # unbatched
]


def _id(c):
    return f"{c[0]}-{'x'.join(map(str, c[1]))}-to-{'x'.join(map(str, c[2]))}"


@pytest.mark.parametrize("kind,shape,size,sizes", CASES, ids=[_id(c) for c in CASES])
def test_one_file_exact_at_every_size(kind, shape, size, sizes):
    res = onnxpoolfix.patch(make_leftover(kind, shape, size), target="portable", check=False)  # torch judges
    (node,) = res.report.nodes
    assert node.lowering == "window_slices"
    ops = {n.op_type for n in res.model.graph.node}
    assert not ops & NOT_PORTABLE, ops & NOT_PORTABLE
    assert "Slice" in ops
    onnx.checker.check_model(res.model, full_check=True)
    g = np.random.default_rng(0)
    for s in sizes:
        x = g.standard_normal(s).astype(np.float32)
        if kind == "max":
            x = np.round(x * 2) / 2  # ties
        got = run(res.model, x)
        want = torch_pool(x, size, kind)
        assert got.shape == want.shape, s
        if kind == "max":
            np.testing.assert_array_equal(got, want, err_msg=str(s))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=str(s))
        np.testing.assert_allclose(got, loop_reference(x, size, kind), rtol=1e-6, atol=1e-6, err_msg=str(s))


# static averages: (input shape, output size, opset, the reductions written). Short windows as runs of
# AveragePools (kernel its length, stride its step); longer than 16 below opset 18 a ReduceMean per window;
# from opset 18 runs whatever the length (pnnx drops the Reduce's axes input); unbatched H: ReduceMeans; batched 3-D:
# runs over [N, C*D, H, W] and [N, C, D, H'*W'] (lowering/separable.py)
STATIC = [
    ((2, 3, 9, 9), (7, 7), 17, {"AveragePool"}),
    ((1, 2, 11, 5), (4, 6), 13, {"AveragePool"}),  # W upsampled (windows of 1 and 2: stepped Slices)
    ((1, 2, 101, 8), (3, 3), 17, {"ReduceMean", "AveragePool"}),  # H: windows of 34-35, W: 3-4
    ((1, 2, 101, 8), (3, 3), 18, {"AveragePool"}),
    ((2, 3, 200), (7,), 17, {"ReduceMean"}),
    ((2, 3, 200), (7,), 21, {"AveragePool"}),
    ((1, 2, 5, 7, 9), (2, 3, 4), 18, {"AveragePool"}),
    ((1, 2, 5, 7, 40), (2, 3, 2), 17, {"AveragePool", "ReduceMean"}),  # W: windows of 20 (a ReduceMean each)
    ((3, 10, 11), (4, 4), 17, {"ReduceMean", "AveragePool"}),
]


@pytest.mark.parametrize("shape,size,opset,reductions", STATIC, ids=[f"{_id(('avg',) + c[:2])}-o{c[2]}" for c in STATIC])
def test_static_averages(shape, size, opset, reductions):
    res = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), target="portable", check=False)
    assert res.report.nodes[0].lowering in ("window_slices", "mixed")
    ops = {n.op_type for n in res.model.graph.node}
    assert ops & {"AveragePool", "ReduceMean", "ReduceSum"} == reductions
    # ncnn has no Gather layer; a batched 3-D pool's Reshapes (to 4-D and back) have constant shapes
    assert not ops & (NOT_PORTABLE | {"Gather"}) - ({"Reshape"} if len(shape) == 5 else set()), ops
    consts = {t.name for t in res.model.graph.initializer}
    assert all(n.input[1] in consts for n in res.model.graph.node if n.op_type == "Reshape")
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    got = run(res.model, x)
    np.testing.assert_allclose(got, torch_pool(x, size, "avg"), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, loop_reference(x, size, "avg"), rtol=1e-6, atol=1e-6)


SEPARABLE = [("avg", (1, 2, 5, 7, 9), (3, 7, 4), 17), ("avg", (2, 3, 6, 5, 7), (4, 3, 1), 18),
             ("max", (1, 2, 5, 7, 9), (3, 4, 5), 17), ("max", (2, 3, 4, 5, 6), (2, 3, 4), 18),
             ("max", (1, 2, 3, 4, 5), (1, 5, 2), 13)]


@pytest.mark.parametrize("kind,shape,size,opset", SEPARABLE, ids=[f"{_id(c[:3])}-o{c[3]}" for c in SEPARABLE])
def test_static_3d_pools_are_two_2d_pools(kind, shape, size, opset):
    """The portable target's static batched 3-D pools run on 4-D tensors only, with a 2-D pooling op among them:
    ncnn's Mat holds 4 dims without the batch, and pnnx drops the batch only where a pooling op says which dim
    it is (review77: the 5-D Slices failed to load). Torch's values, NaN and +-inf in their windows only."""
    res = onnxpoolfix.patch(make_leftover(kind, shape, size, opset=opset), target="portable",
                            strategy="window_slices")
    model = onnx.shape_inference.infer_shapes(res.model)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in model.graph.value_info}
    pooling = [n for n in model.graph.node if n.op_type in ("Slice", "Concat", "AveragePool", "MaxPool", "ReduceMean",
                                                              "ReduceMax")]
    assert all(ranks[n.output[0]] == 4 for n in pooling), ranks  # (elementwise ops on x: 4-D in ncnn, no batch)
    pools = [n for n in model.graph.node if n.op_type in ("AveragePool", "MaxPool")]
    assert pools and all(len(onnx.helper.get_node_attr_value(n, "kernel_shape")) == 2 for n in pools)
    g = np.random.default_rng(3)
    x = g.standard_normal(shape).astype(np.float32)
    x.flat[g.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf]
    got, want = run(res.model, x), torch_pool(x, size, kind)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # +-inf where torch's: equal_nan, same infs


#: static 3-D pools that upsample: every axis by an integer, one axis only, integer up and down, non-integer up,
#: one axis up and another down (input shape, output size)
UPSAMPLE_3D = [((1, 6, 2, 3, 4), (4, 6, 8)), ((2, 6, 2, 3, 4), (4, 3, 4)), ((1, 6, 2, 3, 4), (2, 3, 8)),
               ((1, 6, 4, 3, 4), (2, 6, 8)), ((1, 6, 2, 3, 4), (3, 5, 7)), ((1, 6, 3, 4, 5), (6, 3, 2))]


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,size", UPSAMPLE_3D, ids=[_id(("", *c))[1:] for c in UPSAMPLE_3D])
def test_static_3d_upsampling_writes_no_5d_resize(shape, size, kind, opset):
    """The portable target's static 3-D pools that upsample: no Resize of a 5-D tensor (pnnx converts it without
    its scales: ncnn returned the input's size, no error, review81; an integer upsample's copy is two 4-D Resizes,
    tests/test_runtime_ncnn.py runs them), torch's values, NaN and +-inf where torch's, -0.0 and -inf windows of
    the max bit for bit (the form ncnn takes for max: helpers.portable_max)."""
    model = (portable_max(shape, size, opset) if kind == "max" else
             onnxpoolfix.patch(make_leftover(kind, shape, size, opset=opset), target="portable").model)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in list(inferred.graph.value_info) +
             list(inferred.graph.input)}
    assert all(ranks[n.input[0]] <= 4 for n in model.graph.node if n.op_type == "Resize"), ranks
    x = non_finite_max_input(shape)
    if kind == "avg":  # (non_finite_max_input's 3e38 channels overflow a sum: its NaN/inf channel and finite ones)
        x[0, 2:] = np.random.default_rng(1).standard_normal(x[0, 2:].shape)
    got, want = run(model, x), torch_pool(x, size, kind)
    if kind == "max":
        assert_bits_equal(got, want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_window_runs_cover_the_windows_in_order():
    """Each run's windows, unrolled, are PyTorch's windows in order, for every n, m up to 40."""
    for n in range(1, 41):
        for m in range(1, 41):
            unrolled = [(r.start + j * r.step, r.start + j * r.step + r.length)
                        for r in window_slices.window_runs(n, m) for j in range(r.count)]
            assert unrolled == [((i * n) // m, -(-((i + 1) * n) // m)) for i in range(m)], (n, m)


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_nan_and_inf_reach_torchs_outputs_only(kind):
    res = onnxpoolfix.patch(make_leftover(kind, ("N", 2, "H", "W"), (5, 7)), target="portable", check=False)
    g = np.random.default_rng(1)
    for s in [(1, 2, 17, 13), (2, 2, 9, 23)]:
        x = g.standard_normal(s).astype(np.float32)
        x[0, 0, 0, 0] = np.nan
        x[0, 1, 2, 3] = np.inf
        x[1 % s[0], 1, -1, -1] = -np.inf
        got, want = run(res.model, x), torch_pool(x, (5, 7), kind)
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(got), test(want), err_msg=f"{test.__name__} at {s}")
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


def test_the_bounds_are_proven_for_every_n(monkeypatch):
    """The check runs the emitted bounds for every n up to its bound; an end one short for some n is caught
    by that proof by name, even where the sizes the check runs the node at do not show it."""
    res = onnxpoolfix.patch(make_leftover("avg", ("N", 2, "H", "W"), (5, 7)), target="portable")
    assert res.report.check_passed
    assert any("window_slices lowering proven up to n = 512" in str(n) for n in res.report.notes)
    real = window_slices.WindowSlicesStep.bounds

    def short_end_above_300(self, em, x):  # ends one short where n > 300 (no size the check picks is)
        starts, ends = real(self, em, x)
        if self.n is not None:
            return starts, ends
        n = em.op("Gather", [em.op("Shape", [x]), em.ints("axis", [self.axis])], axis=0)
        cut = em.op("Cast", [em.op("Greater", [n, em.ints("limit", [300])])], to=onnx.TensorProto.INT64)
        return starts, [em.op("Sub", [e, cut]) for e in ends]

    monkeypatch.setattr(window_slices.WindowSlicesStep, "bounds", short_end_above_300)
    with pytest.raises(CheckFailedError, match="window slices' bounds differ from windows.py at 301 -> 5"):
        onnxpoolfix.patch(make_leftover("avg", ("N", 2, "H", "W"), (5, 7)), target="portable")


def test_too_many_windows_refused_with_the_input_shape_hint():
    n = window_slices.MAX_WINDOWS + 1
    with pytest.raises(UnsupportedNodeError) as e:
        onnxpoolfix.patch(make_leftover("avg", ("N", 2, "H", "W"), (n, 3)), target="portable")
    assert f"has {n} windows" in str(e.value) and "input_shapes=" in e.value.hint
    bound = onnxpoolfix.patch(make_leftover("avg", ("N", 2, "H", "W"), (n, 3)), target="portable",
                              input_shapes={"x": [1, 2, 2 * n + 1, 7]})
    assert bound.report.nodes[0].lowering != "window_slices"


def test_a_size_computed_from_the_input_is_refused_with_the_input_shape_hint():
    from runtime_size_modules import HalfThird

    x = torch.randn(1, 3, 12, 18)
    path = __import__("io").BytesIO()
    torch.onnx.export(HalfThird(), (x,), path, dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {2: "H", 3: "W"}},
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    model = onnx.load_from_string(path.getvalue())
    with pytest.raises(UnsupportedNodeError) as e:
        onnxpoolfix.patch(model, target="portable")
    assert "computed from the input's size at run time" in str(e.value) and "input_shapes=" in e.value.hint
    bound = onnxpoolfix.patch(model, target="portable", input_shapes={"x": [1, 3, 12, 18]})
    got = run(bound.model, x.numpy())
    np.testing.assert_allclose(got, HalfThird()(x).numpy(), rtol=1e-6, atol=1e-6)
    assert math.prod(got.shape) == 3 * 6 * 6


@pytest.mark.parametrize("opset", [9, 10])
def test_below_opset_11_max_names_the_opset_its_nan_test_needs(opset):
    """window_slices' Slices need opset 10 and the portable target's NaN test 11: a max pool at 9 is told 11
    (review37: it said 10, where 10 is refused too)."""
    from onnxpoolfix.inspection.model import inspect_model
    from onnxpoolfix.reason import opset_needed

    (node,) = inspect_model(make_leftover("max", (1, 4, 8, 9), (5, 7), opset=opset), target="portable").nodes
    (slices,) = [c for c in node.candidates if c.name == "window_slices"]
    assert opset_needed(slices.reason) == 11, slices.reason


@pytest.mark.parametrize("opset", [7, 8, 9])
@pytest.mark.parametrize("shape,size", [((1, 2, 8, 9), (5, 7)), (("N", 3, 8, 9), (5, 7)), ((2, 3, 11), (4,)),
                                        ((1, 2, 4, 5), (6, 6)), ((3, 10, 11), (4, 4)), ((1, 2, 5, 6, 7), (3, 4, 5)),
                                        ((1, 2, 40, 9), (2, 7)), ((1, 2, 9, 9), (1, 7))],
                         ids=["2d", "symbolic_batch", "1d", "upsample", "unbatched", "3d", "long_windows", "to_one"])
def test_static_averages_below_opset_10_are_cut_by_split(shape, size, opset):
    """Below opset 10 (Slice's bounds are attributes) the portable target cuts its static windows with Split: no
    Gather (ncnn has no layer for it) and no Slice-1 (TVM 0.27's converter reads every Slice's bounds as inputs;
    tests/test_runtime*.py run the fixtures there); exact against torch and the window loop, NaN and infinities
    in their windows."""
    patched = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), target="portable")
    ops = {n.op_type for n in patched.model.graph.node}
    # a static 3-D pool's two 2-D pools sit between Reshapes of constant shapes (lowering/separable.py)
    assert not ops & ({"Gather", "Slice"} | NOT_PORTABLE) - ({"Reshape"} if len(shape) == 5 else set()), ops
    run_shape = tuple(2 if isinstance(d, str) else d for d in shape)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(run_shape).astype(np.float32)
        if seed:
            r = np.random.default_rng(seed + 10).random(run_shape)
            x[r < 0.04], x[(r >= 0.04) & (r < 0.08)], x[(r >= 0.08) & (r < 0.12)] = np.nan, np.inf, -np.inf
        got = run(patched.model, x)
        for want in (torch_pool(x, size, "avg"), loop_reference(x, size, "avg")):
            for test in (np.isnan, np.isposinf, np.isneginf):
                np.testing.assert_array_equal(test(got), test(want), err_msg=test.__name__)
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)

"""The check must notice a wrong lowering: each test corrupts a correctly patched model the way a lowering bug
would (a window one element off, the blog recipe's windows, a broken NaN path) and asserts that
``check_patched`` fails, where before the per-element tolerance and the structured inputs it passed."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import constant_tensors, force_first_max, make_leftover, ort_run
from onnx import TensorProto, numpy_helper

import onnxpoolfix
from onnxpoolfix import windows as W
from onnxpoolfix.check import check_patched
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph import nodes_deep
from onnxpoolfix.graph.shapes import model_opset, resolve_specs


def _patched(kind, shape, size, strategy, dtype=TensorProto.FLOAT, target="onnxruntime"):
    m = make_leftover(kind, list(shape), size, dtype=dtype)
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target=target)
    patched = onnxpoolfix.patch(m, strategy=strategy, target=target)  # correct: its check passed
    assert patched.report.check_passed
    return patched.model, specs


def _replace(model, pick):
    """A copy of ``model`` whose initializers ``pick(name, array)`` returns a new value for."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    hit = 0
    for t in constant_tensors(out):
        a = numpy_helper.to_array(t)
        new = pick(t.name, a)
        if new is not None:
            t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(new, dtype=a.dtype), t.name))
            hit += 1
    assert hit, "nothing corrupted: the lowering's constants were not found"
    return out


def _matrix(n, m, windows):
    p = np.zeros((m, n))
    for i, (a, b) in enumerate(windows):
        p[i, a:b] = 1.0 / (b - a)
    return p


def _wrong_windows(n, m, how):
    w = list(W.windows(n, m))
    if how == "blog recipe":
        s = n // m
        return [(i * s, i * s + n - (m - 1) * s) for i in range(m)]
    i = m // 2
    return w[:i] + [(w[i][0], min(n, w[i][1] + 1))] + w[i + 1:]  # "one longer"


def _corrupt_avg(model, n, m, how):
    def pick(name, a):
        if "pool_matrix" not in name or sorted(a.shape) != sorted((n, m)):
            return None
        p = _matrix(n, m, _wrong_windows(n, m, how))
        return p.T if a.shape == (n, m) else p
    return _replace(model, pick)


def _passes(model, specs):
    (result,) = check_patched(model, specs).values()
    return result.passed


@pytest.mark.parametrize("how", ["one longer", "blog recipe"])
@pytest.mark.parametrize("dtype, shape", [(TensorProto.FLOAT, (1, 4, 301, 299)),
                                          (TensorProto.FLOAT16, (1, 4, 97, 89)),
                                          (TensorProto.BFLOAT16, (1, 4, 97, 89))])
def test_a_wrong_average_window_fails_the_check(dtype, shape, how):
    n, m = shape[-1], 5
    model, specs = _patched("avg", shape, (3, m), "matmul", dtype)
    assert _passes(model, specs)
    assert not _passes(_corrupt_avg(model, n, m, how), specs)


def test_a_max_window_one_element_short_fails_the_check():
    """Random data rarely puts a window's maximum on its last element; the ramps always do."""
    model, specs = _patched("max", (1, 2, 998), (3,), "window_gather")

    def pick(name, a):
        if "window_table" not in name:
            return None
        t = a.copy()
        t[0][t[0] == t[0].max()] = t[0].max() - 1  # window 0 loses its last element
        return t
    assert not _passes(_replace(model, pick), specs)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_a_broken_nan_path_fails_the_check(target):
    """The exact NaN/-inf path runs only on non-finite input, which the random inputs never are."""
    model, specs = _patched("max", (1, 2, 11, 13), (3, 5), "window_gather", target=target)

    def pick(name, a):
        return np.zeros_like(a) if name.split("/")[-1].startswith("nan") and a.ndim == 0 else None
    assert not _passes(_replace(model, pick), specs)


@pytest.mark.parametrize("opset", [7, 8])
def test_an_average_spreading_nan_below_opset_9_fails_the_check(opset):
    """Below opset 9 the averages are window sums, which keep a NaN or inf in its windows as torch does; the
    structured inputs hold NaN and inf there too (they were left out below 9): an unguarded MatMul (what the
    tensorrt target writes) spreads them and must fail a check of the onnxruntime target's promise."""
    m = make_leftover("avg", [1, 3, 11, 13], (4, 5), opset=opset)
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=opset, target="onnxruntime")
    assert _passes(onnxpoolfix.patch(m).model, specs)
    assert not _passes(_unguarded_matmul_pool([1, 3, 11, 13], (4, 5), opset), specs)


def test_an_average_spreading_nan_fails_the_tensorrt_targets_check():
    """The tensorrt target writes no MatMul average (docs/tensorrt.md), so its check feeds NaN and inf too: an
    unguarded MatMul (what it wrote before) fails it."""
    m = make_leftover("avg", [1, 3, 11, 13], (4, 5), opset=17)
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=17, target="tensorrt")
    assert _passes(onnxpoolfix.patch(m, target="tensorrt").model, specs)
    assert not _passes(_unguarded_matmul_pool([1, 3, 11, 13], (4, 5), 17), specs)


def _unguarded_matmul_pool(shape, size, opset):
    """x -> P_H @ x @ P_W^T -> y: the average as two MatMuls against its pooling matrices (torch's windows,
    written here from the formula), with nothing keeping a NaN or inf in its windows."""
    def matrix(n, m):
        p = np.zeros((m, n), np.float32)
        for i in range(m):
            start, end = i * n // m, -(-(i + 1) * n // m)
            p[i, start:end] = 1 / (end - start)
        return p

    ph, pwt = matrix(shape[-2], size[0]), matrix(shape[-1], size[1]).T
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["ph", "x"], ["t"]), onnx.helper.make_node("MatMul", ["t", "pwt"], ["y"])],
        "unguarded", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-2], *size])],
        [numpy_helper.from_array(ph, "ph"), numpy_helper.from_array(pwt, "pwt")])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


# ---- the indices output ----------------------------------------------------------------------------------

def _patched_with_indices(shape, size, target):
    m = make_leftover("max", list(shape), size, indices="output")
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target=target)
    patched = onnxpoolfix.patch(m, strategy="argmax", target=target)  # correct: its check passed
    assert patched.report.check_passed
    return patched.model, specs


def _short(name):
    return name.split("/")[-1]


def _indices_one_window_off(model):
    """The indices of window i replaced by window i+1's: in the NaN-aware construction (tensorrt; the
    onnxruntime target's else-branch) its flat-index table, in the separable first maximum (the onnxruntime
    target's then-branch) the innermost axis's window starts, which only the final index reads, in the
    whole-windows one (the other then-branch) the position weights. The values stay right."""
    starts = [t.name for t in constant_tensors(model) if _short(t.name).startswith("start_plus_kmax")]
    innermost = starts[-1] if starts else None  # created outermost axis first
    base = [numpy_helper.to_array(t).reshape(-1) for t in constant_tensors(model)
            if _short(t.name).startswith("window_base")]
    kall = int(base[0][1] - base[0][0]) if base else 0  # elements per window

    def shift(name, a):
        if _short(name).startswith("flat_index"):
            return np.roll(a.reshape(-1, kall), -1, axis=0).reshape(a.shape)
        if name == innermost:
            return np.roll(a, -1)
        if _short(name).startswith("reversed_position"):  # [windows, window elements, 1]
            return np.roll(a, -1, axis=0)
        return None
    return _replace(model, shift)


def _last_instead_of_first_maximum(model):
    """The lowering picks the last of equal maxima instead of torch's first (only ties tell)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(nodes_deep(out.graph.node))  # the onnxruntime target's choice sits in an If's branches
    producer = {o: n for n in nodes for o in n.output}
    # onnxruntime target, else-branch (NaN-aware): the ArgMax of the windows with NaN filled by -inf
    firsts = [n for n in nodes if n.op_type == "ArgMax"]
    for n in firsts:
        n.attribute.append(onnx.helper.make_attribute("select_last_index", 1))
    # onnxruntime target, then-branch (separable first maximum): per axis, position weights [kmax..1] and
    # coordinate = (start + kmax) - ReduceMax(hit * weights); the last maximum is weights [1..kmax] and
    # coordinate = (start - 1) + ReduceMax(hit * weights)
    weights = [t for t in constant_tensors(out) if _short(t.name).startswith("descending")]
    starts = [t for t in constant_tensors(out) if _short(t.name).startswith("start_plus_kmax")]
    for w, st in zip(weights, starts):  # both created outermost axis first
        wa = numpy_helper.to_array(w)
        kmax = int(wa.reshape(-1)[0])
        w.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(wa[::-1]), w.name))
        st.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(st) - np.float32(kmax + 1), st.name))
    coordinate_subs = [n for n in nodes if n.op_type == "Sub" and _short(n.name).startswith("coordinate")]
    for n in coordinate_subs:
        n.op_type = "Add"
    assert len(weights) == len(starts) == len(coordinate_subs)
    # then-branch (every window at once): first = top - ReduceMax(hit * (top - position)); the last maximum
    # is -1 + ReduceMax(hit * (position + 1))
    whole = [t for t in constant_tensors(out) if _short(t.name).startswith("reversed_position")]
    tops = [t for t in constant_tensors(out) if _short(t.name).startswith("top")]
    for w, top in zip(whole, tops):
        t = numpy_helper.to_array(top)
        w.CopyFrom(numpy_helper.from_array(t - numpy_helper.to_array(w) + np.float32(1), w.name))
        top.CopyFrom(numpy_helper.from_array(np.float32(-1), top.name))
    first_subs = [n for n in nodes if n.op_type == "Sub" and _short(n.name).startswith("first_position")]
    for n in first_subs:
        n.op_type = "Add"
    assert len(whole) == len(tops) == len(first_subs)
    weights += whole
    # tensorrt target: ReduceMin(Where(max here, position, past_end)); last = ReduceMax with past_end = -1
    mins = [n for n in nodes if n.op_type == "ReduceMin" and producer[n.input[0]].op_type == "Where"]
    for n in mins:
        n.op_type = "ReduceMax"
    assert (len(firsts), len(mins)) in ((1, 0), (0, 1)), "the first-maximum nodes were not found"
    assert bool(weights) == bool(firsts), "the onnxruntime target has both branches"
    if mins:
        out = _replace(out, lambda name, a: np.full_like(a, -1) if _short(name).startswith("past_end") else None)
    return out


PADDED = [((1, 2, 11, 13), (4, 5)), ((1, 3, 37), (5,))]  # windows of two lengths (the short ones padded)
EVEN = [((1, 2, 12, 10), (4, 5)), ((1, 3, 35), (5,))]  # windows of one length


@pytest.mark.parametrize("target", ["onnxruntime:separable", "onnxruntime:whole_windows", "tensorrt"])
@pytest.mark.parametrize("how, shape, size", [("one window off", *c) for c in PADDED + EVEN]
                         + [("last maximum", *c) for c in EVEN])
def test_wrong_max_indices_fail_the_check(shape, size, how, target, monkeypatch):
    """Indices a window off, or the last of equal maxima instead of the first: the values stay right (shown
    below on data with ties), only the indices comparison can catch it. (The last maximum is corrupted in
    with constants only where no window is padded: the separable first maximum's padding repeats a window's
    last element, which a last-maximum rule would pick past the window's end.) The onnxruntime target's
    finite branch is forced to each of its constructions (the whole-windows one only exists for 2+ pooled
    axes: 1D takes the separable one either way)."""
    target, _, construction = target.partition(":")
    if construction:
        force_first_max(monkeypatch, construction)
    model, specs = _patched_with_indices(shape, size, target)
    assert _passes(model, specs)
    bad = (_indices_one_window_off if how == "one window off" else _last_instead_of_first_maximum)(model)
    onnx.checker.check_model(bad)
    ties = np.random.default_rng(0).integers(0, 3, shape).astype(np.float32)  # equal maxima in most windows
    (good_v, good_i), (bad_v, bad_i) = ort_run(model, {"x": ties}), ort_run(bad, {"x": ties})
    assert np.array_equal(good_v, bad_v), "the corruption changed the values: not an indices-only bug"
    assert not np.array_equal(good_i, bad_i), "the corruption did not change the indices"
    assert not _passes(bad, specs)


# ---- long windows: float32 sums taken in order ------------------------------------------------------------

@pytest.mark.parametrize("shape,size", [((1, 2, 512, 512), (2, 2)), ((1, 3, 720, 1280), (2, 2))])
def test_long_uniform_windows_pass_the_check_as_torch_computes_them(shape, size):
    """One AveragePool of 256x256 or 360x640 windows: on a ramp along W its float32 sums pass 2^24 and round
    the same way at each step, so torch's own float32 result is 0.17 / 0.46 off the exact mean, and
    onnxruntime's equal to it. The check allowed a random walk's sqrt(L) error only and refused (exit 5)."""
    torch = pytest.importorskip("torch")
    result = onnxpoolfix.patch(make_leftover("avg", list(shape), size))
    assert result.report.check_passed
    ramp = np.broadcast_to(np.arange(shape[-1], dtype=np.float32), shape).copy()
    (got,) = ort_run(result.model, {"x": ramp})
    want32 = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(ramp), size).numpy()
    exact = ramp.astype(np.float64).reshape(shape[0], shape[1], size[0], -1, size[1], shape[-1] // size[1]).mean((3, 5))
    np.testing.assert_allclose(got, want32, rtol=1e-6)
    np.testing.assert_allclose(got, exact, rtol=2e-3)


def test_a_long_window_one_row_off_still_fails_the_check():
    """Where the in-order float32 error stays small (the ramp along H: 1.5e-3 at 512x512 -> 2x2) a window one
    row off (rows 0..256 and 255..511: kernel 257, stride 255) moves the mean by 0.5 and fails the check."""
    m = make_leftover("avg", [1, 2, 512, 512], (2, 2))
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target="onnxruntime")
    pool = onnx.helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[257, 256], strides=[255, 256])
    graph = onnx.helper.make_graph([pool], "off", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                       [1, 2, 512, 512])],
                                   [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])])
    wrong = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    assert _passes(onnxpoolfix.patch(m).model, specs)
    assert not _passes(wrong, specs)

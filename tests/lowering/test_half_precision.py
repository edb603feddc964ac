"""float16 / bfloat16 averages against torch, at most one ulp per element, for every lowering that takes them.

The README promises "float16/bfloat16 are computed in float32 and rounded once (one ulp allowed)". The
per-case tolerance elsewhere (2^-10 x max|x|) is several output ulps wide and cannot tell float32
accumulation from float16 accumulation; these tests can: they run the patched model (``check=False``: not
through the tool's own check) and compare its 16-bit output with an independent one, element by element,
in ulps of the dtype.

The reference: torch's own output in that dtype for 1D/2D (its CPU kernel accumulates in float32 and
rounds once); for 3D, torch's float32 result rounded once to the dtype (its 3D CPU kernel accumulates in
the half dtype itself, see README "What is exact"). Summation order differs, so a result may sit on the
other side of a rounding boundary: one ulp is allowed, never more.

Inputs: standard normal, and values offset to ~1000 whose window sums pass float16's 65504 (accumulating
in float16 gives inf or errors of many ulps; accumulating in bfloat16, with 8 mantissa bits, loses the
fraction of every addend).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_leftover, pyramid_leftovers
from onnx import TensorProto, helper

import onnxpoolfix

torch = pytest.importorskip("torch", reason="the float16/bfloat16 reference is torch's own kernel")
pytestmark = pytest.mark.torch

F16, BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16
TORCH_DTYPE = {F16: torch.float16, BF16: torch.bfloat16}

# (lowering forced with strategy=..., input shape, output size); every average lowering that handles
# float16/bfloat16 (identity copies, nothing to round; the pyramid group is not used for them, see below)
CASES = [
    ("global", (2, 3, 5, 7), (1, 1)),
    ("global", (1, 2, 32, 32), (1, 1)),  # 1024-element windows
    ("global", (2, 2, 4, 5, 6), (1, 1, 1)),
    ("pool", (2, 3, 7, 5), (3, 4)),  # k3 s2, k2 s1
    ("pool", (1, 2, 48, 48), (2, 2)),  # k24: 576-element windows
    ("pool", (2, 2, 90), (3,)),
    ("pool", (1, 2, 6, 8, 4), (3, 4, 2)),
    ("block_pool", (2, 3, 1000), (30,)),  # 10 periods of 100 -> 3 (k34 s33)
    ("block_pool", (1, 2, 4, 400), (4, 12)),
    ("resize", (2, 3, 3, 4), (6, 12)),  # copies: exact in any dtype, but Casts and Gathers must round-trip
    ("mixed", (2, 3, 8, 9), (4, 7)),
    ("mixed", (1, 2, 60, 45), (3, 7)),  # H k20, W non-uniform
    ("mixed", (2, 2, 6, 5, 7), (3, 10, 4)),
    ("mixed", (2, 4, 8, 13), (4, 5)),  # short windows after a pool: a second rounding would show
    ("matmul", (2, 3, 10, 11), (4, 4)),
    ("matmul", (1, 2, 50, 61), (3, 4)),  # windows of ~17 x 16
    ("matmul", (2, 3, 50), (6,)),
    ("matmul", (2, 2, 5, 6, 7), (3, 4, 5)),
    ("matmul", (2, 4, 9, 11, 13), (5, 6, 7)),  # three MatMuls: a float16 intermediate would round twice
    ("matmul", (2, 4, 11, 13), (6, 7)),  # windows of 2-3: the means of rows cancel, a second rounding shows
    ("kronecker", (2, 3, 10, 11), (4, 4)),
    ("kronecker", (1, 2, 24, 20), (2, 3)),
    ("kronecker", (2, 2, 5, 6, 7), (3, 4, 5)),
]


def _cid(c):
    return f"{c[0]}-{'x'.join(map(str, c[1]))}-to-{'x'.join(map(str, c[2]))}"


def half_inputs(shape, dtype, seed=0) -> dict[str, torch.Tensor]:
    """Named inputs of ``dtype``: standard normal, and ~1000 + N(0, 8) (window sums pass 65504)."""
    g = torch.Generator().manual_seed(seed)
    normal = torch.randn(shape, generator=g)
    return {"normal": normal.to(TORCH_DTYPE[dtype]),
            "offset": (1000 + 8 * torch.randn(shape, generator=g)).to(TORCH_DTYPE[dtype])}


def torch_reference(x: torch.Tensor, size) -> torch.Tensor:
    """torch's output in x's dtype (1D/2D: float32 accumulation, one rounding); 3D: torch in float32, rounded
    once to x's dtype (torch's own 3D half kernel accumulates in the half dtype)."""
    fn = {1: torch.nn.functional.adaptive_avg_pool1d, 2: torch.nn.functional.adaptive_avg_pool2d,
          3: torch.nn.functional.adaptive_avg_pool3d}[len(size)]
    if len(size) == 3:
        return fn(x.float(), tuple(size)).to(x.dtype)
    return fn(x, tuple(size))


def run_half(model: onnx.ModelProto, x: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` in onnxruntime on the 16-bit tensor ``x``; outputs back as tensors of x's dtype.
    bfloat16 (no numpy dtype) goes in as its bits and comes out through an exact Cast to float32."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    if x.dtype == torch.bfloat16:
        bits = x.contiguous().view(torch.int16).numpy().view(np.uint16)
        feed = {"x": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)}
        outs = list(m.graph.output)
        del m.graph.output[:]
        for o in outs:
            m.graph.node.append(helper.make_node("Cast", [o.name], [o.name + "_as_f32"], to=TensorProto.FLOAT))
            m.graph.output.append(helper.make_tensor_value_info(o.name + "_as_f32", TensorProto.FLOAT, None))
    else:
        feed = {"x": ort.OrtValue.ortvalue_from_numpy(x.numpy())}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = [torch.from_numpy(np.array(r.numpy())) for r in sess.run_with_ort_values(None, feed)]
    return [g.to(x.dtype) for g in got]  # float32 -> bfloat16 is exact here: the values are bfloat16


def assert_within_one_ulp(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Every element of ``got`` at most one ulp of its dtype from ``want``; NaN where ``want`` has NaN, inf only
    equal to inf (65504 is one ulp below float16's inf, but inf is no rounding of a finite mean)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    g, w = got.contiguous().view(torch.int16).to(torch.int32), want.contiguous().view(torch.int16).to(torch.int32)
    # ordered integers: adjacent representable values differ by 1, +0 and -0 are both 0
    g = torch.where(g < 0, -(g & 0x7FFF), g)
    w = torch.where(w < 0, -(w & 0x7FFF), w)
    gn, wn = torch.isnan(got), torch.isnan(want)
    assert torch.equal(gn, wn), f"{what}: NaN at {int((gn != wn).sum())} places where the reference has none"
    inf = torch.isinf(got) | torch.isinf(want)
    assert torch.equal(got[inf & ~gn], want[inf & ~wn]), f"{what}: inf where the reference is finite (or not)"
    ulps = torch.where(gn | inf, 0, (g - w).abs())
    worst = int(ulps.max()) if ulps.numel() else 0
    if worst > 1:
        at = tuple(int(i) for i in np.unravel_index(int(ulps.argmax()), tuple(ulps.shape)))
        raise AssertionError(f"{what}: {int((ulps > 1).sum())} of {ulps.numel()} elements more than one ulp "
                             f"off (worst {worst} ulps at {at}: got {float(got[at])!r}, want {float(want[at])!r})")


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=_cid)
def test_half_average_within_one_ulp_of_torch(case, dtype):
    name, shape, size = case
    model = make_leftover("avg", shape, size, dtype=dtype)
    result = onnxpoolfix.patch(model, check=False, strategy=name)
    assert [n.lowering for n in result.report.nodes] == [name]
    for label, x in half_inputs(shape, dtype).items():
        (got,) = run_half(result.model, x)
        assert_within_one_ulp(got, torch_reference(x, size), f"{name} {label}")


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("traced_shape,size,run_shapes", [
    (("N", 3, "H", "W"), (4, 4), [(2, 3, 10, 11), (1, 3, 48, 50), (1, 3, 3, 2)]),  # 3x2 -> 4x4: upsampling
    (("N", 4, "H", "W"), (6, 7), [(2, 4, 11, 13), (1, 4, 13, 9)]),  # windows of 2-3
    (("N", 2, "L"), (6,), [(2, 2, 50), (1, 2, 600)]),
    (("N", 2, "D", "H", "W"), (2, 3, 2), [(1, 2, 5, 6, 7), (1, 2, 20, 9, 8)]),
], ids=["2d-to-4x4", "2d-to-6x7", "1d-to-6", "3d-to-2x3x2"])
def test_dynamic_half_average_within_one_ulp_of_torch(traced_shape, size, run_shapes, dtype):
    model = make_leftover("avg", traced_shape, size, dtype=dtype)
    result = onnxpoolfix.patch(model, check=False)
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]
    for shape in run_shapes:
        for label, x in half_inputs(shape, dtype, seed=len(shape)).items():
            (got,) = run_half(result.model, x)
            assert_within_one_ulp(got, torch_reference(x, size), f"dynamic {shape} {label}")


FLOATING = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
SUMMING_OPS = {"AveragePool", "GlobalAveragePool", "MatMul", "ReduceMean", "ReduceSum", "Einsum", "Gemm"}


def _summing_input_types(model: onnx.ModelProto) -> dict[str, set[int]]:
    """op type -> element types of the data input of every node that sums (after onnx shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    found: dict[str, set[int]] = {}
    for n in g.node:
        if n.op_type in SUMMING_OPS:
            # floating inputs only: the dynamic lowering also sums int64 window counts
            found.setdefault(n.op_type, set()).update(t for t in (types.get(i, 0) for i in n.input[:2] if i)
                                                      if t in FLOATING)
    return found


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "resize"]  # resize copies, sums nothing
                         + [("dynamic", ("N", 3, "H", "W"), (4, 4)), ("dynamic", ("N", 2, "L"), (6,))], ids=_cid)
def test_half_average_sums_in_float32(case, dtype):
    """The promise read off the graph: every op that sums a float16/bfloat16 average takes float32. (onnxruntime's
    CPU kernels for single float16 AveragePool/MatMul/ReduceMean happen to accumulate in float32 themselves,
    so the numbers above only show float16 accumulation where two summing ops chain; TensorRT and the CUDA
    provider accumulate float16 ops in float16.)"""
    name, shape, size = case
    model = make_leftover("avg", shape, size, dtype=dtype)
    result = onnxpoolfix.patch(model, check=False, strategy=name)
    found = _summing_input_types(result.model)
    found = {op: t for op, t in found.items() if t}
    assert found, "no summing op found: the test does not look where it should"
    assert all(t == {TensorProto.FLOAT} for t in found.values()), found


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_half_pyramid_is_not_grouped_and_within_one_ulp(dtype):
    """A pyramid of half-precision averages: the group (a mean of means would round twice) is not used, and
    each level is within one ulp of torch."""
    shape, sizes = (1, 4, 60, 60), [(1, 1), (2, 2), (3, 3), (6, 6)]
    result = onnxpoolfix.patch(pyramid_leftovers(dtype, shape, sizes), check=False)
    assert "pyramid" not in {n.lowering for n in result.report.nodes}
    for label, x in half_inputs(shape, dtype).items():
        for size, got in zip(sizes, run_half(result.model, x)):
            assert_within_one_ulp(got, torch_reference(x, size), f"pyramid level {size} {label}")


def test_the_ulp_comparison_catches_two_ulps():
    """The comparison itself: one ulp passes, two fail, inf for 65504 fails."""
    want = torch.tensor([1.0, 1000.0, -3.5, 65504.0], dtype=torch.float16)
    one_up = (want.view(torch.int16) + 1).view(torch.float16)
    assert_within_one_ulp(one_up[:3], want[:3], "one ulp")
    with pytest.raises(AssertionError, match="more than one ulp"):
        assert_within_one_ulp((want[:3].view(torch.int16) + 2).view(torch.float16), want[:3], "two ulps")
    with pytest.raises(AssertionError, match="inf"):
        assert_within_one_ulp(one_up, want, "65504 -> inf")

"""What users do next, in half precision: onnxconverter_common's ``convert_float_to_float16`` of every patched
float32 fixture, each target, loads in onnxruntime and computes torch's saved outputs to half-precision rounding
(review24: the default target's MatMul averages and the dynamic lowering cast a bool mask to float32, and the
converter types a Cast's output float16 while keeping its ``to``: onnxruntime refused every such file; the plain
dynamo export of the same modules converted)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import NON_FINITE_MAX_CASES, NON_FINITE_MAX_IDS, portable_max
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs

import onnxpoolfix
from onnxpoolfix.sessions import ort_session

float16 = pytest.importorskip("onnxconverter_common.float16")
torch = pytest.importorskip("torch")

#: half precision: 11 bits of mantissa, a few roundings per output (the input's, the matrix's, the sum's)
REL = 4e-3


@pytest.mark.filterwarnings("ignore")  # the converter warns where it clamps +-inf constants to +-65504
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_float16_conversion_of_out_loads_and_computes_torchs_outputs(case, target):
    model = onnx.load(FIXTURES / case["file"])
    if any(n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT for n in model.graph.node):
        pytest.skip("the fixture's own Cast to float32 (torch's, of the indices): the converter breaks it in any model")
    patched = onnxpoolfix.patch(model, target=target, check=False).model
    half = float16.convert_float_to_float16(patched, keep_io_types=True)
    session = ort_session(half)
    for sfx, feed, want in runs(case):
        if sfx and not case["dynamic"]:
            continue
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        for name, w in want.items():
            if w.dtype.kind != "f":  # max pooling's indices: where the maximum is, which rounding may move
                continue
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(got[name].astype(np.float32), w, rtol=0, atol=REL * scale,
                                       err_msg=f"{name} at {sfx or 'traced'}")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("shape,size,opset", NON_FINITE_MAX_CASES, ids=NON_FINITE_MAX_IDS)
def test_the_portable_max_pooling_converts_with_its_numbers_below_minus_1e4(shape, size, opset):
    """The portable target's max pooling without comparisons (lowering/max_steps.py) after the converter, which
    clamps constants outside Min/Max into [1e-7, 1e4] (review36: its -inf test read every window of numbers
    below -1e4 as -inf, 2e4 off): windows of numbers down to -6e4 and up to 6e4, torch's max of the input's
    float16 rounding exactly."""
    model = portable_max(shape, size, opset)
    half = float16.convert_float_to_float16(model, keep_io_types=True)
    x = np.random.default_rng(1).uniform(-6e4, -1e4, shape)
    x[0, 1] = -x[0, 1]
    x[0, 2] = np.random.default_rng(2).standard_normal(shape[2:])
    x = x.astype(np.float16).astype(np.float32)
    got = ort_session(half).run(None, {"x": x})[0]
    want = getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    np.testing.assert_array_equal(got, want)

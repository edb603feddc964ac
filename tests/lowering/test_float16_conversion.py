"""What users do next, in half precision: onnxconverter_common's ``convert_float_to_float16`` of every patched
float32 fixture, each target, loads in onnxruntime and computes torch's saved outputs to half-precision rounding
(review24: the default target's MatMul averages and the dynamic lowering cast a bool mask to float32, and the
converter types a Cast's output float16 while keeping its ``to``: onnxruntime refused every such file; the plain
dynamo export of the same modules converted)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs

import onnxpoolfix
from onnxpoolfix.sessions import ort_session

float16 = pytest.importorskip("onnxconverter_common.float16")

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

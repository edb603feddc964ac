"""onnxruntime's ``quant_pre_process`` (its symbolic shape inference, onnx's, an optimisation pass), which its docs
run before quantizing, takes a symbolic average's patched file from opset 18 on and leaves it exact (review24: it
failed on every default- and tensorrt-target symbolic file: the dynamic lowering's ReduceMax, whose axes are an
input from opset 18, has no shape in its inference, and the Mul after it failed)."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix import reference
from onnxpoolfix.sessions import ort_session

pytest.importorskip("onnxruntime.quantization")
from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: E402


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "portable"])
@pytest.mark.parametrize("opset", [17, 18, 20])
def test_quant_pre_process_takes_a_symbolic_average_and_keeps_it_exact(opset, target, tmp_path):
    model = make_leftover("avg", [2, 3, "H", "W"], [5, 7], opset=opset)
    src, dst = tmp_path / "out.onnx", tmp_path / "pre.onnx"
    onnx.save(onnxpoolfix.patch(model, target=target, check=False).model, src)
    logging.disable(logging.WARNING)  # its optimiser logs each initializer it drops
    try:
        quant_pre_process(str(src), str(dst))
    finally:
        logging.disable(logging.NOTSET)
    session = ort_session(str(dst))
    for h, w in ((8, 9), (13, 11), (30, 17), (5, 7)):
        x = np.random.default_rng(h).standard_normal((2, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], reference.adaptive_avg_pool(x, (5, 7)),
                                   rtol=1e-6, atol=1e-6, err_msg=f"{h}x{w}")

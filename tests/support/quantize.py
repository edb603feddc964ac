"""onnxruntime's int8 quantization as a user runs it on OUT (issue 33): quantize_dynamic, or quantize_static
(QDQ, calibrated on the fixture's input and four standard-normal batches of its shape)."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx


def relative_error(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


def calibration_batches(x: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [x] + [rng.standard_normal(x.shape).astype(x.dtype) for _ in range(4)]


def quantized(model: onnx.ModelProto, x: np.ndarray, mode: str, tmp_path: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, quantize_dynamic, quantize_static

    src, dst = tmp_path / "model.onnx", tmp_path / f"model.{mode}.onnx"
    onnx.save(model, src)
    name = model.graph.input[0].name
    batches = calibration_batches(x)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: b} for b in batches])

        def get_next(self):
            return next(self.it, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "dynamic":
            quantize_dynamic(src, dst)
        else:
            quantize_static(src, dst, Reader())
    return onnx.load(dst)

"""The portable target's static max pooling without indices read (review89): window copies, one Concat per axis
of windows covering it, pooled in blocks (lowering/window_copies.py). Its default where it applies: no Gather or
comparison, which ncnn has no layer for (tests/test_runtime_ncnn.py runs these files), and onnxruntime's
quantize_static (QDQ, its defaults) costs what quantizing the input alone costs, where the window maxima's Concats
of the earlier window slices rounded each maximum again (1.21e-2, 1.45e-2 and 1.05e-2 on max2d, max2d_uniform and
max3d, over issue 33's 1e-2 for modules torch's dynamo exporter cannot export)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import NCNN_LACKS, make_leftover
from quantize import calibration_batches, quantized, relative_error

import onnxpoolfix
from onnxpoolfix import windows as W
from onnxpoolfix.lowering.window_copies import window_pieces

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
STATIC_MAX = [c for c in CASES if c["kind"] == "max" and not c["dynamic"] and c["dtype"] == "float32"
              and "indices" not in c["name"]]
#: issue 33's bar where torch's dynamo exporter cannot export the module (none of these: adaptive max pooling)
NO_DYNAMO_BAR = 1e-2


def saved(case):
    data = np.load(FIXTURES / case["data_file"])
    x = next(data[k] for k in data.files if k.startswith("input:") and "@" not in k)
    (want,) = (data[k] for k in data.files if k.startswith("output:") and "@" not in k)
    return x, want


def run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def torch_max(x: np.ndarray, size) -> np.ndarray:
    return getattr(torch.nn.functional, f"adaptive_max_pool{len(size)}d")(torch.from_numpy(x), size).numpy()


def input_step_error(x: np.ndarray, size) -> float:
    """What quantizing the input alone costs: torch's pool of ``x`` fake-quantized as quantize_static does it
    (int8, asymmetric, the range of the calibration batches :func:`quantize.quantized` feeds, widened to 0)."""
    batches = calibration_batches(x)
    lo, hi = min(0.0, min(float(b.min()) for b in batches)), max(0.0, max(float(b.max()) for b in batches))
    scale = np.float32((hi - lo) / 255)
    zero = np.round(-128 - lo / scale)
    fake = ((np.clip(np.round(x / scale) + zero, -128, 127) - zero) * scale).astype(np.float32)
    return relative_error(torch_max(fake, size), torch_max(x, size))


@pytest.mark.parametrize("n,m", [(11, 4), (8, 5), (9, 7), (7, 3), (5, 3), (64, 5), (10, 4), (2, 4), (3, 8), (9, 1),
                                 (63, 64)])
def test_every_block_of_the_copies_is_its_window(n, m):
    """Block i of the copies (``K`` elements, ``K`` the longest window) holds window i's elements and nothing else."""
    flat = [i for a, b in window_pieces(n, m) for i in range(a, b)]
    k = W.max_window(n, m)
    assert len(flat) == m * k
    for i in range(m):  # torch's window i: [floor(i n / m), ceil((i + 1) n / m))
        start, end = (i * n) // m, -((-(i + 1) * n) // m)
        assert set(flat[i * k:(i + 1) * k]) == set(range(start, end)), i


@pytest.mark.parametrize("case", STATIC_MAX, ids=[c["name"] for c in STATIC_MAX])
def test_portable_default_has_nothing_ncnn_lacks(case):
    """The portable target's default for these fixtures: no Gather, comparison, Where, IsNaN or If (before
    review89: ArgMax/GatherElements, window Gathers or MaxPool + Gathers, each with Equal masks), exact."""
    x, want = saved(case)
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable").model
    ops = {n.op_type for n in model.graph.node}
    assert not ops & NCNN_LACKS, sorted(ops & NCNN_LACKS)
    np.testing.assert_array_equal(run(model, x), want)


@pytest.mark.parametrize("strategy", ["auto", "window_slices"])
@pytest.mark.parametrize("case", STATIC_MAX, ids=[c["name"] for c in STATIC_MAX])
def test_quantize_static_costs_the_input_step(case, strategy, tmp_path):
    """quantize_static's error is the input's quantization step's, no more (within 1e-9): every Concat copies
    windows covering its input, so its calibrated range, scale and zero point are its input's."""
    x, want = saved(case)
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable", strategy=strategy).model
    err = relative_error(run(quantized(model, x, "static", tmp_path), x), want)
    floor = input_step_error(x, case["output_size"])
    assert err <= floor + 1e-9, (err, floor)
    assert err <= NO_DYNAMO_BAR, err


@pytest.mark.parametrize("shape,size,opset", [((1, 8, 33, 33), (7, 5), 17), ((2, 4, 64), (5,), 17),
                                              ((1, 4, 17, 23), (6, 9), 18), ((1, 2, 6, 10, 14), (4, 3, 5), 17),
                                              ((1, 4, 5, 5), (8, 8), 17), ((1, 2, 6, 10, 14), (4, 3, 5), 18)])
def test_quantize_static_costs_the_input_step_at_other_sizes(shape, size, opset, tmp_path):
    """The same on standard-normal inputs of other sizes, opsets 17 (ReduceMax blocks) and 18 (MaxPool blocks)."""
    model = onnxpoolfix.patch(make_leftover("max", shape, size, opset=opset), target="portable").model
    assert not {n.op_type for n in model.graph.node} & NCNN_LACKS
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    err = relative_error(run(quantized(model, x, "static", tmp_path), x), torch_max(x, size))
    floor = input_step_error(x, size)
    assert err <= floor + 1e-9, (err, floor)


@pytest.mark.parametrize("case", STATIC_MAX, ids=[c["name"] for c in STATIC_MAX])
def test_quantize_static_with_symmetric_activations(case, tmp_path):
    """``ActivationSymmetric=True``: the -inf term is no Mul by FLT_MAX any more (review89: every output came out
    about -256 off, 79 to 131 relative), and nothing after the pooling is quantized; the input's step remains."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    x, want = saved(case)
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target="portable").model
    src, dst = tmp_path / "model.onnx", tmp_path / "model.int8.onnx"
    onnx.save(model, src)
    batches = iter([{model.graph.input[0].name: b} for b in calibration_batches(x)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(src, dst, Reader(), extra_options={"ActivationSymmetric": True})
    err = relative_error(run(onnx.load(dst), x), want)
    assert err <= NO_DYNAMO_BAR, err

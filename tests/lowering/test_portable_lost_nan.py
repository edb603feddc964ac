"""The portable target's averages against a runtime whose AveragePool makes -inf of a window torch makes NaN,
as TFLite's AVERAGE_POOL_2D does through onnx2tf (review76, review77; tests/test_runtime_tflite.py runs TFLite
itself): onnx's reference evaluator with such an AveragePool (numpy's window mean, a NaN mean made -inf), against
torch. NaN (either sign), +inf and -inf alone and both infinities in one window reach the outputs torch's do
(lowering/avg_non_finite.py: PooledNanStep; the sign of a zero mean, +0.0 in torch for -0.0s, is each runtime's own,
kept bit for bit: review87)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import POOLED_AVG_CASES, POOLED_AVG_IDS, assert_same_non_finite, non_finite_pool_input, portable_pooled_avg
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

torch = pytest.importorskip("torch")


class AveragePool(OpRun):
    """AveragePool without pads (the lowerings write none), each window's mean in float32; a NaN mean -inf."""

    op_domain = ""

    def _run(self, x, auto_pad=None, ceil_mode=None, count_include_pad=None, dilations=None, kernel_shape=None,
             pads=None, strides=None):
        assert not any(pads or ()) and not ceil_mode and (auto_pad in (None, "NOTSET", b"NOTSET"))
        k = len(kernel_shape)
        axes = tuple(range(x.ndim - k, x.ndim))
        windows = np.lib.stride_tricks.sliding_window_view(x, kernel_shape, axis=axes)
        windows = windows[(Ellipsis,) + tuple(slice(None, None, s) for s in (strides or [1] * k)) + (slice(None),) * k]
        with np.errstate(invalid="ignore", over="ignore"):
            y = windows.mean(axis=tuple(range(-k, 0)), dtype=np.float32).astype(x.dtype)
        return (np.where(np.isnan(y), np.array(-np.inf, x.dtype), y),)


@pytest.mark.parametrize("shape,size,opset", POOLED_AVG_CASES, ids=POOLED_AVG_IDS)
def test_portable_averages_keep_nan_where_the_average_pool_loses_it(shape, size, opset):
    model = portable_pooled_avg(shape, size, opset)
    assert "AveragePool" in {n.op_type for n in model.graph.node}  # the form this is about
    x = non_finite_pool_input(shape)
    want = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
    assert np.isnan(want).any() and np.isinf(want).any()
    with np.errstate(invalid="ignore"):  # inf - inf: the NaN torch makes too
        got = ReferenceEvaluator(model, new_ops=[AveragePool]).run(None, {"x": x})[0]
    assert_same_non_finite(got, want)


def test_the_evaluator_loses_nan_as_tflite_does():
    """What the test above guards against: the plain means (one AveragePool) through this AveragePool give -inf
    where torch gives NaN."""
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    x = non_finite_pool_input((1, 6, 8, 8))
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x), 2).numpy()
    got = ReferenceEvaluator(model, new_ops=[AveragePool]).run(None, {"x": x})[0]
    assert np.isnan(want).any() and np.isneginf(got[np.isnan(want)]).all()


@pytest.mark.parametrize("shape,size,opset", [(("N", 6, 8, 9), (5, 7), 17), (("N", "C", 11), (4,), 18),
                                              (("N", 6, 4, 5, 6), (2, 3, 4), 17), (("N", 6, 8, 9), (1, 1), 18)],
                         ids=["2d_runs", "1d_n_c", "3d", "2d_to_one"])
def test_symbolic_batch_keeps_nan_at_every_batch(shape, size, opset):
    """The form under symbolic N (and C): one file, run at several batches and channel counts, in onnxruntime and
    through the AveragePool that loses NaN, against torch."""
    import onnxruntime as ort
    from helpers import make_leftover

    import onnxpoolfix

    model = onnxpoolfix.patch(make_leftover("avg", shape, size, opset=opset), target="portable").model
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, c in [(1, 6), (3, 6), (2, 5)]:
        x = non_finite_pool_input(tuple(n if d == "N" else c if d == "C" else d for d in shape))
        want = getattr(torch.nn.functional, f"adaptive_avg_pool{len(size)}d")(torch.from_numpy(x), size).numpy()
        assert_same_non_finite(session.run(None, {"x": x})[0], want)
        with np.errstate(invalid="ignore"):
            assert_same_non_finite(ReferenceEvaluator(model, new_ops=[AveragePool]).run(None, {"x": x})[0], want)
    assert "Neg" in {n.op_type for n in model.graph.node}  # the form this is about

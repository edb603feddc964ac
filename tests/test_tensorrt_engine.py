"""Patched fixtures build as TensorRT engines and match onnxruntime.

For every ``fixtures/*.onnx``: patch it with ``onnxpoolfix.patch_model``, check it with ``lint_tensorrt``,
build a TensorRT engine from it (FP32, TF32 off), run engine and onnxruntime on the same random input and
compare (atol = rtol = 1e-4 for FP32, 1e-2 for FP16). Symbolic input dims get two sizes, covered by one optimization profile, so a
lowering that froze a traced size fails here.

Skipped unless the ``tensorrt`` package, torch and a CUDA GPU are present (not the case in CI). To run it on a
GPU machine (TensorRT 10.x, CUDA 12):

    pip install tensorrt torch --extra-index-url https://download.pytorch.org/whl/cu124
    pip install -e '.[test]'
    python fixtures/make_fixtures.py        # if fixtures/*.onnx are not there yet
    pytest tests/test_tensorrt_engine.py -v
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

trt = pytest.importorskip("tensorrt")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="TensorRT needs a CUDA GPU")

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("*.onnx"))

# Sizes given to symbolic dims: axis 0 (batch) and the other axes, for the two runs of each fixture.
SYMBOLIC_SIZES = [{"batch": 1, "other": 17}, {"batch": 2, "other": 24}]
# (atol, rtol) by the widest float input type; DOUBLE runs as FP32 in TensorRT.
TOLERANCE = {np.float32: (1e-4, 1e-4), np.float64: (1e-4, 1e-4), np.float16: (1e-2, 1e-2)}

NP_DTYPES = {  # BFLOAT16 has no numpy type: such fixtures are skipped
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.BOOL: np.bool_,
}


def _patched(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxpoolfix import patch_model
    from onnxpoolfix.errors import PoolFixError

    try:
        result = patch_model(model)
    except PoolFixError as err:  # fixtures that are meant not to patch are tested elsewhere
        pytest.skip(f"fixture does not patch: {err}")
    if isinstance(result, onnx.ModelProto):
        return result
    if isinstance(result, tuple) and isinstance(result[0], onnx.ModelProto):  # (model, report)
        return result[0]
    return result.model  # a report object carrying the model


def _graph_inputs(model: onnx.ModelProto):
    """(name, elem_type, dims) of the real inputs; dims hold ints, or None where symbolic."""
    initializers = {init.name for init in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
        out.append((vi.name, tt.elem_type, dims))
    return out


def _concrete(dims, sizes) -> tuple[int, ...]:
    return tuple(d if d is not None else (sizes["batch"] if i == 0 else sizes["other"])
                 for i, d in enumerate(dims))


def _random_feeds(model: onnx.ModelProto, sizes, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, elem, dims in _graph_inputs(model):
        dtype = NP_DTYPES[elem]
        shape = _concrete(dims, sizes)
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def _build_engine(model: onnx.ModelProto, logger):
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.SerializeToString()):
        errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        pytest.fail(f"TensorRT's ONNX parser rejected the patched model:\n{errors}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    config.clear_flag(trt.BuilderFlag.TF32)  # plain FP32, so 1e-4 is a fair tolerance

    # One profile covering every size the test runs; static inputs get min = opt = max.
    profile = builder.create_optimization_profile()
    for name, _elem, dims in _graph_inputs(model):
        shapes = [_concrete(dims, sizes) for sizes in SYMBOLIC_SIZES]
        lo = tuple(map(min, zip(*shapes)))
        hi = tuple(map(max, zip(*shapes)))
        profile.set_shape(name, lo, shapes[0], hi)
    config.add_optimization_profile(profile)

    serialized = builder.build_serialized_network(network, config)
    assert serialized is not None, "TensorRT failed to build the engine (see the log above)"
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    assert engine is not None
    return engine


def _run_engine(engine, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]

    buffers = {}  # keep every device tensor alive until the stream is done
    for name in inputs:
        want = trt.nptype(engine.get_tensor_dtype(name))
        buffers[name] = torch.from_numpy(np.ascontiguousarray(feeds[name].astype(want))).cuda()
        assert context.set_input_shape(name, tuple(feeds[name].shape))
        context.set_tensor_address(name, buffers[name].data_ptr())
    assert not context.infer_shapes(), "some input shape is still unset"
    for name in outputs:
        shape = tuple(context.get_tensor_shape(name))
        dtype = torch.from_numpy(np.empty(0, trt.nptype(engine.get_tensor_dtype(name)))).dtype
        buffers[name] = torch.empty(shape, dtype=dtype, device="cuda")
        context.set_tensor_address(name, buffers[name].data_ptr())

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        assert context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return {name: buffers[name].cpu().numpy() for name in outputs}


def _run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_patched_fixture_matches_onnxruntime_in_tensorrt(path: Path):
    from onnxpoolfix.tensorrt import lint_tensorrt

    model = _patched(onnx.load(str(path)))
    inputs = _graph_inputs(model)
    unknown = [onnx.TensorProto.DataType.Name(elem) for _n, elem, _d in inputs if elem not in NP_DTYPES]
    if unknown:
        pytest.skip(f"no numpy type for input type(s) {unknown}")
    opset = next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))
    if opset < 9:
        pytest.skip(f"opset {opset}: TensorRT 10 imports opset 9 and newer")
    floats = [NP_DTYPES[elem] for _n, elem, _d in inputs if np.issubdtype(NP_DTYPES[elem], np.floating)]
    atol, rtol = TOLERANCE[np.float16 if np.float16 in floats else np.float32]

    errors = [f for f in lint_tensorrt(model) if f.severity == "error"]
    assert not errors, "\n".join(map(str, errors))

    logger = trt.Logger(trt.Logger.WARNING)
    engine = _build_engine(model, logger)
    for seed, sizes in enumerate(SYMBOLIC_SIZES):
        feeds = _random_feeds(model, sizes, seed)
        expected = _run_onnxruntime(model, feeds)
        got = _run_engine(engine, feeds)
        assert set(got) == set(expected)
        for name, want in expected.items():
            np.testing.assert_allclose(got[name].astype(want.dtype), want, atol=atol, rtol=rtol,
                                       err_msg=f"{path.name}: output {name!r} at input sizes {sizes}")

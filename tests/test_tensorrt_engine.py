"""Patched fixtures build as TensorRT engines and match onnxruntime and the reference.

For every ``fixtures/*.onnx`` TensorRT takes (not bfloat16, opset 9+): patch it with ``--target tensorrt``
(and with the default onnxruntime target where that emits another graph: max pooling's lazy NaN/-inf If,
ArgMax), check it with ``lint_tensorrt``, build a TensorRT engine from it (FP32; TF32 off where the model has
convs or products of its own, TensorRT's default where the graph is pooling alone), run engine and
onnxruntime on the same inputs and compare: random, and structured (``tests/support/structured_inputs.py``: ramps,
ties of all-equal, ReLU-zero and small-integer data, and for max pooling NaN and all -inf windows). Averages
within atol = rtol = 1e-4 for FP32 (1e-2 for FP16); max pooling bit for bit (values with NaN where
onnxruntime has NaN, and indices), and its values also against ``onnxpoolfix.reference``. Symbolic input
dims get two sizes, covered by one optimization profile, so a lowering that froze a traced size fails here.
A fixture that does not patch is a failure, not a skip.

Skipped unless the ``tensorrt`` package, torch and a CUDA GPU are present (not the case in CI). To run it on a
GPU machine (TensorRT 10.x, CUDA 12):

    pip install tensorrt torch --extra-index-url https://download.pytorch.org/whl/cu124
    pip install -e '.[test]'
    python fixtures/make_fixtures.py        # if fixtures/*.onnx are not there yet
    pytest tests/test_tensorrt_engine.py -v
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

trt = pytest.importorskip("tensorrt")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="TensorRT needs a CUDA GPU")

from structured_inputs import structured_inputs

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURES = sorted(FIXTURE_DIR.glob("*.onnx"))
MANIFEST = {c["file"]: c for c in json.loads((FIXTURE_DIR / "manifest.json").read_text())["cases"]}
TARGETS = ["tensorrt", "onnxruntime"]

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


def _patched(model: onnx.ModelProto, target: str) -> onnx.ModelProto:
    """The patched model, as ``onnxpoolfix IN OUT --target TARGET`` writes it (the check included). Every
    fixture patches (tests/test_fixtures.py): a PoolFixError here is a regression, so it fails the test."""
    from onnxpoolfix import patch
    from onnxpoolfix.errors import PoolFixError

    try:
        return patch(model, target=target).model
    except PoolFixError as err:
        pytest.fail(f"the fixture no longer patches with --target {target}: {err}")


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


def _feeds(model: onnx.ModelProto, sizes, seed: int, *, finite: bool) -> dict[str, dict[str, np.ndarray]]:
    """label -> feeds: one random, then the structured inputs (float inputs; other inputs stay random)."""
    rng = np.random.default_rng(seed)
    base, structured = {}, {}
    for name, elem, dims in _graph_inputs(model):
        dtype = NP_DTYPES[elem]
        shape = _concrete(dims, sizes)
        if np.issubdtype(dtype, np.floating):
            base[name] = rng.standard_normal(shape).astype(dtype)
            structured[name] = structured_inputs(shape, dtype, finite=finite, seed=seed)
        elif dtype is np.bool_:
            base[name] = rng.random(shape) < 0.5
        else:
            base[name] = rng.integers(0, 4, size=shape).astype(dtype)
    out = {"random": base}
    labels = {label for per_input in structured.values() for label in per_input}
    for label in sorted(labels):
        out[label] = {**base, **{n: per_input[label] for n, per_input in structured.items() if label in per_input}}
    return out


#: the layers a TensorRT build runs in TF32 by default (BuilderFlag.TF32). The tensorrt target writes none for
#: pooling (docs/tensorrt.md), so a file of pooling alone is built with TensorRT's defaults, as users build it
TF32_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"}


def _build_engine(model: onnx.ModelProto, logger):
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.SerializeToString()):
        errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        pytest.fail(f"TensorRT's ONNX parser rejected the patched model:\n{errors}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    if {n.op_type for n in model.graph.node} & TF32_OPS:  # the model's own convs and products: plain FP32, so
        config.clear_flag(trt.BuilderFlag.TF32)  # 1e-4 is a fair tolerance; pooling alone keeps the default

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


def _assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal element for element (NaN where ``want`` has NaN; integers exactly)."""
    got = got.astype(want.dtype)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN positions differ"
        bad = ~np.isnan(want) & (got != want)
    else:
        bad = got != want
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ, first at {np.argwhere(bad)[0].tolist()}: "
                           f"got {got[bad][0]!r} want {want[bad][0]!r}")


# inputs without equal values in a window (random floats, ramps) and without NaN
ORDERED = {"random"} | {f"{how}ramp axis {a}" for how in ("", "falling ") for a in range(8)}


def _all_nodes(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)


def _case(path: Path) -> dict:
    return MANIFEST[path.name]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_patched_fixture_matches_onnxruntime_in_tensorrt(path: Path, target: str):
    from onnxpoolfix import reference
    from onnxpoolfix.tensorrt import lint_tensorrt

    original = onnx.load(str(path))
    inputs = _graph_inputs(original)
    unknown = [onnx.TensorProto.DataType.Name(elem) for _n, elem, _d in inputs if elem not in NP_DTYPES]
    if unknown:
        pytest.skip(f"no numpy type for input type(s) {unknown}")
    opset = next(i.version for i in original.opset_import if i.domain in ("", "ai.onnx"))
    if opset < 9:
        pytest.skip(f"opset {opset}: TensorRT 10 imports opset 9 and newer")
    model = _patched(original, target)
    if target != "tensorrt" and model.graph == _patched(original, "tensorrt").graph:
        pytest.skip("the default target emits the same graph as --target tensorrt (built in the other case)")
    case = _case(path)
    is_max = case["kind"] == "max"
    floats = [NP_DTYPES[elem] for _n, elem, _d in inputs if np.issubdtype(NP_DTYPES[elem], np.floating)]
    atol, rtol = TOLERANCE[np.float16 if np.float16 in floats else np.float32]

    errors = [f for f in lint_tensorrt(model) if f.severity == "error"]
    assert not errors, "\n".join(map(str, errors))

    # TensorRT imports ArgMax as TopK, whose pick among equal values is not documented: the default target's
    # ArgMax (first maximum; last NaN) is held to torch's indices only on inputs without ties
    argmax_ties_unspecified = target != "tensorrt" and any(n.op_type == "ArgMax" for n in _all_nodes(model.graph))

    logger = trt.Logger(trt.Logger.WARNING)
    engine = _build_engine(model, logger)
    # max pooling reads the graph input itself in every max fixture: the values are the reference's
    pool = case["pools"][0]
    value_output = pool["outputs"][0] if is_max and pool["inputs"][0] == inputs[0][0] else None
    for seed, sizes in enumerate(SYMBOLIC_SIZES):
        for label, feeds in _feeds(model, sizes, seed, finite=not is_max).items():
            what = f"{path.name} --target {target}, {label} input at sizes {sizes}"
            expected = _run_onnxruntime(model, feeds)
            got = _run_engine(engine, feeds)
            assert set(got) == set(expected)
            for name, want in expected.items():
                if not np.issubdtype(want.dtype, np.floating) and argmax_ties_unspecified and label not in ORDERED:
                    continue  # indices among equal values: only --target tensorrt promises TensorRT the first
                if is_max:  # gathers and comparisons: no rounding anywhere
                    _assert_same_bits(got[name], want, f"{what}: output {name!r}")
                else:
                    np.testing.assert_allclose(got[name].astype(want.dtype), want, atol=atol, rtol=rtol,
                                               err_msg=f"{what}: output {name!r}")
            if value_output in got:
                x = feeds[inputs[0][0]]
                ref = reference.adaptive_max_pool_values(x, case["output_size"]).astype(x.dtype)
                _assert_same_bits(got[value_output], ref, f"{what}: {value_output!r} vs onnxpoolfix.reference")

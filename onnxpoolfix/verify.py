"""The proof: run the patched model in onnxruntime and compare every replaced node with the reference.

For each replaced node the check fetches the node's ACTUAL input and output tensors from the patched
graph (they are added as extra graph outputs for the run) and compares the output with
:mod:`onnxpoolfix.reference` applied to that input. So the comparison covers the emitted subgraph only,
whatever the rest of the model does, and needs no torch.

Tolerances: max pooling must match bit for bit (values and indices). Averages, per output element:
``4 * eps * sqrt(L) * mean|x| over the window + eps * |ref|`` (the summation order differs from torch's;
eps of the compute dtype, float32 for float16/bfloat16) plus one ulp of a float16/bfloat16 output (one
rounding of a float32 result); see :func:`_tolerance`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from math import prod
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from . import reference
from . import windows as W
from .emit import Emitter
from .errors import CheckFailedError, ShapeError
from .find import subgraphs
from .shapes import PoolSpec, _dims, light_copy, make_value_info

logger = logging.getLogger(__name__)


@dataclass
class NodeCheck:
    name: str
    max_error: float = 0.0
    tolerance: float = 0.0
    passed: bool = True
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    detail: str = ""
    structured: int = 0  # structured inputs the subgraph also ran on alone


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    init = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def symbolic_inputs(model: onnx.ModelProto) -> dict[str, tuple]:
    """Graph inputs with a symbolic or unknown dim, and their declared shapes."""
    out = {}
    for vi in graph_inputs(model):
        _, dims = _dims(vi.type)
        if dims is None or any(not isinstance(d, int) for d in dims):
            out[vi.name] = dims
    return out


def random_feed(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], rng: np.random.Generator) -> dict:
    try:
        return _random_feed(model, shapes, rng)
    except (ValueError, MemoryError) as e:  # numpy: an input too large to make
        text = ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
        raise CheckFailedError(f"cannot make the check's random inputs at {text or 'the declared shapes'}: "
                               f"{' '.join(str(e).split())[:120] or type(e).__name__}",
                               "check at smaller sizes with --check-shape NAME:D0,D1,..., or skip the check with "
                               "--no-check") from None


def _random_feed(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], rng: np.random.Generator) -> dict:
    feed = {}
    for vi in graph_inputs(model):
        elem, dims = _dims(vi.type)
        shape = tuple(shapes[vi.name]) if vi.name in shapes else tuple(dims or ())
        if any(not isinstance(d, int) for d in shape):
            raise ShapeError(f"input '{vi.name}' has symbolic dims {shape} and no concrete shape to check with",
                             "give every symbolic input's shape with --check-shape NAME:D0,D1,... "
                             "(several inputs: in one flag, separated by spaces), or skip the check with --no-check")
        if elem == TensorProto.BFLOAT16:
            import ml_dtypes

            feed[vi.name] = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
            continue
        dt = onnx.helper.tensor_dtype_to_np_dtype(elem)
        if np.issubdtype(dt, np.floating):
            feed[vi.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feed[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feed[vi.name] = rng.integers(0, 4, shape).astype(dt)
    return feed


def _session(model: onnx.ModelProto, model_dir: str | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    # fatal only: stale declared output shapes of dynamic exports (warnings) are not our news, and a probe at
    # a size the network cannot take logs an error that is expected; a failure that matters is raised with
    # onnxruntime's message in it
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if model_dir is not None:
        # external data resolves against this folder: the graph is passed as bytes (weights stay on disk),
        # so nothing is written next to IN, which may be read-only
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model_dir))
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


_EPS = {TensorProto.FLOAT: 2.0 ** -23, TensorProto.DOUBLE: 2.0 ** -52,
        TensorProto.FLOAT16: 2.0 ** -10, TensorProto.BFLOAT16: 2.0 ** -7}
_MANTISSA = {TensorProto.FLOAT16: 10, TensorProto.BFLOAT16: 7}


def _tolerance(spec: PoolSpec, x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per output element, what a correct average may differ from the exact one (float64) by.

    The lowering sums L = window-size terms in its compute dtype (float32 for float16/bfloat16, as torch):
    rounding errors of a sum of L terms of mean magnitude A grow like sqrt(L) * eps * A (random walk;
    4x that is allowed), plus the rounding of the result itself, one ulp of the output dtype (float16 and
    bfloat16 outputs are rounded once from float32). A from the window's own mean |x|, not max|x|: a
    window off by one element on a big plane (a ~1/L change) stays above it, as do weights 1/(L+1) on small
    ones. Used for averages only: max must be bit exact.
    """
    size = _torch_size(spec)
    xf = np.where(np.isfinite(x), x, 0).astype(np.float64)
    mean_abs = reference.adaptive_avg_pool(np.abs(xf), size)
    spatial = x.shape[x.ndim - spec.k:]
    lengths = np.ones(ref.shape[x.ndim - spec.k:], dtype=np.float64)
    for a, (n, m) in enumerate(zip(spatial, _out_sizes(spec, x))):
        ln = np.array([e - b for b, e in W.windows(n, m)], dtype=np.float64)
        shape = [1] * spec.k
        shape[a] = m
        lengths = lengths * ln.reshape(shape)
    compute_eps = _EPS[TensorProto.DOUBLE if spec.dtype == TensorProto.DOUBLE else TensorProto.FLOAT]
    mag = np.abs(np.where(np.isfinite(ref), ref, 0).astype(np.float64))
    tol = 4 * compute_eps * np.sqrt(lengths) * mean_abs + compute_eps * mag + np.finfo(np.float64).tiny
    if spec.dtype in _MANTISSA:  # one ulp of the output at |ref|
        floor = 2.0 ** -24 if spec.dtype == TensorProto.FLOAT16 else 2.0 ** -133  # smallest subnormal
        tol = tol + np.maximum(2.0 ** (np.floor(np.log2(np.maximum(mag, floor))) - _MANTISSA[spec.dtype]), floor)
    return tol


def _out_sizes(spec: PoolSpec, x: np.ndarray) -> tuple[int, ...]:
    return reference.resolve_output_size(x.shape, _torch_size(spec))


def _torch_size(spec: PoolSpec) -> tuple[int | None, ...]:
    return tuple(None if f else s for f, s in zip(spec.follows_input, spec.node.output_size))


def compare(spec: PoolSpec, x: np.ndarray, y: np.ndarray, idx: np.ndarray | None, check: NodeCheck) -> None:
    """Compare one node's actual output with the reference; accumulate into ``check``."""
    size = _torch_size(spec)
    xf, yf = x, y
    shape = tuple(int(d) for d in x.shape)
    if shape not in check.shapes:
        check.shapes.append(shape)
    if spec.kind == "avg":
        ref = reference.adaptive_avg_pool(xf.astype(np.float64), size)
        if ref.shape != yf.shape:
            check.passed, check.detail = False, f"output shape {yf.shape}, expected {ref.shape}"
            check.max_error = float("inf")
            return
        tol = _tolerance(spec, x, ref)
        both_nan = np.isnan(ref) & np.isnan(yf)
        same_inf = np.isinf(ref) & (yf.astype(np.float64) == ref)
        with np.errstate(invalid="ignore"):
            err = np.where(both_nan | same_inf, 0.0, np.abs(yf.astype(np.float64) - ref))
        err = np.nan_to_num(err, nan=np.inf)
        e = float(err.max()) if err.size else 0.0
        check.max_error = max(check.max_error, e)
        check.tolerance = max(check.tolerance, float(tol.max()) if tol.size else 0.0)
        bad = err > tol
        if bad.any():
            where = np.unravel_index(int(np.argmax(err - tol)), err.shape)
            check.passed = False
            check.detail = (f"error {float(err[where]):.3g} > tolerance {float(tol[where]):.3g} at output "
                            f"{tuple(int(i) for i in where)} for input {x.shape}")
        return
    if idx is None:
        ref_v, ref_i = reference.adaptive_max_pool_values(xf, size), None
    else:
        ref_v, ref_i = reference.adaptive_max_pool(xf, size)
    if ref_v.shape != yf.shape:
        check.passed, check.detail = False, f"output shape {yf.shape}, expected {ref_v.shape}"
        check.max_error = float("inf")
        return
    same = np.array_equal(ref_v.astype(yf.dtype), yf, equal_nan=True)
    if not same:
        with np.errstate(invalid="ignore"):  # inf - inf where both are inf: NaN, counted as a difference
            diff = np.abs(ref_v.astype(np.float64) - yf.astype(np.float64))
        check.max_error = max(check.max_error, float(np.nan_to_num(diff, nan=np.inf).max()))
        check.passed, check.detail = False, f"max values differ (error {check.max_error:.3g}) at input {x.shape}"
    if idx is not None and not np.array_equal(idx, ref_i):
        check.passed = False
        check.detail = f"indices differ at {int((idx != ref_i).sum())} positions at input {x.shape}"
        check.max_error = max(check.max_error, float("inf"))


def check_patched(model: onnx.ModelProto, specs: Sequence[PoolSpec], *,
                  input_shapes: Sequence[Mapping[str, Sequence[int]]] = ({},),
                  model_dir: str | None = None, seed: int = 0) -> dict[int, NodeCheck]:
    """Run ``model`` once per entry of ``input_shapes`` and compare every replaced node.

    ``model`` is temporarily given extra graph outputs (restored before returning; bfloat16 tensors are
    fetched through an exact Cast to float32, since numpy has no bfloat16). ``model_dir`` is where its
    external data lives, if any.
    """
    rng = np.random.default_rng(seed)
    inputs = {i.name for i in graph_inputs(model)}
    types = {s.node.input: s.dtype for s in specs}
    types.update({s.node.output: s.dtype for s in specs})
    types.update({s.node.indices_output: TensorProto.INT64 for s in specs if s.node.indices_output})
    fetch: dict[str, str] = {}  # tensor -> the graph output it is read from
    added_nodes: list[onnx.NodeProto] = []
    taken = {x for n in model.graph.node for x in list(n.input) + list(n.output)}
    taken |= {v.name for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)}
    taken |= {t.name for t in model.graph.initializer}
    for name, elem in types.items():
        if name in inputs or name in fetch:
            continue
        if elem == TensorProto.BFLOAT16:
            fetch[name] = Emitter(name, taken, 0).fresh("onnxpoolfix_check_float32")
            added_nodes.append(onnx.helper.make_node("Cast", [name], [fetch[name]], to=TensorProto.FLOAT))
        else:
            fetch[name] = name
    existing = {o.name for o in model.graph.output}
    n_out, n_nodes = len(model.graph.output), len(model.graph.node)
    model.graph.node.extend(added_nodes)
    for name, out in fetch.items():
        if out not in existing:
            elem = TensorProto.FLOAT if out != name else types[name]
            model.graph.output.append(onnx.helper.make_tensor_value_info(out, elem, None))
    try:
        sess = _session(model, model_dir)
    except Exception as e:  # onnxruntime's own words, on one line
        from .io import has_external_data

        hint = ("the model's weights are in external data that onnxruntime looked for beside the current "
                "folder: pass model_dir= (the folder of the .onnx file)" if model_dir is None and
                has_external_data(model) else
                "if the model holds other ops onnxruntime lacks, skip the check with --no-check")
        raise CheckFailedError(f"onnxruntime cannot load the patched model: {' '.join(str(e).split())[:300]}",
                               hint) from None
    finally:
        del model.graph.output[n_out:]
        del model.graph.node[n_nodes:]
    checks = {s.node.index: NodeCheck(s.node.name) for s in specs}  # names may repeat
    out_names = list(dict.fromkeys(fetch.values()))
    for shapes in input_shapes:
        feed = random_feed(model, shapes, rng)
        ort_feed = {k: _ort_value(v) for k, v in feed.items()}
        feed = {k: v.astype(np.float32) if v.dtype.name == "bfloat16" else v  # exact: bfloat16 fits float32
                for k, v in feed.items()}
        try:
            results = sess.run_with_ort_values(out_names, ort_feed)
        except Exception as e:
            shapes_txt = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}" for k, v in feed.items())
            raise CheckFailedError(
                f"onnxruntime failed to run the patched model at {shapes_txt}: {' '.join(str(e).split())[:300]}",
                "choose other check sizes with --check-shape, or skip the check with --no-check") from None
        got = {n: r.numpy() for n, r in zip(out_names, results)}
        values = {name: got[out] for name, out in fetch.items()}
        values.update(feed)
        for s in specs:
            if 0 in values[s.node.input].shape[values[s.node.input].ndim - s.k:]:  # no window to compare
                shapes_txt = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}" for k, v in feed.items())
                raise CheckFailedError(
                    f"{s.node.label}: its input is empty ({'x'.join(map(str, values[s.node.input].shape))}) "
                    f"at {shapes_txt}: adaptive pooling has no windows there to check",
                    "choose larger sizes with --check-shape NAME:D0,D1,..., or skip the check with --no-check")
        for s in specs:
            idx = values.get(s.node.indices_output) if s.node.indices_output else None
            compare(s, values[s.node.input], values[s.node.output], idx, checks[s.node.index])
    for s in specs:  # each replaced subgraph alone, on inputs made to expose what random data rarely does
        check = checks[s.node.index]
        if check.passed and check.shapes:
            _check_isolated(model, s, check.shapes[0], check, rng)
    return checks


#: pooled inputs up to this many elements also get the structured inputs (each a run and a reference)
STRUCTURED_MAX_ELEMENTS = 1 << 22


def _ort_value(x: np.ndarray):
    """``x`` as an onnxruntime input (bfloat16 through its raw bits: numpy has no bfloat16 of its own)."""
    import onnxruntime as ort

    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(x)


def _isolate(model: onnx.ModelProto, spec: PoolSpec) -> onnx.ModelProto | None:
    """The nodes computing ``spec``'s output (and indices) from its input alone, as a model of their own; None
    when they read anything else (then only the in-model check covers the node)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output if o}
    inits = {t.name: t for t in g.initializer}
    outs = [spec.node.output] + ([spec.node.indices_output] if spec.node.indices_output else [])
    picked: dict[int, onnx.NodeProto] = {}
    used: set[str] = set()
    pending, seen = list(outs), set()
    while pending:
        name = pending.pop()
        if not name or name in seen or name == spec.node.input:
            continue
        seen.add(name)
        if name in inits:
            if inits[name].data_location == TensorProto.EXTERNAL:
                return None
            used.add(name)
            continue
        node = producer.get(name)
        if node is None:
            return None
        if id(node) not in picked:
            picked[id(node)] = node
            pending.extend(node.input)
            pending.extend(_outer_reads(node))
    nodes = [n for n in g.node if id(n) in picked]  # graph order is topological
    y, y_type = spec.node.output, spec.dtype
    if y_type == TensorProto.BFLOAT16:  # fetched through an exact Cast (numpy has no bfloat16)
        y, y_type = "onnxpoolfix_isolated_float32", TensorProto.FLOAT
        nodes.append(onnx.helper.make_node("Cast", [spec.node.output], [y], to=TensorProto.FLOAT))
    graph = onnx.helper.make_graph(
        nodes, "isolated", [make_value_info(spec.node.input, spec.dtype, None)],
        [make_value_info(y, y_type, None)]
        + ([make_value_info(spec.node.indices_output, TensorProto.INT64, None)] if spec.node.indices_output else []),
        initializer=[inits[n] for n in sorted(used)])
    isolated = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    isolated.ir_version = model.ir_version
    return isolated


def _outer_reads(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs (If branches) read from outside themselves."""
    out: list[str] = []
    for sub in subgraphs(node):
        made = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        made |= {t.name for t in sub.initializer}
        for n in sub.node:
            out.extend(i for i in n.input if i and i not in made)
            out.extend(_outer_reads(n))
    return out


def _structured_inputs(spec: PoolSpec, shape: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    """Ramps along each pooled axis (a window one element off moves an average by half a step, and moves a
    max's value and index); for max also falling ramps (the window starts) and NaN/-inf: NaN scattered,
    one whole window of -inf and a band of -inf (the exact NaN/-inf path, which finite inputs never take)."""
    dt = np.float32 if spec.dtype == TensorProto.BFLOAT16 else onnx.helper.tensor_dtype_to_np_dtype(spec.dtype)
    k = spec.k
    rank = len(shape)
    out = []
    for a in range(rank - k, rank):
        n = shape[a]
        ramp = np.arange(n, dtype=np.float64).reshape([n if b == a else 1 for b in range(rank)])
        out.append(np.ascontiguousarray(np.broadcast_to(ramp, shape), dtype=dt))  # (astype keeps the
        if spec.kind == "max":                                                 # broadcast's odd strides)
            out.append(np.ascontiguousarray(np.broadcast_to(n - 1 - ramp, shape), dtype=dt))
    if spec.kind == "max" and spec.opset >= 9:  # below 9 no IsNaN/Where: no NaN/-inf guard to exercise
        x = rng.standard_normal(shape).astype(dt)
        x[rng.random(shape) < 0.02] = np.nan
        first = tuple(slice(0, -((-n) // m)) for n, m in zip(shape[rank - k:], _out_sizes(spec, x)))
        x[(Ellipsis,) + first] = -np.inf  # (at least) the first window of every plane: all -inf
        band = [slice(None)] * rank
        band[rank - 1] = slice(shape[-1] // 2, shape[-1] // 2 + 2)
        x[tuple(band)] = -np.inf
        out.append(x)
    return out


def _check_isolated(model, spec: PoolSpec, shape: tuple[int, ...], check: NodeCheck, rng) -> None:
    if prod(shape) > STRUCTURED_MAX_ELEMENTS:
        return
    isolated = _isolate(model, spec)
    if isolated is None:
        logger.debug("%s: its subgraph reads other tensors; checked in the model only", spec.node.label)
        return
    try:
        sess = _session(isolated, None)
    except Exception as e:  # noqa: BLE001 - the in-model check ran it; say why here if this differs
        check.passed, check.detail = False, f"its subgraph alone does not load: {' '.join(str(e).split())[:200]}"
        return
    names = [o.name for o in isolated.graph.output]
    inputs = _structured_inputs(spec, shape, rng)
    if spec.node.indices_output and prod(reference.resolve_output_size(shape, _torch_size(spec))) > 4096:
        inputs = inputs[-1:]  # the reference's indices loop over windows in Python: the NaN/-inf input only
    for x in inputs:
        if spec.dtype == TensorProto.BFLOAT16:
            import ml_dtypes

            x = x.astype(ml_dtypes.bfloat16)
        got = [r.numpy() for r in sess.run_with_ort_values(names, {spec.node.input: _ort_value(x)})]
        if spec.dtype == TensorProto.BFLOAT16:
            x = x.astype(np.float32)
        compare(spec, x, got[0], got[1] if len(got) > 1 else None, check)
        check.structured += 1
        if not check.passed:
            check.detail += " (structured input, the subgraph alone)"
            return


def default_check_shapes(model: onnx.ModelProto, specs: Sequence[PoolSpec], *,
                         check_shapes: Sequence[Mapping[str, Sequence[int]]] | None = None,
                         input_shapes: Mapping[str, Sequence[int]] | None = None,
                         model_dir: str | None = None, seed: int = 0,
                         ) -> tuple[list[dict[str, tuple[int, ...]]], str]:
    """The input shapes to run the check at, and a note saying what they are.

    Static inputs need nothing. Symbolic dims: ``check_shapes`` if given, else the ``input_shapes``
    binding, else batch-like dims (axis 0) are bound to 2 (a batch > 1 catches lowerings that mix planes).
    When a pooled axis is still symbolic (the 'dynamic' lowering), one size proves little: the model is
    probed (see :func:`_probe_dynamic_sizes`) for input sizes that give uniform, non-uniform and
    upsampling windows on every pooled axis, one of them with batch 2.
    """
    if check_shapes:
        return [{k: tuple(v) for k, v in s.items()} for s in check_shapes], f"checked at {len(check_shapes)} input shape(s)"
    sym = symbolic_inputs(model)
    if not sym:
        return [{}], "static input shapes"
    binding = {k: tuple(v) for k, v in (input_shapes or {}).items()}
    if any(not s.static for s in specs) and any(k not in binding for k in sym):
        return _probe_dynamic_sizes(model, specs, sym, binding, model_dir=model_dir, seed=seed)
    unresolved = []
    for name, dims in sym.items():
        if name in binding:
            continue
        if dims is None:
            unresolved.append(name)
            continue
        shape = []
        for axis, d in enumerate(dims):
            if isinstance(d, int):
                shape.append(d)
            elif axis == 0:
                shape.append(2)
            else:
                unresolved.append(f"{name}[{axis}]")
                shape.append(None)
        binding[name] = tuple(shape)
    if unresolved:
        raise ShapeError(
            f"cannot choose sizes for the check: symbolic dims {', '.join(unresolved)}",
            "give them with --check-shape NAME:D0,D1,... or --input-shape, or skip the check with --no-check")
    return [binding], "symbolic dims bound to " + ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in binding.items())


# first sizes tried for the symbolic non-batch input dims when probing; the first that runs is the base
_PROBE_BASES = (16, 32, 64, 128, 256, 512)
_MIN_DYNAMIC_CHECKS = 3
_KINDS = ("uniform", "non-uniform", "upsampling")


def _window_targets(m: int) -> dict[str, int | None]:
    """Pooled input lengths that give each kind of window for output length ``m`` (None: impossible)."""
    nonuniform = next((n for n in range(m + 1, 3 * m + 3) if W.uniform_windows(n, m) is None), None)
    return {"uniform": 2 * m, "non-uniform": nonuniform, "upsampling": (m - 1 if m >= 3 else 1) if m > 1 else None}


def _window_kind(n: int, m: int) -> str:
    if n == m:
        return "kept"
    if n < m:
        return "upsampling"
    return "uniform" if W.uniform_windows(n, m) else "non-uniform"


def _probe_dynamic_sizes(model, specs, sym, binding, *, model_dir, seed):
    """Choose graph-input sizes for a model whose pooled axes are symbolic.

    The pooled tensor is usually not a graph input (convolutions in between), so the relation between an
    input size ``S`` and a pooled length ``n`` is measured: the model runs at two base sizes and
    ``n = n0 + (S - S0) / r`` is fitted per pooled axis. A network may run only at multiples of some step
    (stride-32 skip connections: 32); the step is probed too and every size chosen is a multiple of it.
    From the fit, sizes are aimed at uniform, non-uniform and upsampling windows (rotated over the axes so
    each axis sees each kind, one run with batch 2 where the batch is symbolic), the closest that the step
    allows; every candidate is run once and kept only if the model accepts it; at least 3 must run.
    Symbolic axis 0 is the batch (1, or 2); every other symbolic dim is spatial, matched to the pooled axes
    from the last one back.
    """
    dyn = [s for s in specs if not s.static]
    unresolved = [name for name, dims in sym.items() if name not in binding and dims is None]
    if unresolved:
        raise ShapeError(
            f"cannot choose sizes for the check: input(s) {', '.join(unresolved)} have no known rank",
            "give them with --check-shape NAME:D0,D1,... (repeatable), or skip the check with --no-check")
    free = {name: dims for name, dims in sym.items() if name not in binding}
    spatial = {name: [a for a, d in enumerate(dims) if not isinstance(d, int) and a != 0] for name, dims in free.items()}
    k = max(s.k for s in dyn)

    def shapes_for(sizes: Sequence[int], batch: int) -> dict[str, tuple[int, ...]]:
        """``sizes``: one size per pooled axis (last k); an input's last symbolic dims take them in order."""
        out = dict(binding)
        for name, dims in free.items():
            axes = spatial[name]
            shape = [d if isinstance(d, int) else batch for d in dims]
            for j, a in enumerate(axes):
                from_end = len(axes) - j  # 1 = last symbolic dim <-> last pooled axis
                shape[a] = sizes[k - from_end] if from_end <= k else sizes[0]
            out[name] = tuple(shape)
        return out

    probe = _Prober(model, {s.node.input: s.dtype for s in dyn}, model_dir, seed)
    try:
        base = None
        for b in _PROBE_BASES:
            got0 = probe.pooled(shapes_for([b] * k, 1))
            if got0 is not None:
                got1 = probe.pooled(shapes_for([2 * b] * k, 1))
                if got1 is not None:
                    base = b
                    break
        if base is None:
            raise ShapeError(
                "cannot choose sizes for the check: the model ran at none of the input sizes tried "
                f"({', '.join(map(str, _PROBE_BASES))} on the symbolic dims)",
                "give them with --check-shape NAME:D0,D1,... (repeatable), or skip the check with --no-check")
        step = 1  # base and 2*base run, so some power of two up to base does
        while step < base and probe.pooled(shapes_for([base + step] * k, 1)) is None:
            step *= 2
        # per pooled axis position j (counted from the last, as shapes_for does): n = n0 + (S - S0) / r, fitted
        # on the first dynamic spec that pools a size-dependent axis there (specs pool different numbers
        # of axes: a 2d pool's last axes are a 3d pool's last axes, its first has no counterpart)
        fits: list[tuple[int, float | None, object]] = []  # (n0, rate, output length) per position
        for j in range(k):
            from_end = k - j
            fit = None
            for s in dyn:
                if s.k < from_end:
                    continue
                axis, m = s.axes[s.k - from_end], s.out_sizes[s.k - from_end]
                n0, n1 = got0[s.node.input][axis], got1[s.node.input][axis]
                if fit is None:
                    fit = (n0, None, m)
                if n1 != n0:
                    fit = (n0, (2 * base - base) / (n1 - n0), m)
                    break
            fits.append(fit)

        def size_for(j: int, kind: str, fallback: int) -> int:
            """The input size (a multiple of ``step``) nearest the one aimed at ``kind`` on pooled axis j."""
            n0, rate, m = fits[j]
            target = _window_targets(m)[kind] if isinstance(m, int) else None
            if target is None or rate is None:
                return fallback
            aim = base + (target - n0) * rate
            sizes = sorted(range(step, max(8 * base, 2 * round(abs(aim))) + step, step), key=lambda S: abs(S - aim))
            return next((S for S in sizes if (n := n0 + (S - base) / rate) >= 1 and n == int(n)
                         and _window_kind(int(n), m) == kind), sizes[0])

        candidates = []
        for r in range(len(_KINDS)):
            sizes = [size_for(j, _KINDS[(r + j) % len(_KINDS)], base + (r + 1) * step) for j in range(k)]
            candidates.append(shapes_for(sizes, 2 if r == 1 else 1))
        candidates += [shapes_for([base] * k, 2), shapes_for([2 * base + step] * k, 1), shapes_for([3 * base] * k, 1),
                       shapes_for([2 * base] * k, 1)]
        chosen: list[dict[str, tuple[int, ...]]] = []
        pooled: list[dict[str, tuple[int, ...]]] = []
        for c in candidates:
            if c in chosen:
                continue
            got = probe.pooled(c)
            if got is None:
                continue
            chosen.append(c)
            pooled.append(got)
            if len(chosen) >= 4:
                break
    finally:
        probe.close()
    if len(chosen) < _MIN_DYNAMIC_CHECKS:
        raise ShapeError(
            f"cannot choose sizes for the check: the model ran at only {len(chosen)} of the input sizes tried "
            f"(a symbolic pooled axis needs {_MIN_DYNAMIC_CHECKS})",
            "give them with --check-shape NAME:D0,D1,... (repeatable), or skip the check with --no-check")
    kinds = {_window_kind(got[s.node.input][a], m) for got in pooled for s in dyn
             for a, m in zip(s.axes, s.out_sizes) if isinstance(m, int)}
    batches = sorted({v[0] for c in chosen for name, v in c.items() if name in free and not isinstance(free[name][0], int)})
    outs = "x".join(str(m) for m in dyn[0].out_sizes)
    desc = ", ".join(f"{' '.join(f'{n}:' + 'x'.join(map(str, v)) for n, v in c.items())} (pooled "
                     + "/".join("x".join(str(got[s.node.input][a]) for a in s.axes) for s in dyn) + ")"
                     for c, got in zip(chosen, pooled))
    covered = ", ".join(kd for kd in (*_KINDS, "kept") if kd in kinds)
    return chosen, (f"symbolic pooled axes checked at {len(chosen)} sizes (-> {outs}; windows: {covered}"
                    + (f"; batch {' and '.join(map(str, batches))}" if batches else "") + f"): {desc}")


class _Prober:
    """Runs the model with the pooled input tensors fetched as extra outputs; None where it fails."""

    def __init__(self, model, names: Mapping[str, int], model_dir, seed):
        self.model = model
        self.names = list(names)
        self.rng = np.random.default_rng(seed)
        inputs = {i.name for i in graph_inputs(model)}
        existing = {o.name for o in model.graph.output}
        n_out = len(model.graph.output)
        for name in self.names:
            if name not in existing and name not in inputs:
                model.graph.output.append(onnx.helper.make_tensor_value_info(name, names[name], None))
        try:
            self.sess = _session(model, model_dir)
        finally:
            del model.graph.output[n_out:]
        self.fetch = [n for n in self.names if n not in inputs]
        self.inputs = inputs
        self.light = light_copy(model)  # for shape inference at each size, without the weights' bytes
        self.empty_anyway = self._empty_tensors({})

    def _empty_tensors(self, shapes) -> set[str] | None:
        """Tensors that onnx shape inference gives a zero or negative dim at these input sizes (None: it
        failed). Inference errors are not held against a size: other ops may be beyond onnx's inference."""
        light = onnx.ModelProto()
        light.CopyFrom(self.light)
        for vi in light.graph.input:
            if vi.name in shapes:
                dims = vi.type.tensor_type.shape
                dims.ClearField("dim")
                for d in shapes[vi.name]:
                    dims.dim.add().dim_value = int(d)
        try:
            inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
        except Exception as e:  # noqa: BLE001
            logger.debug("shape inference at %s failed: %s", shapes, e)
            return None
        return {vi.name for vi in inferred.graph.value_info
                if any(d.HasField("dim_value") and d.dim_value <= 0 for d in vi.type.tensor_type.shape.dim)}

    def pooled(self, shapes) -> dict[str, tuple[int, ...]] | None:
        # a size too small for the network's convolutions/pools leaves some tensor empty; onnxruntime does
        # not always raise on those (its MaxPool traps with SIGFPE on a 1x1 map with a 3x3 window, taking
        # the process with it), so such sizes are never run
        empty = self._empty_tensors(shapes)
        if empty and empty - (self.empty_anyway or set()):
            logger.debug("probe at %s skipped: shape inference empties %s", shapes, sorted(empty)[:3])
            return None
        try:
            feed = {k: _ort_value(v) for k, v in random_feed(self.model, shapes, self.rng).items()}
            outs = [o.numpy() for o in self.sess.run_with_ort_values(self.fetch, feed)] if self.fetch else []
        except Exception as e:  # noqa: BLE001 - a size the network cannot run at (too small for its convs)
            logger.debug("probe at %s failed: %s", shapes, e)
            return None
        got = {n: tuple(int(d) for d in o.shape) for n, o in zip(self.fetch, outs)}
        for n in self.names:
            if n in self.inputs:
                got[n] = tuple(shapes[n])
        if any(0 in dims for dims in got.values()):  # ran, but a pooled tensor is empty: nothing to check
            return None
        return got

    def close(self):
        self.sess = None

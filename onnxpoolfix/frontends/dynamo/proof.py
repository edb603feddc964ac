"""The dynamo front end's proof: a region found by :mod:`.dataflow` is replaced only when it, run alone
in onnxruntime, equals adaptive average pooling (:mod:`onnxpoolfix.reference`) at a size where the export
is right, compared exactly as the check compares a replacement (:func:`onnxpoolfix.check.compare.compare`,
the same tolerance, float16/bfloat16 included).

The region alone is its data nodes plus the size-only nodes they read; a tensor it reads only the shape of
is fed as zeros. It runs on random, ramp and wide-range inputs in its own dtype (float16/bfloat16 values
fed through an exact Cast from float32, numpy has no bfloat16), at the sizes :mod:`.proof_search` chooses
(the traced size is not recorded in the file). What the proof learns about a candidate is its :class:`Proof`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...check.compare import NodeCheck, compare
from ...graph.shapes import make_value_info
from ...sessions import ort_value
from ...spec import InputDim, PoolNode, PoolSpec, RuntimeDim
from .dataflow import Candidate, DataflowGraph

#: the proof runs the reference in float64 on three inputs: a pooled tensor beyond this many elements is left
_PROOF_MAX_ELEMENTS = 1 << 25
_HALF = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: "bfloat16"}
_FED = "onnxpoolfix_proof_input"  # the float32 input a half region's input is cast from
_PERMUTED = "onnxpoolfix_proof_permuted"  # the pooled tensor of a fused permute (Candidate.perm)
_FETCHED = "onnxpoolfix_proof_output"  # the float32 output a half region's result is cast to


@dataclass
class Proof:
    """What the proof learned about one :class:`~.dataflow.Candidate`, which itself never changes: ``proven_at``
    where it equalled the reference (the pooled tensor's shape), else ``why``; the rest says how it got there."""

    sources: list[str]  # the tensors the region reads only the shape of (fed as zeros)
    why: str = ""
    proven_at: tuple[int, ...] | None = None
    tried: set = field(default_factory=set)  # the pooled sizes run
    proofs: list = field(default_factory=list)  # sizes of the pooled tensor where it equalled the reference
    last: str = ""  # why the last size tried did not prove it
    searched: str = ""  # how the sizes were searched (the notes say it)
    # with a binding (the traced size given): the pooled shape there, and why it did not prove there ("" where
    # it did; None: nothing bound); contradicts: a size it proved at instead (the binding is then wrong)
    bound_at: tuple[int, ...] | None = None
    bound_why: str | None = None
    contradicts: tuple[int, ...] | None = None
    # per pooled axis whose output size the graph computes: the branch classes of the (n, m) proven at
    branches: dict = field(default_factory=dict)
    last_sizes: tuple = ()  # the output size the last proof run computed
    uneven: bool = False  # proven at a size where the computed output lengths of two axes differ
    lengths: dict = field(default_factory=dict)  # per such axis, the output lengths proven at
    mismatch: str = ""  # a run whose result is not of the output size the graph computes: never proven
    proof_envs: dict = field(default_factory=dict)  # pooled shape proven -> the input symbols' values there


def isolated(model: onnx.ModelProto, g: DataflowGraph, c: Candidate, dtypes: Mapping[str, int]
             ) -> tuple[onnx.ModelProto, list[str]]:
    """The region alone as a model: inputs the pooled tensor and the tensors it reads only the shape of.
    A float16/bfloat16 region reads and writes float32 through exact Casts."""
    size_nodes, shape_sources = g.size_ancestors(c.region)
    order = sorted(set(c.region) | size_nodes)
    nodes = [g.nodes[i] for i in order]  # (make_graph copies them)
    made, used = g.written_and_read(order)
    inits = [g.initializers[t] for t in sorted(used) if t in g.initializers]
    sources = sorted(s for s in shape_sources if s != c.pooled and s not in made)
    extra = [make_value_info(s, dtypes.get(s, TensorProto.FLOAT), None) for s in sources]
    entry = c.pooled
    if c.perm:  # fed the permuted tensor the pool reads, turned back into the one the region reads
        inverse = [c.perm.index(a) for a in range(len(c.perm))]
        nodes.insert(0, helper.make_node("Transpose", [_PERMUTED], [c.pooled], perm=inverse))
        entry = _PERMUTED
    if c.elem in _HALF:
        nodes.insert(0, helper.make_node("Cast", [_FED], [entry], to=c.elem))
        nodes.append(helper.make_node("Cast", [c.result], [_FETCHED], to=TensorProto.FLOAT))
        inputs = [make_value_info(_FED, TensorProto.FLOAT, None)]
        outputs = [make_value_info(_FETCHED, TensorProto.FLOAT, None)]
    else:
        inputs, outputs = [make_value_info(entry, c.elem, None)], [make_value_info(c.result, c.elem, None)]
    outputs += [make_value_info(t, dtypes.get(t, TensorProto.INT64), None) for t in runtime_tensors(c)]
    graph = helper.make_graph(nodes, "region", inputs + extra, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return m, sources


def runtime_tensors(c: Candidate) -> list[str]:
    """The size tensors the graph computes the region's output size in (:class:`RuntimeDim`), once each."""
    return list(dict.fromkeys(m.tensor for m in c.output_size if isinstance(m, RuntimeDim)))


def _feeds(shape: tuple[int, ...], elem: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random, ramp and wide-range inputs, as the region's dtype holds them (half: rounded, as float32)."""
    ftype = np.float64 if elem == TensorProto.DOUBLE else np.float32  # drawn as float32 unless the region's is wider
    ramp = np.arange(int(np.prod(shape)), dtype=ftype).reshape(shape)
    raw = [rng.standard_normal(shape, dtype=ftype), ramp / ftype(max(1.0, ramp.size)),
           rng.random(shape, dtype=ftype) * ftype(200) - ftype(100)]
    if elem in (TensorProto.DOUBLE, TensorProto.FLOAT):
        return raw
    if elem == TensorProto.FLOAT16:
        return [x.astype(np.float16).astype(np.float32) for x in raw]
    import ml_dtypes  # bfloat16, the last of SUPPORTED_DTYPES (a region of any other dtype is never a Candidate)

    return [x.astype(ml_dtypes.bfloat16).astype(np.float32) for x in raw]


def _spec(c: Candidate, x_shape: tuple[int, ...], values: Mapping[str, np.ndarray] | None = None) -> PoolSpec:
    """The spec the comparison reads (kind, pooled axes, output size, dtype) at one concrete size; ``values``:
    the size tensors the graph computed in this run (a :class:`RuntimeDim` output size is their value)."""
    sizes = tuple(int(np.asarray(values[m.tensor]).reshape(-1)[m.index]) if isinstance(m, RuntimeDim) else m
                  for m in c.output_size)
    pn = PoolNode(index=c.end, name=c.result, op=f"adaptive_avg_pool{c.rank}d", kind="avg", rank=c.rank,
                  encoding="dynamo", input=c.pooled, output=c.result, indices_output=None, unused_outputs=(),
                  output_size=sizes, size_input=None)
    lead = len(x_shape) - c.rank
    out = tuple(x_shape[lead + i] if isinstance(m, InputDim) else m for i, m in enumerate(sizes))
    return PoolSpec(pn, x_shape, tuple(x_shape[:lead]) + out, c.elem, 0)


def prove(session, c: Candidate, p: Proof, source_dtypes: Mapping[str, int], shapes: Mapping[str, tuple],
          x_shape: tuple[int, ...], rng) -> str | None:
    """None when the region equals the reference at this size, else why not (``p``: the output sizes read)."""
    size = "x".join(map(str, x_shape))
    if int(np.prod(x_shape)) > _PROOF_MAX_ELEMENTS:
        return f"its input {size} is too large to prove ({_PROOF_MAX_ELEMENTS} elements at most)"
    extra = {}
    for s in p.sources:
        if s not in shapes:
            return f"the shape of '{s}' it reads is unknown"
        np_t = onnx.helper.tensor_dtype_to_np_dtype(source_dtypes.get(s, TensorProto.FLOAT))
        extra[s] = ort_value(np.zeros(shapes[s], dtype=np_t))  # (bfloat16 through its bits)
    fed = _FED if c.elem in _HALF else _PERMUTED if c.perm else c.pooled  # the input of the region alone
    names = runtime_tensors(c)
    for x in _feeds(x_shape, c.elem, rng):
        try:
            y, *got = session.run(None, {fed: x, **extra})
        except Exception as e:  # noqa: BLE001 - the exporter's own graph crashing at this size is an answer
            return f"onnxruntime fails on it at {size} ({' '.join(str(e).split())[:80]})"
        spec = _spec(c, x_shape, dict(zip(names, got)))
        p.last_sizes = tuple(spec.out_sizes)
        if names and (any(m < 1 for m in spec.out_sizes) or tuple(y.shape) != tuple(spec.output_shape)):
            p.mismatch = (f"at {size} its result is {shape_text(y.shape)}, not of the output size the graph computes "
                          f"({shape_text(spec.output_shape)})")
            return p.mismatch
        check = NodeCheck(c.result)
        compare(spec, x, y, None, check)
        if not check.passed:
            return f"it differs from adaptive average pooling at {size} ({check.detail})"
    return None


def shape_text(shape) -> str:
    return "x".join(map(str, shape))

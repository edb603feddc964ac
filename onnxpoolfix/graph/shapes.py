"""Shapes of the pooled tensors: onnx shape inference, input-shape overrides, symbolic dims.

onnx's shape inference stops at custom-domain nodes, so the leftover pooling nodes' outputs are computed
here (the pooling semantics fix them) and fed back as value_info until every pooled input is known.
Inference runs on a *light* copy of the model whose large initializers are replaced by external-data
stubs (dims and dtype kept, bytes dropped): a 500 MB model is never copied or serialized for it.
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Mapping, Sequence

import onnx
from onnx import TensorProto

from ..errors import ArgumentError, ShapeError, UnsupportedNodeError
from ..spec import SUPPORTED_DTYPES, Dim, InputDim, PoolNode, PoolSpec, RuntimeDim, dtype_name  # noqa: F401  (re-exported)
from ..words import CHECK_SHAPES, INPUT_SHAPES, INPUT_SHAPES_FORM, TRACED_SHAPES, knob_of, ref
from . import NEGATIVE_PERM_HINT, copy_field, default_opset, keep_only, negative_perms
from .shape_values import fold_size_chains

logger = logging.getLogger(__name__)

# Initializers at most this large stay in the light copy: shape inference reads their values
# (Reshape targets, Slice bounds, ...). Larger ones are weights, whose values it never needs.
_KEEP_INITIALIZER_BYTES = 1024

#: Longest pooled axis (input length or output size) lowered. The exact lowerings build per-axis window
#: tables and matrices (output x input entries): a length beyond this is a corrupt dim, not a real model.
MAX_POOLED_LENGTH = 1 << 24

def model_opset(model: onnx.ModelProto) -> int:
    # a model without a default-domain import is opset 1 per the spec; treat as too old
    opset = default_opset(model)
    return 1 if opset is None else opset


def type_dims(type_proto: onnx.TypeProto) -> tuple[int, tuple[Dim, ...] | None]:
    if not type_proto.HasField("tensor_type"):
        return 0, None
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, tuple(int(d.dim_value) if d.HasField("dim_value") else d.dim_param or None
                               for d in tt.shape.dim)


def is_small_tensor(t: TensorProto) -> bool:
    """At most ``_KEEP_INITIALIZER_BYTES`` of data, judged from dims x dtype: ``ByteSize()`` would encode
    the whole tensor (upb keeps no cached size), which costs seconds on a 400 MB weight."""
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return t.ByteSize() <= _KEEP_INITIALIZER_BYTES
    return math.prod(t.dims) * 8 <= _KEEP_INITIALIZER_BYTES  # 8 bytes: the widest common element


def light_copy(model: onnx.ModelProto, stub_location: str = "onnxpoolfix-dropped-for-shape-inference"
               ) -> onnx.ModelProto:
    """A copy for shape inference with the large initializers' bytes dropped (dims and dtype kept): they
    become external-data references to ``stub_location`` (a file that never exists, unless the caller
    makes one for the ONNX checker). No tensor's bytes are read or copied for those."""
    light = onnx.ModelProto()
    graph = model.graph
    # copy everything but the initializers field by field, so the weights are never duplicated
    for field, value in model.ListFields():
        if field.name != "graph":
            copy_field(light, field, value)
    g = light.graph
    for field, value in graph.ListFields():
        if field.name != "initializer":
            copy_field(g, field, value)
    for t in graph.initializer:
        if t.data_location == TensorProto.EXTERNAL or is_small_tensor(t):
            g.initializer.append(t)
        else:
            stub = g.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
            stub.data_location = TensorProto.EXTERNAL
            entry = stub.external_data.add()
            entry.key, entry.value = "location", stub_location
    return light


def validate_input_shape(model: onnx.ModelProto, name: str, dims: Sequence[int], flag: str) -> onnx.ValueInfoProto:
    """``dims`` for graph input ``name`` as ``flag`` (``--input-shape``/``--check-shape``) gave them: the name
    is a graph input, the rank matches, sizes are >= 1 and fixed dims are kept (else an ArgumentError: a
    usage error, exit 2). Returns the input."""
    inputs = {i.name: i for i in model.graph.input}
    init_names = {t.name for t in model.graph.initializer}
    text = f"{flag} {name}:{','.join(map(str, dims))}"
    if name not in inputs or name in init_names:
        real = [n for n in inputs if n not in init_names]
        raise ArgumentError(f"{flag} names '{name}', which is not a graph input (inputs: {', '.join(real)})",
                            ref("input_names"), argument=knob_of(flag), input=name, choices=real)
    vi = inputs[name]
    _, old = type_dims(vi.type)
    if old is not None and len(old) != len(dims):
        raise ArgumentError(f"{text} has rank {len(dims)}; the model's input '{name}' has rank {len(old)}",
                            f"give all {len(old)} dims of '{name}'", argument=knob_of(flag), input=name,
                            rank=len(old))
    for axis, n in enumerate(dims):
        if n < 1:
            raise ArgumentError(f"{flag} {name}: dim {axis} is {n}; sizes must be >= 1", "give positive sizes",
                                argument=knob_of(flag), input=name, axis=axis, value=n)
    for axis, (o, n) in enumerate(zip(old or (), dims)):
        if isinstance(o, int) and o != n:
            raise ArgumentError(f"{flag} {name}: dim {axis} is fixed to {o} in the model, not {n}",
                                f"give {o} for dim {axis}: only symbolic dims take other sizes"
                                + (f" ({flag} checks at sizes the model accepts)" if flag == CHECK_SHAPES else ""),
                                argument=knob_of(flag), input=name, axis=axis, value=n, fixed=o)
    return vi


def validate_shapes(model: onnx.ModelProto, input_shapes=None, traced_shapes=None, check_shapes=()) -> None:
    """:func:`validate_input_shape` of every shape given, as the flag that gives it (before any work)."""
    for flag, shapes in ((INPUT_SHAPES, input_shapes), (TRACED_SHAPES, traced_shapes),
                         *((CHECK_SHAPES, s) for s in check_shapes or ())):
        for name, dims in (shapes or {}).items():
            validate_input_shape(model, name, dims, flag)

def apply_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
    """Bind graph inputs to concrete shapes (``--input-shape``), in place. Validates names and ranks."""
    for name, dims in shapes.items():
        vi = validate_input_shape(model, name, dims, INPUT_SHAPES)
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for n in dims:
            shape.dim.add().dim_value = int(n)


def infer(model: onnx.ModelProto, seeds: Mapping[str, tuple[int, tuple[Dim, ...]]] = {}, *, declared: bool = True
          ) -> dict[str, tuple[int, tuple[Dim, ...] | None]]:
    """Type and shape of every tensor that onnx can infer, with ``seeds`` forced for the given names.

    Declared shapes (value_info, graph outputs) can be stale: an exporter writes the traced shape for a
    tensor whose dims are dynamic, or a tool changed the input size after an earlier inference. So the
    declarations of tensors that standard ops produce are dropped before inference (onnx recomputes them
    from the inputs) and only fill the gaps it leaves: a dim onnx knows, as a value or a symbol, wins over
    the declared one. Outputs of other domains' nodes (aten leftovers, custom ops) keep their declarations,
    which inference cannot derive and needs to get past them. ``declared=False``: onnx's answer alone, for
    claims that rest on a dim being fixed (a dim it leaves unknown stays unknown).
    """
    light = light_copy(model)
    g = light.graph
    declared_types = {vi.name: type_dims(vi.type) for vi in list(g.value_info) + list(g.output)} if declared else {}
    standard = drop_standard_declarations(g)
    seed_types(g, seeds)
    for vi in g.output:
        if vi.name not in seeds and vi.name in standard and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    inferred = onnx_inferred(light)
    if inferred is None:  # a model onnx cannot infer at all still has its declared types
        inferred = light
    out: dict[str, tuple[int, tuple[Dim, ...] | None]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        elem, dims = type_dims(vi.type)
        if elem:
            out[vi.name] = (elem, dims)
    for name, (elem, dims) in declared_types.items():  # the declarations fill what inference left unknown
        if not elem:
            continue
        have = out.get(name)
        if have is None or have[1] is None:
            out[name] = (have[0] if have and have[0] else elem, dims)
        elif dims is not None and len(dims) == len(have[1]):
            out[name] = (have[0], tuple(d if d is not None else dd for d, dd in zip(have[1], dims)))
    out.update({t.name: (t.data_type, tuple(int(d) for d in t.dims)) for t in g.initializer})
    out.update(seeds)
    return out


def drop_standard_declarations(graph: onnx.GraphProto) -> set[str]:
    """Drop (in place) the value_info of standard ops' outputs, which onnx infers itself and an exporter may have
    declared stale; returns those outputs' names (other domains' outputs keep their declarations)."""
    standard = {o for n in graph.node if n.domain in ("", "ai.onnx") for o in n.output if o}
    keep_only(graph.value_info, lambda vi: vi.name not in standard)
    return standard


def infer_at(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]
             ) -> dict[str, tuple[int, tuple[Dim, ...] | None]]:
    """:func:`infer` of a light copy of ``model`` with ``input_shapes`` bound (``model`` unchanged); raises
    as :func:`apply_input_shapes` does for shapes the model refuses."""
    bound = light_copy(model)
    apply_input_shapes(bound, input_shapes)
    return infer(bound)


def seed_types(graph: onnx.GraphProto, seeds: Mapping[str, tuple[int, Sequence[Dim] | None]]) -> None:
    """Force ``seeds``' types on ``graph`` (in place), for shape inference to start from: their value_info
    entries are replaced and graph outputs among them overwritten."""
    keep_only(graph.value_info, lambda vi: vi.name not in seeds)
    graph.value_info.extend(make_value_info(name, elem, dims) for name, (elem, dims) in seeds.items())
    for vi in graph.output:
        if vi.name in seeds:
            vi.CopyFrom(make_value_info(vi.name, *seeds[vi.name]))


def onnx_inferred(light: onnx.ModelProto, what: str = "", *, data_prop: bool = True) -> onnx.ModelProto | None:
    """onnx shape inference as every caller here runs it (lenient, and with data propagation so Shape ->
    Gather -> Concat chains give sizes); None where onnx fails on the model (``what`` says which, in the log)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception as e:  # noqa: BLE001 - what onnx cannot infer stays unknown; each caller says what then
        logger.debug("shape inference%s failed: %s", what, e)
        return None
    return _with_folded_sizes(inferred) if data_prop else inferred


def _with_folded_sizes(inferred: onnx.ModelProto, rounds: int = 3) -> onnx.ModelProto:
    """``inferred`` with the shapes a second inference finds once the size chains over static shapes are
    folded (graph/shape_values.py: onnx propagates none before Shape-15). Nodes unchanged; value_info
    entries replaced where the folded inference sized more of them."""
    best = _entries(inferred)
    produced = {o for n in inferred.graph.node for o in n.output if o}
    current = inferred
    for _ in range(rounds):
        try:
            folded = fold_size_chains(current)
        except Exception as e:  # noqa: BLE001 - an aid to inference only: the first inference stands
            logger.debug("folding size chains failed: %s", e, exc_info=True)
            break
        if folded is None:
            break
        try:
            again = onnx.shape_inference.infer_shapes(folded, check_type=False, strict_mode=False, data_prop=True)
        except Exception as e:  # noqa: BLE001 - the first inference stands
            logger.debug("shape inference after folding size chains failed: %s", e)
            break
        gained = {name: vi for name, vi in _entries(again).items() if name in produced
                  and _known_dims_of(vi) > (_known_dims_of(best[name]) if name in best else -1)}
        if not gained:
            break
        best.update(gained)
        current = again
    if current is inferred:
        return inferred
    out = onnx.ModelProto()
    out.CopyFrom(inferred)
    for field in (out.graph.value_info, out.graph.output):
        for vi in field:
            if vi.name in best:
                vi.CopyFrom(best[vi.name])
    present = {vi.name for vi in list(out.graph.value_info) + list(out.graph.output)}
    out.graph.value_info.extend(best[name] for name in sorted(best) if name not in present and name in produced)
    return out


def _entries(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every declared tensor's entry, the better sized where a name is both value_info and a graph output."""
    out: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        if vi.name not in out or _known_dims_of(vi) > _known_dims_of(out[vi.name]):
            out[vi.name] = vi
    return out


def _known_dims_of(vi: onnx.ValueInfoProto) -> int:
    """Dims with a value in ``vi``'s shape; -1 without a shape."""
    dims = type_dims(vi.type)[1]
    return -1 if dims is None else sum(isinstance(d, int) for d in dims)


def make_value_info(name: str, elem: int, dims: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    tt = vi.type.tensor_type
    tt.elem_type = elem
    if dims is not None:
        shape = tt.shape
        shape.SetInParent()
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
    return vi


def output_shape(node: PoolNode, input_shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """The pooled output shape: leading dims kept, pooled dims = output size (InputDim: the input's own)."""
    r, k = len(input_shape), node.rank
    if r < k + 1:
        raise UnsupportedNodeError(
            f"{node.label}: input has rank {r}; {node.op} needs rank {k + 1} (unbatched) or {k + 2}",
            "the model's shapes are inconsistent with the pooling op; re-export it, or fix the input's "
            f"declared shape (or bind it with {INPUT_SHAPES})")
    for axis, d in enumerate(input_shape):
        if isinstance(d, int) and d < 1:
            raise UnsupportedNodeError(
                f"{node.label}: its input {'x'.join(map(str, input_shape))} has an axis of length {d}",
                "an empty (or negative) axis is a broken declared shape; fix the model's input shape, or bind "
                f"it with {INPUT_SHAPES_FORM}")
        if isinstance(d, int) and axis >= r - k and d > MAX_POOLED_LENGTH:
            raise UnsupportedNodeError(
                f"{node.label}: its input's pooled axis {axis} has length {d}, beyond the {MAX_POOLED_LENGTH} "
                "onnxpoolfix lowers", "check the model's declared input shape (a corrupt dim?), or bind it "
                f"with {INPUT_SHAPES_FORM}")
    for size in node.output_size:
        if isinstance(size, int) and size > MAX_POOLED_LENGTH:
            raise UnsupportedNodeError(
                f"{node.label}: output size {size} is beyond the {MAX_POOLED_LENGTH} onnxpoolfix lowers",
                "check the output size constant (a corrupt value?); re-export with the intended size")
    out = list(input_shape[: r - k])
    for j, size in enumerate(node.output_size):
        axis = r - k + j
        if isinstance(size, InputDim):
            a = size.axis + r if size.axis < 0 else size.axis
            if a != axis:
                raise UnsupportedNodeError(
                    f"{node.label}: output size entry {j} is the input's dim {size.axis}, not the pooled axis {axis}",
                    "only 'same as the input' (None in torch) along the pooled axis itself is supported; "
                    "re-export with a fixed output size")
            out.append(input_shape[axis])
        elif isinstance(size, RuntimeDim):  # computed by the graph at run time: a symbolic dim of its own
            out.append(str(size))
        else:
            out.append(size)
    return tuple(out)


def typed_spec(n: PoolNode, elem: int, dims: Sequence[Dim], *, opset: int, target: str,
               seeds: dict[str, tuple[int, tuple[Dim, ...]]]) -> PoolSpec:
    """The spec of leftover ``n`` whose input is ``elem`` x ``dims``; its outputs' types are added to
    ``seeds`` (the next round of inference starts from them)."""
    if elem not in SUPPORTED_DTYPES:
        raise UnsupportedNodeError(f"{n.label}: input dtype {dtype_name(elem)} is not supported",
                                   "adaptive pooling takes float32, float16, bfloat16 or float64")
    spec = PoolSpec(n, tuple(dims), output_shape(n, dims), elem, opset, target)
    seeds.update(spec.output_types)
    return spec


def resolve_specs(model: onnx.ModelProto, nodes: Sequence[PoolNode], *, opset: int, target: str,
                  visible: Callable | None = None, seeds: dict | None = None) -> list[PoolSpec]:
    """Shapes and dtypes for every node: inference, then each node's output seeded, until all are known.
    Nodes in bodies (:mod:`onnxpoolfix.frontends.bodies`): ``visible(seeds)`` infers the model with ``seeds``
    (``{body path: {name: type}}``, the first ones given) and returns ``path -> {name: type}`` seen there."""
    seeds = {} if seeds is None else seeds
    visible = visible or (lambda s: (lambda _, info=infer(model, s.get((), {})): info))
    specs: dict[int, PoolSpec] = {}
    for _ in range(len(nodes) + 1):
        info = visible(seeds)
        progressed = False
        # a pool reading another pool's output waits for that one's shape (its declaration may be stale)
        pending = {o for i, m in enumerate(nodes) if i not in specs for o in (m.output, m.indices_output) if o}
        for i, n in enumerate(nodes):
            if i in specs or n.input in pending:
                continue
            elem, dims = info(n.body).get(n.input, (0, None))
            if dims is None or not elem:
                continue
            specs[i] = typed_spec(n, elem, dims, opset=opset, target=target, seeds=seeds.setdefault(n.body, {}))
            progressed = True
        if len(specs) == len(nodes) or not progressed:
            break
    missing = [n for i, n in enumerate(nodes) if i not in specs]
    if missing:
        n = missing[0]
        static = not n.body and all(d is not None and not isinstance(d, str) for i in model.graph.input
                                    for d in (type_dims(i.type)[1] or (None,)))
        raise ShapeError(  # every input static already: binding them again is no advice
            f"{n.label}{' (inside an If/Loop/Scan body)' if n.body else ''}: the shape of its input '{n.input}' "
            "cannot be inferred",
            NEGATIVE_PERM_HINT if negative_perms(model.graph) else
            f"give the graph inputs' shapes with {INPUT_SHAPES_FORM}" if not static else
            "onnx's shape inference cannot follow the graph to it although every input's shape is known (an op "
            "of another domain, a Loop's result changing shape across iterations): such a pool is not supported")
    return [specs[i] for i in range(len(nodes))]

"""The ATen front end: PyTorch's leftover ``adaptive_*_pool*d`` nodes (:mod:`.leftovers` finds them),
with their shapes resolved (:mod:`onnxpoolfix.graph.shapes`), under the caller's ``--input-shape`` binding."""
from __future__ import annotations

import copy
from collections.abc import Sequence

import onnx

from ..graph.shapes import apply_input_shapes, drop_standard_declarations, model_opset, resolve_specs
from ..graph.size_precision import size_precision_error
from ..graph.size_subgraph import fold_static_sizes
from ..report import WarningNote
from ..spec import PoolSpec
from .base import FrontEndResult, PlanOptions
from .bodies import has_nested_leftovers, type_bodies, walk
from .leftovers import find_pool_nodes


def leftover_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()) -> FrontEndResult:
    """Every top-level leftover as a spec. Binds ``options.input_shapes`` in ``model`` where it is kept."""
    opset = model_opset(model)
    nodes = find_pool_nodes(model.graph, opset)
    if not nodes:
        return FrontEndResult()
    if has_nested_leftovers(model):
        type_bodies(model)  # a top-level leftover may pool an If's result: torch leaves it untyped
    specs, notes = bind_and_resolve(model, nodes, opset=opset, target=options.target,
                                    input_shapes=options.input_shapes, keep_input_shapes=options.keep_input_shapes)
    size_precision_error(model, specs)  # a computed size in float32 that torch computes otherwise: refused
    return FrontEndResult(fold_static_sizes(model, specs), notes)


def bind_and_resolve(model, nodes, *, opset, target, input_shapes, keep_input_shapes
                     ) -> tuple[list[PoolSpec], list[str]]:
    if not input_shapes:
        return resolve_specs(model, nodes, opset=opset, target=target), []
    if keep_input_shapes:
        bind_in_out(model, input_shapes)
        return resolve_specs(model, nodes, opset=opset, target=target), ["input shapes bound as given"]
    originals = {i.name: copy.deepcopy(i) for i in model.graph.input}
    apply_input_shapes(model, input_shapes)
    bound = resolve_specs(model, nodes, opset=opset, target=target)
    for i in model.graph.input:  # back to the original signature; keep the binding only where needed
        i.CopyFrom(originals[i.name])
    try:
        free = resolve_specs(model, nodes, opset=opset, target=target)
    except Exception:  # without the binding some input shape is not even inferable
        free = [None] * len(nodes)
    specs = [f if f is not None and f.static else b for f, b in zip(free, bound)]
    kept = any(f is None or not f.static for f in free)
    if kept:
        bind_in_out(model, input_shapes)
    return specs, [kept_note()] if kept else []


def kept_note() -> WarningNote:
    """The note of a binding kept in OUT (this front end's and the dynamo front end's)."""
    return WarningNote("input shapes kept as bound: a pooled axis was symbolic and the static lowering holds only "
                       "at the bound size", "input-shapes-kept")


def bind_in_out(model: onnx.ModelProto, input_shapes) -> None:
    """Bind the inputs in the model OUT is made of, dropping the shapes the exporter declared for standard ops'
    outputs: torch's, at the traced size, which a bound size other than it contradicts (onnxruntime refused OUT
    where an If the patch wrote reads such a tensor: "Can't merge shape info", review22 case 243)."""
    apply_input_shapes(model, input_shapes)
    for g in [model.graph] + [body for _, body, _ in walk(model.graph)]:
        standard = drop_standard_declarations(g)
        for vi in g.output:  # (the graph outputs too: torch declares a dim no dynamic_axes names at its trace)
            if vi.name in standard and vi.type.HasField("tensor_type"):
                if g is model.graph and vi.type.tensor_type.HasField("shape"):  # the checker wants the top level's
                    for d in vi.type.tensor_type.shape.dim:  # shapes: its rank kept, every dim unknown (review61)
                        d.Clear()
                else:
                    vi.type.tensor_type.ClearField("shape")

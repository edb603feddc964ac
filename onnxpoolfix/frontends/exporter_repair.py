"""The exporter's own pooling nodes that cannot run as written (an unbatched input's kernel rank, float64
pools onnxruntime has no kernel for), repaired by default: what is repaired, what is left and why is
docs/lowerings.md, "Exporter pools that cannot run as written". Each becomes a spec like a leftover's;
``plan_model`` never keeps or groups it, and its ``why`` starts with ``repaired: <what was wrong>``
(:attr:`FrontEndResult.repairs`). Exports of each case: tests/frontends/test_exporter_repair.py."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import onnx
from onnx import TensorProto

from ..graph import read_names
from ..graph.shapes import Dim, PoolSpec, infer, light_copy, make_value_info, model_opset
from ..lowering.base import no_float64_kernel
from ..report import WarningNote
from .base import REPAIRED, FrontEndResult, PlanOptions
from .exporter_pools import adaptive_output_sizes, exporter_pool_spec, standard_pools

logger = logging.getLogger(__name__)

_KIND = {"AveragePool": "avg", "GlobalAveragePool": "avg", "MaxPool": "max", "GlobalMaxPool": "max"}

__all__ = ["REPAIRED", "find_broken_exporter_pools", "broken_exporter_pool_specs", "as_repaired"]


def find_broken_exporter_pools(model: onnx.ModelProto,
                               info: Mapping[str, tuple[int, tuple[Dim, ...] | None]], *,
                               opset: int, target: str, read: set[str]) -> list[tuple[PoolSpec, str]]:
    """(spec, what is wrong with the node) for every top-level pooling node that cannot run as written and
    stands for an adaptive pool the graph fully describes (see the module doc)."""
    found = []
    for index, node, kind, elem, dims in standard_pools(model, info, _KIND, read):
        k, wrong = _pooled_rank(node, len(dims))
        if k is None:
            continue
        no_kernel = (target != "tensorrt" and elem == TensorProto.DOUBLE
                     and no_float64_kernel([node.op_type], opset))
        if wrong is None and no_kernel:
            wrong = f"onnxruntime has no float64 kernel for {node.op_type}"
        if wrong is None:
            continue  # valid and runnable: only optimize_exporter_pools touches it
        sizes = adaptive_output_sizes(node, dims[len(dims) - k:])
        if sizes is None:
            logger.debug("%s: %s, but its windows are not adaptive ones: left as written", node.name, wrong)
            continue
        found.append((exporter_pool_spec(node, index, kind, dims, sizes, elem, opset, target), wrong))
    return found


def _pooled_rank(node: onnx.NodeProto, rank: int) -> tuple[int | None, str | None]:
    """(k, what is wrong) where the node pools its last k axes; (None, None) where that cannot be read."""
    if node.op_type.startswith("Global"):
        if rank >= 3:
            return rank - 2, None
        if rank == 2:  # (C, L): torch pooled L
            return 1, f"the exporter's {node.op_type} of a rank-2 (unbatched) input, which ONNX pooling rejects"
        return None, None
    kernel = next((list(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "kernel_shape"), [])
    if not kernel or len(kernel) >= rank:  # an empty kernel holds no size (the (C, L) AveragePool)
        return None, None
    if len(kernel) == rank - 2:
        return len(kernel), None
    return len(kernel), (f"the exporter's {node.op_type} with a rank-{len(kernel)} kernel on a rank-{rank} "
                         f"(unbatched) input, which ONNX pooling rejects")


def broken_exporter_pool_specs(model: onnx.ModelProto, options: PlanOptions, found: Sequence[PoolSpec] = ()
                               ) -> FrontEndResult:
    """The exporter's pools that cannot run as written, each with its ``repairs`` entry (what is wrong).
    Always on. The leftovers ``found`` before seed shape inference (their outputs' shapes are ours to give)."""
    if not any(n.op_type in _KIND for n in model.graph.node):
        return FrontEndResult()  # no pooling node at all: no inference needed
    info = infer(model, {s.node.output: (s.dtype, s.output_shape) for s in found})
    read = read_names(model.graph) | {o.name for o in model.graph.output}
    broken = find_broken_exporter_pools(model, info, opset=model_opset(model), target=options.target, read=read)
    notes = []
    if options.target == "tensorrt":  # TensorRT takes them (as FP32); onnxruntime, and so the check, cannot
        kept = [node.name or node.op_type for _, node, _, elem, _ in standard_pools(model, info, _KIND, read)
                if elem == TensorProto.DOUBLE and no_float64_kernel([node.op_type], model_opset(model))]
        notes += [WarningNote(f"the exporter's float64 pooling node(s) {', '.join(kept)} stay as written for "
                              "TensorRT, which computes them in FP32: onnxruntime has no float64 kernel for them, "
                              "so OUT does not run there (the default target replaces them)", "float64-pool-kept",
                              nodes=kept)] if kept else []
    return FrontEndResult([s for s, _ in broken], notes=notes,
                          repairs={s.node.index: wrong for s, wrong in broken})


def as_repaired(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A light copy of ``model`` (no weights' bytes) with each pool this front end repairs swapped for an opaque
    node typed as its repair will be: what the input check judges where the ONNX checker rejects such a pool
    (a kernel of the pooling rank on an unbatched input). None where there is none to repair."""
    try:
        info = infer(model)
    except Exception:  # noqa: BLE001 - no inference, no repair to judge by
        return None
    read = read_names(model.graph) | {o.name for o in model.graph.output}
    broken = find_broken_exporter_pools(model, info, opset=model_opset(model), target="onnxruntime", read=read)
    broken = [s for s, wrong in broken if "rejects" in wrong]  # the invalid ones (not only unrunnable)
    if not broken:
        return None
    view = light_copy(model)
    for s in broken:
        node = view.graph.node[s.node.index]
        opaque = onnx.helper.make_node(node.op_type, list(node.input), list(node.output), name=node.name,
                                       domain="onnxpoolfix.repaired")
        node.CopyFrom(opaque)
        view.graph.value_info.append(make_value_info(s.node.output, s.dtype, s.output_shape))
    view.opset_import.append(onnx.helper.make_opsetid("onnxpoolfix.repaired", 1))
    return view

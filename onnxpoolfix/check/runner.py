"""The proof: run the patched model in onnxruntime and compare every replaced node with the reference.

For each replaced node the check fetches the node's ACTUAL input and output tensors from the patched
graph (the outputs of a cut of it that computes them, :mod:`.cut`) and compares the output with
:mod:`onnxpoolfix.reference` applied to that input. So the comparison covers the emitted subgraph only,
whatever the rest of the model does, and needs no torch. Tolerances: :mod:`.compare`.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from math import prod
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from .. import reference
from ..errors import CheckFailedError
from ..graph.emit import EMITTED_BY, Emitter
from ..graph.shapes import PoolSpec, make_value_info
from ..io import has_external_data
from ..progress import each, shapes_detail
from ..sessions import ort_session, ort_value
from ..spec import RuntimeDim, bind_runtime_sizes
from ..words import CHECK_SHAPES, CHECK_SHAPES_FORM, NO_CHECK
from .compare import NodeCheck, compare, out_sizes, torch_size
from .cut import cut_bytes, cut_nodes
from .feeds import graph_inputs, random_feed

logger = logging.getLogger(__name__)


@dataclass
class ExtraRun:
    """One more run of the check's session, on ``feed``, fetching ``names`` into ``got`` (the differential check's
    run of OUT: :mod:`.differential`), so that OUT's cut is built and loaded once."""

    feed: dict
    names: list[str]
    got: dict = field(default_factory=dict)


def check_patched(model: onnx.ModelProto, specs: Sequence[PoolSpec], *,
                  input_shapes: Sequence[Mapping[str, Sequence[int]]] = ({},),
                  model_dir: str | None = None, seed: int = 0, extra: ExtraRun | None = None) -> dict[int, NodeCheck]:
    """Run ``model`` once per entry of ``input_shapes`` and compare every replaced node.

    The session runs the cut of ``model`` computing the fetched tensors (bfloat16 ones through an exact Cast to
    float32, since numpy has no bfloat16); ``model`` is not modified. ``model_dir`` is where its external data
    lives, if any. ``extra``: one more run on its feed (after the checked sizes).
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
    outputs = {}  # the graph outputs of the cut the session runs, by name
    for name, elem in types.items():
        if name in inputs:
            continue
        if elem == TensorProto.BFLOAT16:
            fetch[name], elem = Emitter(name, taken, 0).fresh("onnxpoolfix_check_float32"), TensorProto.FLOAT
            added_nodes.append(onnx.helper.make_node("Cast", [name], [fetch[name]], to=TensorProto.FLOAT))
        else:
            fetch[name] = name
        outputs[fetch[name]] = onnx.helper.make_tensor_value_info(fetch[name], elem, None)
    for name in runtime_size_tensors(specs):  # output sizes the graph computes: read as int64 at each run
        if name not in fetch:
            fetch[name] = Emitter(name, taken, 0).fresh("onnxpoolfix_check_size")
            added_nodes.append(onnx.helper.make_node("Cast", [name], [fetch[name]], to=TensorProto.INT64))
            outputs[fetch[name]] = onnx.helper.make_tensor_value_info(fetch[name], TensorProto.INT64, None)
    for name in extra.names if extra else ():
        outputs.setdefault(name, onnx.ValueInfoProto(name=name))
    after = _after_frozen(model, specs)
    for name in sorted(after & {o.name for o in model.graph.output}):  # run too: see _after_frozen
        outputs.setdefault(name, onnx.ValueInfoProto(name=name))
    try:  # the part of the model computing what is fetched (check/cut.py): the layers below are not run
        sess = ort_session(cut_bytes(model, list(outputs.values()), added_nodes), model_dir)
    except Exception as e:  # onnxruntime's own words, on one line
        hint = ("the model's weights are in external data that onnxruntime looked for beside the current "
                "folder: pass model_dir= (the folder of the .onnx file)" if model_dir is None and
                has_external_data(model) else
                f"if the model holds other ops onnxruntime lacks, skip the check with {NO_CHECK}")
        raise CheckFailedError(f"onnxruntime cannot load the patched model: {' '.join(str(e).split())[:300]}",
                               hint) from None
    session_inputs = {i.name for i in sess.get_inputs()}
    checks = {s.node.index: NodeCheck(s.node.name) for s in specs}  # names may repeat
    alone: dict[int, object] = {}  # sessions of subgraphs run alone on a fetched half-precision input
    out_names = list(dict.fromkeys(fetch.values()))
    for shapes in each("check", input_shapes, shapes_detail):
        feed = random_feed(model, shapes, rng)
        ort_feed = {k: ort_value(v) for k, v in feed.items() if k in session_inputs}
        feed = {k: v.astype(np.float32) if v.dtype.name == "bfloat16" else v  # exact: bfloat16 fits float32
                for k, v in feed.items()}
        shapes_txt = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}" for k, v in feed.items())
        try:
            results = sess.run_with_ort_values(out_names, ort_feed)
        except Exception as e:
            node = _files_node(model, str(e))
            if node is not None and after & set(node.input):
                raise CheckFailedError(
                    f"onnxruntime failed to run the patched model at {shapes_txt} in '{node.name}', a node after the "
                    "replaced dynamo pool: the export computed its shape at the traced size, from that pool frozen "
                    "there (a flatten's length, say) or from a dim torch made static (the batch, say: torch 2.9 "
                    "freezes a batch traced at 1), which replacing the pool does not change, or the model itself "
                    "does not run at that size (a map too small for its layers: BEiT at 16x16, say): "
                    f"{' '.join(str(e).split())[:200]}",
                    f"where the model runs at other sizes only, choose them with {CHECK_SHAPES}; otherwise export "
                    "through onnxpoolfix.export, which keeps every adaptive pool's output size",
                    after_frozen=node.name, shapes={k: list(v.shape) for k, v in feed.items()}) from None
            # the input file's own node, unless it reads a replacement's result (then it is ours too)
            emitted = {o for n in model.graph.node if n.doc_string.startswith(EMITTED_BY) for o in n.output}
            theirs = node.name if node is not None and not emitted & set(node.input) else None
            where = f" in '{theirs}', a node of the input file, not one onnxpoolfix wrote" if theirs else ""
            raise CheckFailedError(
                f"onnxruntime failed to run the patched model at {shapes_txt}{where}: "
                f"{' '.join(str(e).split())[:300]}",
                ("the input file fails at that size too (its export does not take it): " if theirs else "")
                + f"choose other check sizes with {CHECK_SHAPES}, or skip the check with {NO_CHECK}") from None
        got = {n: r.numpy() for n, r in zip(out_names, results)}
        values = {name: got[out] for name, out in fetch.items()}
        values.update(feed)
        for s in specs:
            if 0 in values[s.node.input].shape[values[s.node.input].ndim - s.k:]:  # no window to compare
                raise CheckFailedError(
                    f"{s.node.label}: its input is empty ({'x'.join(map(str, values[s.node.input].shape))}) "
                    f"at {shapes_txt}: adaptive pooling has no windows there to check",
                    f"choose larger sizes with {CHECK_SHAPES_FORM}, or skip the check with {NO_CHECK}")
        for s in specs:
            x, y = values[s.node.input], values[s.node.output]
            idx = values.get(s.node.indices_output) if s.node.indices_output else None
            c = checks[s.node.index]
            bound = bind_runtime_sizes(s, values)  # an output size the graph computes: this run's value
            for n, size, m in zip(x.shape[x.ndim - s.k:], s.node.output_size, bound.node.output_size):
                if isinstance(size, RuntimeDim):  # which kind that output length took at this run
                    c.size_kinds.add("downsampling" if m < n else "upsampling" if m > n else "equal")
            before = (c.max_error, c.tolerance, c.passed, c.detail)
            compare(bound, x, y, idx, c)
            if before[2] and not c.passed and s.dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
                _half_input(model, bound, x, y, idx, c, before, alone)
    if extra is not None:
        feed = {k: ort_value(v) for k, v in extra.feed.items() if k in session_inputs}
        extra.got = {n: r.numpy() for n, r in zip(extra.names, sess.run_with_ort_values(extra.names, feed))}
    for s in specs:  # each replaced subgraph alone, on inputs made to expose what random data rarely does
        check = checks[s.node.index]
        if check.passed and check.shapes:
            _check_isolated(model, s, check.shapes[0], check, rng)
    return checks


def _after_frozen(model: onnx.ModelProto, specs: Sequence[PoolSpec]) -> set[str]:
    """The tensors computed after a replaced dynamo pool: under symbolic sizes the dynamo exporter wrote the
    layers after it for the pool frozen at the traced size (a flatten's length C * (H // 4) * (W // 4)), so the
    check runs them too at its sizes (they failed there, while the pool itself checked right; at a static size
    they cost one run). Empty for every other file."""
    reached = {o for s in specs if s.node.encoding == "dynamo" for o in (s.node.output, s.node.indices_output) if o}
    for n in model.graph.node:  # graph order is topological
        if reached & set(n.input):
            reached.update(o for o in n.output if o)
    return reached


def _files_node(model: onnx.ModelProto, error: str) -> onnx.NodeProto | None:
    """The node onnxruntime names in ``error`` ("... running Add node. Name:'node_add_3' ...") where it is one
    of the input file's own (not written by onnxpoolfix), else None."""
    found = re.search(r"Name:'([^']*)'", error)
    node = next((n for n in model.graph.node if found and n.name == found.group(1)), None)
    return None if node is None or node.doc_string.startswith(EMITTED_BY) else node


def runtime_size_tensors(specs: Sequence[PoolSpec]) -> list[str]:
    """The size tensors the graph computes at run time that some replaced node reads."""
    return list(dict.fromkeys(m.tensor for s in specs for m in s.node.output_size if isinstance(m, RuntimeDim)))


def _half_input(model, spec: PoolSpec, x, y, idx, check: NodeCheck, before: tuple, sessions: dict) -> None:
    """A float16/bfloat16 node that failed in the model: is it the replacement, or its input (onnxruntime feeds
    the subgraph its input before rounding: docs/exactness.md, "float16/bfloat16 in a whole model")? Run alone
    on the fetched tensor and not exact there, the failure stands, said so; exact there, the in-model output is
    compared again allowing the input's rounding (averages; :func:`compare.tolerance`), and what still fails is
    marked ``upstream`` (not the replacement's doing)."""
    if spec.node.index not in sessions:
        isolated = isolate(model, spec)
        try:
            sessions[spec.node.index] = None if isolated is None else (ort_session(isolated, None),
                                                                       [o.name for o in isolated.graph.output])
        except Exception:  # noqa: BLE001 - alone it does not load: the in-model failure stands as it is
            logger.debug("%s: its subgraph alone does not load", spec.node.label, exc_info=True)
            sessions[spec.node.index] = None
    if sessions[spec.node.index] is None:
        return  # it reads other tensors: only the in-model comparison says anything
    sess, names = sessions[spec.node.index]
    got = run_alone(sess, names, spec, x)[2]
    by_itself = NodeCheck(check.name)
    compare(spec, x, got[0], got[1] if len(got) > 1 else None, by_itself)
    if not by_itself.passed:
        check.detail += f"; run alone on the same input too: {by_itself.detail}"
        return
    check.max_error, check.tolerance, check.passed, check.detail = before
    if spec.kind == "avg":
        compare(spec, x, y, idx, check, input_rounding=True)
        if check.passed:
            check.input_rounding += 1
            return
    else:
        compare(spec, x, y, idx, check)
    check.upstream = True
    check.detail += (" (in the model only: the replaced subgraph alone is exact on this input, so onnxruntime "
                     "feeds it other values there)")


#: pooled inputs up to this many elements also get the structured inputs (each a run and a reference)
STRUCTURED_MAX_ELEMENTS = 1 << 22


def isolate(model: onnx.ModelProto, spec: PoolSpec, *, feed_sizes: bool = False, graph: onnx.GraphProto | None = None
            ) -> onnx.ModelProto | None:
    """The nodes computing ``spec``'s output (and indices) from its input alone, as a model of their own; None
    when they read anything else (then only the in-model check covers the node). ``feed_sizes``: a runtime
    output size the cut does not compute (a body leftover's, computed in an outer graph) is an int64 input of
    the model instead (the lowering reads it through a Cast to int64), which the caller feeds: every runtime
    size is then fed, the graph's own arithmetic for it (torch's, not the replacement) left out."""
    g = model.graph if graph is None else graph  # (a body of model's)
    inits = {t.name: t for t in g.initializer}
    outs = [spec.node.output] + ([spec.node.indices_output] if spec.node.indices_output else [])
    sizes = runtime_size_tensors([spec])
    picked, reads = cut_nodes(g, outs, stop=[spec.node.input] + (sizes if feed_sizes else []))
    made = {o for k in picked for o in g.node[k].output}
    fed = [name for name in sizes if feed_sizes and name not in made]
    used = reads - {spec.node.input} - set(fed)
    if any(name not in inits or inits[name].data_location == TensorProto.EXTERNAL for name in used):
        return None
    if any(name not in made and name not in fed for name in sizes):  # a runtime size neither computed nor fed
        return None
    nodes = [g.node[k] for k in picked]  # graph order is topological
    size_outs = []
    for name in sizes:
        nodes.append(onnx.helper.make_node("Cast", [name], [f"onnxpoolfix_isolated_size_{len(size_outs)}"],
                                           to=TensorProto.INT64))
        size_outs.append(make_value_info(nodes[-1].output[0], TensorProto.INT64, None))
    y, y_type = spec.node.output, spec.dtype
    if y_type == TensorProto.BFLOAT16:  # fetched through an exact Cast (numpy has no bfloat16)
        y, y_type = "onnxpoolfix_isolated_float32", TensorProto.FLOAT
        nodes.append(onnx.helper.make_node("Cast", [spec.node.output], [y], to=TensorProto.FLOAT))
    graph = onnx.helper.make_graph(
        nodes, "isolated", [make_value_info(spec.node.input, spec.dtype, None)]
        + [make_value_info(name, TensorProto.INT64, None) for name in fed],
        [make_value_info(y, y_type, None)]
        + ([make_value_info(spec.node.indices_output, TensorProto.INT64, None)] if spec.node.indices_output else [])
        + size_outs, initializer=[inits[n] for n in sorted(used)])
    isolated = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    isolated.ir_version = model.ir_version
    return isolated


def structured_inputs(spec: PoolSpec, shape: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    """Ramps along each pooled axis (a window one element off moves an average by half a step, and moves a
    max's value and index); for max also falling ramps (the window starts) and NaN/-inf: NaN scattered,
    one whole window of -inf and a band of -inf (the exact NaN/-inf path, which finite inputs never take);
    for averages NaN, +inf and -inf scattered (kept in their windows: the MatMul guard's else-branch, and the
    pooling ops and reductions of the portable and tensorrt targets)."""
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
    if spec.kind == "max":  # (below opset 9 every max lowering is refused: no IsNaN/Where for the guard)
        x = rng.standard_normal(shape).astype(dt)
        x[rng.random(shape) < 0.02] = np.nan
        first = tuple(slice(0, -((-n) // m)) for n, m in zip(shape[rank - k:], out_sizes(spec, x)))
        x[(Ellipsis,) + first] = -np.inf  # (at least) the first window of every plane: all -inf
        band = [slice(None)] * rank
        band[rank - 1] = slice(shape[-1] // 2, shape[-1] // 2 + 2)
        x[tuple(band)] = -np.inf
        out.append(x)
    if spec.kind == "avg":
        x = rng.standard_normal(shape).astype(dt)
        r = rng.random(shape)
        x[r < 0.02] = np.nan
        x[(r >= 0.02) & (r < 0.04)] = np.inf
        x[(r >= 0.04) & (r < 0.06)] = -np.inf
        out.append(x)
    return out


def run_alone(sess, names, spec: PoolSpec, x: np.ndarray, fed: dict[str, np.ndarray] | None = None) -> tuple:
    """One run of a replacement alone (``isolate``'s model, ``names`` its outputs) on ``x``, ``fed`` the runtime
    output sizes it takes as inputs: ``x`` as the reference reads it (bfloat16: rounded, as float32), ``spec``
    bound to the output sizes of that run, and the outputs without those sizes (fetched last)."""
    feed = x
    if spec.dtype == TensorProto.BFLOAT16:
        import ml_dtypes

        feed = x.astype(ml_dtypes.bfloat16)
        x = feed.astype(np.float32)
    feeds = {spec.node.input: ort_value(feed), **{k: ort_value(v) for k, v in (fed or {}).items()}}
    got = [r.numpy() for r in sess.run_with_ort_values(names, feeds)]
    sizes = runtime_size_tensors([spec])
    return x, bind_runtime_sizes(spec, dict(zip(sizes, got[len(got) - len(sizes):]))), got[:len(got) - len(sizes)]


def _check_isolated(model, spec: PoolSpec, shape: tuple[int, ...], check: NodeCheck, rng) -> None:
    if prod(shape) > STRUCTURED_MAX_ELEMENTS:
        return
    isolated = isolate(model, spec)
    if isolated is None:
        logger.debug("%s: its subgraph reads other tensors; checked in the model only", spec.node.label)
        return
    try:
        sess = ort_session(isolated, None)
    except Exception as e:  # noqa: BLE001 - the in-model check ran it; say why here if this differs
        check.passed, check.detail = False, f"its subgraph alone does not load: {' '.join(str(e).split())[:200]}"
        return
    names = [o.name for o in isolated.graph.output]
    sizes = runtime_size_tensors([spec])
    if sizes:  # the runtime output size at this shape (it depends on the size only), for the -inf windows
        probe = structured_inputs(replace(spec, node=replace(spec.node, kind="avg")), shape, rng)[0]
        inputs = structured_inputs(run_alone(sess, names, spec, probe)[1], shape, rng)
    else:
        inputs = structured_inputs(spec, shape, rng)
    if spec.node.indices_output and not spec.runtime_sizes and \
            prod(reference.resolve_output_size(shape, torch_size(spec))) > 4096:
        inputs = inputs[-1:]  # the reference's indices loop over windows in Python: the NaN/-inf input only
    for x in inputs:
        x, bound, got = run_alone(sess, names, spec, x)
        compare(bound, x, got[0], got[1] if len(got) > 1 else None, check)
        check.structured += 1
        if not check.passed:
            check.detail += " (structured input, the subgraph alone)"
            return

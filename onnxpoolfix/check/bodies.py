"""The check of leftovers replaced inside If/Loop/Scan bodies: a random
input picks one branch only, so each replaced subgraph is run ALONE, isolated from its body, on random and
structured inputs at its own shape (for symbolic pooled axes: sizes aimed at uniform, non-uniform and
upsampling windows) and compared with the reference. ``patched`` arguments are the
:class:`onnxpoolfix.rewrite.model.AppliedNode` records of those leftovers (spec, ...), ``rows`` their
report rows, filled in here."""
from __future__ import annotations

from math import prod
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import CheckFailedError
from ..graph import graph_holding
from ..report import NodeReport, Note, PatchReport
from ..sessions import ort_session
from ..spec import PoolSpec, RuntimeDim, bind_runtime_sizes
from ..words import NO_CHECK, STRATEGY, VERBOSE
from . import foreign_ops
from .compare import NodeCheck, compare
from .feeds import graph_inputs, random_feed, symbolic_inputs
from .runner import STRUCTURED_MAX_ELEMENTS, isolate, run_alone, structured_inputs
from .sizes import WINDOW_KINDS, window_targets


def check_in_bodies(model: onnx.ModelProto, patched: Sequence, rows: Sequence[NodeReport], report: PatchReport, *,
                    model_dir, seed) -> None:
    """The leftovers replaced inside If/Loop/Scan bodies: each replaced subgraph alone (a random input takes
    one branch only), and the whole model loaded once by onnxruntime. Fills ``rows`` and ``report``."""
    try:
        session = ort_session(model, model_dir)
    except Exception as e:  # noqa: BLE001 - onnxruntime's words
        raise CheckFailedError(f"onnxruntime cannot load the patched model: {' '.join(str(e).split())[:300]}",
                               f"skip the check with {NO_CHECK} to write OUT anyway") from None
    try:
        check_nested(model, patched, rows, seed=seed)
    except CheckFailedError as e:
        report.checked, report.check_passed = True, False
        e.report = report
        raise
    whole = _run_whole(model, session, seed)
    report.checked = True
    report.check_passed = report.check_passed is not False
    shapes = sum(len(r.checked_shapes) for r in rows)
    note = (f"{len(rows)} leftover(s) inside If/Loop/Scan bodies replaced and each replaced subgraph run alone "
            f"(random and structured inputs, {shapes} shape(s) in all)"
            + ("; the whole model run once at its static input sizes" if whole else ""))
    report.notes.append(Note(note, "bodies-checked", subgraphs=len(rows)))


def _run_whole(model: onnx.ModelProto, sess, seed: int) -> bool:
    """Run the whole patched model once where every graph input is static and every op has a kernel: a body's
    replacement run alone sees its body's declared shapes, the loop its passes' (a scripted loop carrying a
    pooled tensor changes its shape after the first pass). ``sess``: the model's session, loaded once. Refuses
    (exit 5) where onnxruntime fails; False where not run."""
    if symbolic_inputs(model) or foreign_ops(model):
        return False
    feed = random_feed(model, {}, np.random.default_rng(seed))
    try:
        sess.run(None, {i.name: feed[i.name] for i in graph_inputs(model)})
    except Exception as e:  # noqa: BLE001 - onnxruntime's words
        raise CheckFailedError(f"onnxruntime fails running the patched model at its input sizes: "
                               f"{' '.join(str(e).split())[:300]}",
                               f"this is a bug in onnxpoolfix where the input file runs there: please report it "
                               f"with the model {VERBOSE}; skip the check with {NO_CHECK} to write OUT anyway"
                               ) from None
    return True


#: (input length, output length) per window kind (uniform, non-uniform, upsampling) for an output length the
#: graph computes at run time (a :class:`~onnxpoolfix.spec.RuntimeDim`), fed to the replacement alone
RUNTIME_WINDOWS = ((6, 3), (7, 3), (3, 5))


def check_shapes(spec: PoolSpec) -> list[tuple[tuple[int, ...], dict[str, np.ndarray]]]:
    """Input shapes to run a replaced body subgraph alone at, each with the runtime output sizes to feed
    (the size tensors by name, int64; a body leftover's is computed outside the body): its own shape when
    static (symbolic leading dims as 2: planes mixed up show), else sizes aimed at uniform, non-uniform and
    upsampling windows, each kind on every symbolic pooled axis in turn."""
    lead = tuple(d if isinstance(d, int) else 2 for d in spec.lead)
    if spec.static:
        return [(lead + tuple(spec.in_sizes), {})]
    runs: list[tuple[tuple[int, ...], dict[str, np.ndarray]]] = []
    seen: list = []  # (shape, sizes) of the runs so far
    for r in range(len(WINDOW_KINDS)):
        pooled, sizes = [], {}
        for j, (n, m, size) in enumerate(zip(spec.in_sizes, spec.out_sizes, spec.node.output_size)):
            kind = (r + j) % len(WINDOW_KINDS)
            if isinstance(size, RuntimeDim):  # a static length of another size gets an m of that kind for it
                n, m = RUNTIME_WINDOWS[kind] if n in (None, RUNTIME_WINDOWS[kind][0]) or isinstance(n, str) else \
                    (n, (max(1, n // 2), max(1, n - 2), n + 2)[kind])
                length = max(s.index for s in spec.node.output_size if isinstance(s, RuntimeDim)
                             and s.tensor == size.tensor) + 1
                t = sizes.setdefault(size.tensor, np.ones((), np.int64) if size.scalar else np.ones(length, np.int64))
                t.reshape(-1)[size.index] = m
                pooled.append(n)
            elif isinstance(n, int):
                pooled.append(n)
            elif isinstance(m, int):
                target = window_targets(m)[WINDOW_KINDS[kind]]
                pooled.append(target if target is not None else 2 * m + 1)
            else:  # the output follows the input: any length
                pooled.append((5, 7, 3)[r])
        shape = lead + tuple(pooled)
        key = (shape, sorted((k, v.tolist()) for k, v in sizes.items()))
        if key not in seen:
            seen.append(key)
            runs.append((shape, sizes))
    return runs


def check_nested(model: onnx.ModelProto, patched: Sequence, rows: Sequence[NodeReport], *, seed: int = 0) -> None:
    """Run each replaced subgraph alone and compare it with the reference; fills their report ``rows``.
    Raises ``CheckFailedError`` (with nothing else to say than the first failure) on a mismatch."""
    rng = np.random.default_rng(seed)
    failed = []
    for p, row in zip(patched, rows):
        s = p.spec
        check = NodeCheck(s.node.name)
        dt = onnx.helper.tensor_dtype_to_np_dtype(s.dtype) if s.dtype != TensorProto.BFLOAT16 else np.float32
        isolated = isolate(model, s, feed_sizes=True, graph=graph_holding(model.graph, s.node.output))
        if isolated is None:  # the emitted nodes read only the input and their own constants
            check.passed, check.detail = False, "its replacement reads tensors other than the pooled input"
        else:
            try:
                sess = ort_session(isolated, None)
            except Exception as e:  # noqa: BLE001 - onnxruntime's words
                sess = None
                check.passed, check.detail = False, f"does not load alone: {' '.join(str(e).split())[:200]}"
            names = [o.name for o in isolated.graph.output]
            fed = {i.name for i in isolated.graph.input[1:]}  # runtime sizes computed outside the body
            for shape, sizes in check_shapes(s) if sess is not None else ():
                sizes = {k: v for k, v in sizes.items() if k in fed}
                xs = [rng.standard_normal(shape)]
                if prod(shape) <= STRUCTURED_MAX_ELEMENTS:  # (the windows of the sizes fed, where they are)
                    xs += structured_inputs(bind_runtime_sizes(s, sizes) if sizes else s, shape, rng)
                for x in xs:
                    x, bound, got = run_alone(sess, names, s, np.ascontiguousarray(x, dtype=dt), sizes)
                    compare(bound, x, got[0], got[1] if len(got) > 1 else None, check)
                    if not check.passed:
                        check.detail += " (the replaced subgraph alone)"
                        break
                if not check.passed:
                    break
        row.max_error, row.tolerance = check.max_error, check.tolerance
        row.checked_shapes = [list(x) for x in check.shapes]
        if not check.passed:
            failed.append(f"{s.node.label} (in a body): {check.detail}")
    if failed:
        raise CheckFailedError(f"onnxruntime check failed for {len(failed)} node(s): {failed[0]}",
                               f"this is a bug in onnxpoolfix: please report it with the model {VERBOSE}; "
                               f"{STRATEGY} can force another lowering meanwhile")


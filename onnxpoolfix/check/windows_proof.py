"""Every window of a ``dynamic`` lowering proven, not sampled: the subgraph that builds its windows from the
runtime lengths (:mod:`onnxpoolfix.lowering.runtime_windows`, :mod:`onnxpoolfix.lowering.dynamic`: the same
functions the lowering emits with) runs alone in onnxruntime for EVERY input length ``n`` up to a bound and
every output length ``m`` the node can have there, and each pooling matrix (average) or window table (max) is
compared, exactly, with :mod:`onnxpoolfix.windows`.

- A constant ``m``: every ``n <= BOUND`` (lower where ``m`` is large, so the matrices stay within the budget).
  Axes pooled to the same ``m`` share one construction over a vector of lengths: it is fed 1..N in chunks,
  one run per chunk.
- An ``m`` the graph computes (:class:`~onnxpoolfix.spec.RuntimeDim`): the graph's own size subgraph is run
  for every ``n <= BOUND`` (one axis varied at a time, the others at two sizes) to find the ``m`` it yields,
  and each such pair is proven; where that subgraph reads more than the pooled tensor's shape, or more than
  the pooled axis (the other sizes change ``m``), every pair ``n <= RECT_N``, ``m <= RECT_M``.

One session per construction, one run per pair (or chunk): well under a second for a node.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from math import isqrt

import numpy as np
import onnx
from onnx import TensorProto, helper

from .. import windows as W
from ..graph.emit import Emitter, np_dtype
from ..graph.size_subgraph import fed_by_shape, size_subgraph, sizes_at
from ..lowering.base import compute_dtype
from ..lowering.dynamic import runtime_pooling_matrices_t, runtime_size_matrix_t
from ..lowering.runtime_windows import runtime_window_table, runtime_window_tables
from ..lowering.window_slices import WindowSlicesStep
from ..sessions import ort_session
from ..spec import InputDim, PoolSpec, RuntimeDim

logger = logging.getLogger(__name__)

BOUND = 512  # every n up to this (the usual case)
RECT_N, RECT_M = 48, 96  # every pair, where the output sizes the graph yields are not known
MATRIX_BUDGET = 1 << 24  # elements of all the matrices of one construction together (about 0.2 s)
CHUNK = 64  # lengths per run of a shared construction


@dataclass
class Proof:
    """What was proven for one node: one line per construction (e.g. "avg m=7: n <= 512")."""

    lines: list[str] = field(default_factory=list)
    failure: str = ""
    bound: int | None = None  # the smallest n bound of any of its constructions

    def add(self, what: str, n_max: int) -> None:
        self.lines.append(what)
        self.bound = n_max if self.bound is None else min(self.bound, n_max)


def _model(em: Emitter, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(em.nodes, "windows", [helper.make_tensor_value_info(i, TensorProto.INT64, None)
                                                    for i in inputs],
                              [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=em.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", em.opset)])


def _bounds(n: int, m: int) -> np.ndarray:
    """``[m, 2]``: windows.py's ``window_start`` / ``window_end`` of every output, evaluated on an array."""
    i = np.arange(m, dtype=np.int64)
    return np.stack([W.window_start(i, n, m), W.window_end(i, n, m)], axis=1)


def _expected_table(n: int, m: int, kmax: int) -> np.ndarray:
    w = _bounds(n, m)
    k = np.arange(kmax, dtype=np.int64)
    return np.minimum(w[:, :1] + k, w[:, 1:] - 1)


def _expected_shared_table(n: int, m: int, kmax: int) -> np.ndarray:
    """What :func:`runtime_window_tables` lists: ``end - kmax .. end - 1`` clamped below at ``start``."""
    w = _bounds(n, m)
    k = np.arange(-kmax, 0, dtype=np.int64)
    return np.maximum(w[:, 1:] + k, w[:, :1])


def _matrix_t(n: int, m: int, elem: int) -> np.ndarray:
    """windows.py's pooling matrix, transposed (``[n, m]``), in the compute dtype (as the static matrices)."""
    w = _bounds(n, m)
    j = np.arange(n, dtype=np.int64)[:, None]
    inside = (j >= w[:, 0]) & (j < w[:, 1])
    return np.where(inside, 1.0 / (w[:, 1] - w[:, 0]), 0.0).astype(np_dtype(elem))


def _n_bound(m: int, limit: int) -> int:
    """The largest N with every matrix n x m for n <= N inside the budget (sum ~ N^2 m / 2)."""
    return max(1, min(limit, isqrt(2 * MATRIX_BUDGET // max(m, 1))))


def _shared(opset: int, elem: int, kind: str, m: int, n_max: int, chunk: int = CHUNK) -> str | None:
    """Axes pooled to ``m`` sharing one construction over a vector of lengths (stacked), ``chunk`` lengths
    per run (1: the construction of a max axis alone, as the lowering emits it)."""
    em = Emitter("proof", {"n", "m", "lengths", "out", "kmax"}, opset)
    if kind == "avg":
        em.op("Identity", [runtime_pooling_matrices_t(em, "lengths", 2, m, elem)], out="out")
    else:
        em.op("Identity", [runtime_window_tables(em, "lengths", 1 if chunk == 1 else 2, m)], out="out")
    sess = ort_session(_model(em, ["lengths"], ["out"]), optimize=False)
    for lo in range(1, n_max + 1, chunk):
        lengths = np.arange(lo, min(lo + chunk, n_max + 1), dtype=np.int64)
        (got,) = sess.run(None, {"lengths": lengths})
        for q, n in enumerate(lengths.tolist()):
            if kind == "avg":
                want = _matrix_t(n, m, elem)
                if not (np.array_equal(got[:n, :, q], want) and not got[n:, :, q].any()):
                    return f"the shared pooling matrices differ from windows.py at {n} -> {m}"
            elif not np.array_equal(got[q] if chunk > 1 else got, _expected_shared_table(n, m, got.shape[-1])):
                what = "shared window tables differ" if chunk > 1 else "window table differs"
                return f"the {what} from windows.py at {n} -> {m}"
    return None


def _single(opset: int, elem: int, kind: str, pairs: list[tuple[int, int]], runtime_m: bool) -> str | None:
    """One axis: ``n`` fed (0-d), ``m`` fed too where the graph computes it, else the pairs' one constant."""
    em = Emitter("proof", {"n", "m", "lengths", "out", "kmax"}, opset)
    m_const = pairs[0][1]
    if kind == "avg":
        out = (runtime_size_matrix_t(em, "n", "m", elem) if runtime_m else
               runtime_pooling_matrices_t(em, em.unsqueeze("n", [0]), 1, m_const, elem))
    else:
        out, _ = runtime_window_table(em, "n", "m" if runtime_m else m_const)
    em.op("Identity", [out], out="out")
    sess = ort_session(_model(em, ["n", "m"] if runtime_m else ["n"], ["out"]), optimize=False)
    for n, m in pairs:
        feed = {"n": np.array(n, np.int64)} | ({"m": np.array(m, np.int64)} if runtime_m else {})
        (got,) = sess.run(None, feed)
        if kind == "avg":
            want = _matrix_t(n, m, elem)
        else:
            want = _expected_table(n, m, got.shape[1] if got.ndim == 2 else 0)
        if got.shape != want.shape or not np.array_equal(got, want):
            return (f"the {'pooling matrix' if kind == 'avg' else 'window table'} differs from windows.py "
                    f"at {n} -> {m}")
    return None


def prove_slice_bounds(spec: PoolSpec, cache: dict) -> Proof:
    """Every window bound of a ``window_slices`` lowering (the portable target's symbolic sizes) proven: the
    bounds subgraph the lowering emits (:meth:`~onnxpoolfix.lowering.window_slices.WindowSlicesStep.bounds`,
    read from a tensor's Shape) runs for every length ``n <= BOUND`` and its ``m`` starts and ends are
    compared with windows.py. One session per ``m``, one run per ``n``."""
    proof = Proof()
    lead = spec.ndim - spec.k
    for j, (n, m) in enumerate(zip(spec.in_sizes, spec.out_sizes)):
        if isinstance(n, int) or not isinstance(m, int) or m == 1:
            continue
        key = ("slices", m, spec.opset)
        if key not in cache:
            em = Emitter("proof", {"x", "out"}, spec.opset)
            starts, ends = WindowSlicesStep(0, None, m, "ReduceMean").bounds(em, "x")
            em.op("Concat", starts + ends, axis=0, out="out")
            sess = ort_session(_model(em, ["x"], ["out"]), optimize=False)
            cache[key] = None
            for length in range(1, BOUND + 1):
                (got,) = sess.run(None, {"x": np.zeros(length, np.int64)})
                if not np.array_equal(got, _bounds(length, m).T.ravel()):
                    cache[key] = f"the window slices' bounds differ from windows.py at {length} -> {m}"
                    break
        if cache[key]:
            proof.failure = cache[key]
            return proof
        proof.add(f"axis {lead + j} window slices -> {m}: n <= {BOUND}", BOUND)
    return proof


def yielded_sizes(model: onnx.ModelProto, spec: PoolSpec, j: int, n_max: int) -> list[tuple[int, int]] | None:
    """The (n, m) pairs of pooled axis ``j`` whose output size the graph computes: its size subgraph run at
    every n <= n_max, the other axes at two sizes; None where that subgraph reads anything but the shape of
    the pooled tensor, or also reads another axis (``(x.shape[3], x.shape[2])``): the pairs are not known."""
    size = spec.node.output_size[j]
    sub = size_subgraph(model, size.tensor, spec.node.input, spec.dtype)
    if sub is None:
        return None
    try:
        sess = ort_session(fed_by_shape(sub))
    except Exception as e:  # noqa: BLE001 - not a subgraph onnxruntime takes alone: the pairs stay unknown
        logger.debug("%s: its size subgraph does not run alone: %s", spec.node.label, e)
        return None
    lead = spec.ndim - spec.k
    runs = [list(sizes_at(sess, [a] * lead + [b] * spec.k, lead + j, size.index, range(1, n_max + 1)))
            for a, b in ((1, 7), (3, 23))]
    if runs[0] != runs[1] or any(m is None for _, m in runs[0]):
        return None
    return [(n, m) for n, m in runs[0] if m >= 1]


def prove_windows(model: onnx.ModelProto, spec: PoolSpec, cache: dict) -> Proof:
    """Prove every window construction of ``spec``'s dynamic lowering (``cache``: constructions already
    proven in this run, shared by nodes with the same ones)."""
    proof = Proof()
    elem = compute_dtype(spec)
    lead = spec.ndim - spec.k
    groups: dict[int, list[int]] = {}
    single: list[tuple[int, int | RuntimeDim]] = []
    indices = bool(spec.node.indices_output)
    for j, (n, m, size) in enumerate(zip(spec.in_sizes, spec.out_sizes, spec.node.output_size)):
        if isinstance(size, InputDim) or (isinstance(n, int) and not isinstance(size, RuntimeDim)) or m == 1 \
                and not indices:
            continue
        if isinstance(size, RuntimeDim):
            single.append((j, size))
        elif indices:
            single.append((j, m))
        else:
            groups.setdefault(m, []).append(j)
    for m, axes in groups.items():  # constant m: shared over several axes, or one axis alone
        n_max = _n_bound(m, BOUND)
        if len(axes) == 1 and spec.kind == "avg":
            single.append((axes[0], m))
            continue
        # a max axis alone runs the shared construction too, over a vector of its one length
        key = ("shared", spec.kind, m, n_max, elem, spec.opset, len(axes) > 1)
        if key not in cache:
            cache[key] = _shared(spec.opset, elem, spec.kind, m, n_max, CHUNK if len(axes) > 1 else 1)
        if cache[key]:
            proof.failure = cache[key]
            return proof
        proof.add(f"{spec.kind} -> {m} (shared by {len(axes)} axes): n <= {n_max}" if len(axes) > 1 else
                  f"axis {lead + axes[0]} {spec.kind} -> {m}: n <= {n_max}", n_max)
    for j, m in single:
        if isinstance(m, RuntimeDim):
            pairs = yielded_sizes(model, spec, j, BOUND)
            if pairs is None:
                pairs = [(n, mm) for n in range(1, RECT_N + 1) for mm in range(1, RECT_M + 1)]
                what, n_max = f"every n <= {RECT_N}, m <= {RECT_M}", RECT_N
            else:
                n_max = BOUND
                if spec.kind == "avg":  # the matrices n x m of all pairs within the budget
                    total = 0
                    for i, (n, mm) in enumerate(pairs):  # (one m per n, n ascending: yielded_sizes)
                        total += n * mm
                        if total > MATRIX_BUDGET:
                            n_max, pairs = n - 1, pairs[:i]
                            break
                kinds = {"down" if mm < n else "up" if mm > n else "equal" for n, mm in pairs}
                what = f"n <= {n_max}, each with the m the graph computes ({', '.join(sorted(kinds))})"
            key = ("runtime", spec.kind, tuple(pairs), elem, spec.opset)
            if key not in cache:
                cache[key] = _single(spec.opset, elem, spec.kind, pairs, True)
            label = f"axis {lead + j} {spec.kind} -> computed m: {what}"
        else:
            n_max = _n_bound(m, BOUND)
            key = ("single", spec.kind, m, n_max, elem, spec.opset)
            if key not in cache:
                cache[key] = _single(spec.opset, elem, spec.kind, [(n, m) for n in range(1, n_max + 1)], False)
            label = f"axis {lead + j} {spec.kind} -> {m}: n <= {n_max}"
        if cache[key]:
            proof.failure = cache[key]
            return proof
        proof.add(label, n_max)
    return proof


__all__ = ["prove_windows", "prove_slice_bounds", "Proof", "BOUND"]

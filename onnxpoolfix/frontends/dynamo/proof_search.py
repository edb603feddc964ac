"""The dynamo front end's search for the sizes a region proves at (:func:`prove_all`): each candidate run alone
(:func:`~.proof.prove`) at its declared size when static; with symbolic sizes at the size the caller bound
(``input_shapes``), else over torch's branch classes per axis (:mod:`.search`), or bound on the whole model
where the graph declares no size expressions. Bounded by counts of runs and nodes inferred, never by seconds:
the same file gets the same verdict on any machine. What it learns about each candidate is its Proof."""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import onnx

from ...check.cut import cut_bytes, cut_nodes
from ...check.feeds import random_feed
from ...errors import PoolFixError
from ...graph import arrange, keep_only
from ...graph.shapes import apply_input_shapes, infer, infer_at, light_copy
from ...progress import phase
from ...sessions import ort_session, ort_value
from ...spec import RuntimeDim
from .dataflow import Candidate, DataflowGraph, permuted
from .probe import probe_unrolled_windows
from .proof import Proof, isolated, prove, shape_text
from .search import (
    SizeSpace,
    branch_class,
    declared_dims,
    symbol_binding,
    whole_model_bindings,
)

logger = logging.getLogger(__name__)

_SEARCH_BUDGET = 600  # proof runs at most, over all regions of a model
_PROBE_AFTER = 20  # failed runs (onnxruntime) before the unroll probe (probe.probe_unrolled_windows)
#: the whole-model search infers the model once per size tried: its tries count nodes inferred (large graphs, fewer)
_WHOLE_MODEL_NODES = 200_000
_NEAR_HINT_ELEMENTS = 1 << 24  # pooled elements run near a bound size that did not prove, per region


class Trial(NamedTuple):
    """A candidate under proof: its proof so far and its onnxruntime session (None: it cannot run alone)."""
    candidate: Candidate
    proof: Proof
    session: object


def prove_all(model, g: DataflowGraph, candidates: Sequence[Candidate], input_shapes, seed: int,
              info0: Mapping[str, tuple[int, tuple | None]], *, model_dir: str | None = None) -> list[Proof]:
    """Prove every candidate (module doc): a :class:`Proof` each, in order (``proven_at`` where it proved out,
    else ``why``). ``info0``: :func:`~onnxpoolfix.graph.shapes.infer` of ``model`` as the front end has it.
    ``model_dir``: where the region's external initializers resolve (onnxruntime reads a proto's relative
    locations against the working folder otherwise)."""
    with phase("search", str(len(candidates))):
        rng = np.random.default_rng(seed)
        dtypes = {k: v[0] for k, v in info0.items()}
        trials = []  # the sessions live as long as this search
        for c in candidates:
            iso, sources = isolated(model, g, c, dtypes)
            p, session = Proof(sources), None
            try:
                session = ort_session(iso, model_dir, optimize=False)  # quiet: failing at some size is expected
            except Exception as e:  # noqa: BLE001
                p.why = f"onnxruntime cannot run it alone ({' '.join(str(e).split())[:100]})"
            trials.append(Trial(c, p, session))
        pending = [t for t in trials if not t.proof.why]
        static = [t for t in pending if all(isinstance(d, int) for d in t.candidate.x_shape)]
        for c, p, session in static:
            shapes = {s: info0.get(s, (0, None))[1] for s in p.sources}
            shapes = {s: tuple(d) for s, d in shapes.items() if d is not None and all(isinstance(v, int) for v in d)}
            why = prove(session, c, p, dtypes, shapes, c.x_shape, rng)
            if why:
                p.why = f"not proven: {why}"
            else:
                p.proven_at = c.x_shape
        symbolic = [t for t in pending if not any(t is u for u in static)]
        if not symbolic:
            return [t.proof for t in trials]
        declared = declared_dims(model)
        env0 = symbol_binding(declared, input_shapes) if input_shapes else {}
        whole = []  # regions whose sizes are not declared as expressions: the whole-model search
        inferred: list = []  # the whole model inferred at the bound shapes, once, where a region needs it
        for t in symbolic:
            c = t.candidate
            seen = {**declared, c.pooled: permuted(c.perm, declared.get(c.pooled))} if c.perm else declared
            space = SizeSpace.of(seen, c.pooled, t.proof.sources, c.output_size) if env0 is not None else None
            if space is None:
                whole.append(t)
            else:
                env = env0
                if env0 and not set(space.axis_symbols) <= set(env0):
                    if not inferred:  # the whole model at the bound shapes, inferred once for every region
                        inferred.append(_inferred_at(model, input_shapes))
                    env = space.completed(env0, permuted(c.perm, inferred[0].get(c.pooled, (0, None))[1]))
                _search_alone(t, space, env, dtypes, rng)
        if whole:
            _search_whole_model(model, whole, input_shapes, dtypes, rng, model_dir)
        for c, p, _ in symbolic:
            _conclude(c, p, bool(input_shapes))
        return [t.proof for t in trials]


def _try(t: Trial, dtypes, shapes, xs: tuple[int, ...], rng) -> str | None:
    c, p, session = t
    p.tried.add(xs[-c.rank:])
    if all(d <= 1 for d in xs[-c.rank:]):  # one element per plane: every average of it is that element
        p.last = f"{shape_text(xs)} holds one element per plane, which proves nothing"
        return p.last
    why = prove(session, c, p, dtypes, shapes, xs, rng)
    if why is None:
        p.proofs.append(xs)
        lead = len(xs) - c.rank  # per pooled axis whose output size the graph computes: (n, m) as the proof read m
        pairs = {a: (xs[lead + a], p.last_sizes[a]) for a, m in enumerate(c.output_size)
                 if isinstance(m, RuntimeDim) and a < len(p.last_sizes)}
        for a, (n, m) in pairs.items():
            p.branches.setdefault(a, set()).add(branch_class(n, m))
            p.lengths.setdefault(a, set()).add(m)
        p.uneven = p.uneven or len({m for _, m in pairs.values()}) > 1
    else:
        p.last = why
    return why


def _search_alone(t: Trial, space: SizeSpace, env0: Mapping[str, int], dtypes, rng) -> None:
    """The region alone at the bound size (``env0``: the symbols' values there, empty when nothing is bound),
    then at each pair of branch classes (:mod:`.search`) until it proved, within the budget."""
    c, p, _ = t
    if env0:
        got = space.at(env0)
        if got is None:
            p.bound_why = "its input size at the bound input shapes is not positive"
        else:
            p.bound_at = got[0]
            p.bound_why = _try(t, dtypes, got[1], got[0], rng) or ""
            if p.bound_why == "":
                _same_branches_elsewhere(t, space, env0, dtypes, rng)
    budget, failed = _SEARCH_BUDGET, 0
    outcome: dict[tuple, str | None] = {}  # per pooled size tried: run's answer

    def run(env) -> str | None:
        nonlocal budget, failed
        got = space.at(env)
        if got is None:
            return "skip"
        if got[0][-c.rank:] in p.tried:
            return outcome.get(got[0][-c.rank:], "skip")
        budget -= 1
        why = _try(t, dtypes, got[1], got[0], rng)
        if why is None:
            p.proof_envs[got[0]] = dict(env)
        elif why.startswith("onnxruntime fails"):
            failed += 1
            why = "failed"
        outcome[got[0][-c.rank:]] = why
        return why

    probed = False
    for env in space.bindings(identity=c.evidence != "structure"):
        if _enough(c, p) or p.mismatch or budget <= 0:
            break
        run(env)
        if not probed and failed >= _PROBE_AFTER and not p.proofs:
            probed = True  # the region fails at the smallest classes: an unroll longer than their windows
            probe_unrolled_windows(space, run)
    p.searched = "per axis, on the region alone"


#: symbol values tried per axis for a size taking the bound size's branches (a count, never seconds)
_SAME_BRANCH_TRIES = 256


def _same_branches_elsewhere(t: Trial, space: SizeSpace, env0: Mapping[str, int], dtypes, rng) -> None:
    """A region proven at the bound size is run again at the nearest larger and the nearest smaller size whose
    pooled axes take the same branches of torch's decomposition, where it must be right too. One that differs
    there holds an op that is the identity at the bound size alone (``x[..., :13]`` traced at 13, ``x * (H /
    17)``): the pool is not of the tensor it was cut back to, so this region is not proven (a smaller one of the
    same end is tried next). A size where onnxruntime fails (torch unrolled at the traced length), or none
    found, says nothing."""
    c, p, session = t
    for direction in (1, -1):
        env = dict(env0)
        for a, s in enumerate(space.axis_symbols):
            m = space.output_size[a]
            if not s or not isinstance(m, int) or s not in env0 or env[s] != env0[s]:
                continue
            n0 = space.length(a, env0[s])  # (axis a's dim reads its symbol s alone)
            for step in range(1, _SAME_BRANCH_TRIES + 1):
                v = env0[s] + direction * step
                n = space.length(a, v) if v >= 1 else None
                if n is None or n < 1 or n0 is None:
                    break
                if n != n0 and branch_class(n, m) == branch_class(n0, m):
                    env[s] = v
                    break
        got = space.at(env) if env != env0 else None
        if got is None or got[0] in p.tried or got[0][-c.rank:] in p.tried:
            continue
        p.tried.add(got[0][-c.rank:])
        why = prove(session, c, p, dtypes, got[1], got[0], rng)
        if why is not None and why.startswith("it differs"):
            p.mismatch = (f"at {shape_text(got[0])}, which takes the traced size's branches, {why[3:]}: an op in "
                          "it is the identity at the traced size alone (a crop or scale by the input's size)")
            return


def _run_shapes(model, tensors: Mapping[str, int], binding, model_dir, rng) -> dict[str, list[int]]:
    """The shapes of ``tensors`` (name -> dtype) when the part of the model computing them runs once at the
    input shapes ``binding`` (random inputs), where onnx's inference cannot size them (a Pad by amounts computed
    from the input's shape, as Swin pads to its window); empty where that does not run."""
    if not tensors:
        return {}
    names = list(tensors)
    try:
        sess = ort_session(cut_bytes(model, [onnx.helper.make_tensor_value_info(n, tensors[n], None)
                                             for n in names]), model_dir)
        wanted = {i.name for i in sess.get_inputs()}
        feed = {k: ort_value(v) for k, v in random_feed(model, binding, rng).items() if k in wanted}
        return {n: list(v.numpy().shape) for n, v in zip(names, sess.run_with_ort_values(names, feed))}
    except Exception:  # noqa: BLE001 - a part onnxruntime cannot run alone: the sizes stay unknown
        logger.debug("cannot run the model up to %s at %s", names, binding, exc_info=True)
        return {}


def _search_whole_model(model, todo_all: list[Trial], input_shapes, dtypes, rng, model_dir=None) -> None:
    """Sizes bound on the whole model and inferred (a graph that does not declare its sizes as expressions)."""
    budget = min(_SEARCH_BUDGET, max(8, _WHOLE_MODEL_NODES // max(1, len(model.graph.node))))
    # each size is bound on a copy without the weights' bytes, of the nodes the regions' inputs are computed from
    light = _inference_cut(light_copy(model), [x for t in todo_all for x in [t.candidate.pooled, *t.proof.sources]])
    first = bool(input_shapes)
    hinted: dict[int, int] = {}  # per region the bound size did not prove: the elements run near it
    for binding, near in whole_model_bindings(model, input_shapes):
        # such a region is decided (_conclude); the sizes near the bound one, as large as it, can only give the
        # hint a size it is right at: run within an element budget (a huge bound size ran 168 times, minutes)
        todo = [t for t in todo_all if (not _enough(t.candidate, t.proof) or first)
                and not (near and t.proof.bound_why and hinted.get(id(t), 0) >= _NEAR_HINT_ELEMENTS)]
        if near and not todo:
            continue  # the sizes after the near ones may still give the hint its size
        if not todo or budget <= 0:
            break
        bound = onnx.ModelProto()
        bound.CopyFrom(light)
        try:
            apply_input_shapes(bound, binding)
        except PoolFixError as e:  # a size the model's fixed dims refuse
            logger.debug("not trying %s: %s", binding, e)
            first = False
            continue
        info = infer(bound)
        unsized = {t.candidate.pooled: t.candidate.elem for t in todo
                   if not all(isinstance(d, int) for d in info.get(t.candidate.pooled, (0, None))[1] or [None])}
        ran = _run_shapes(model, unsized, binding, model_dir, rng) if first else {}  # the traced size: run it
        for t in todo:
            c, p, _ = t
            _, xs = info.get(c.pooled, (0, None))
            xs = permuted(c.perm, ran.get(c.pooled, xs))
            if xs is None or not all(isinstance(d, int) and d >= 1 for d in xs):
                if first:
                    p.bound_why = "its input size at the bound input shapes is unknown"
                continue
            xs = tuple(xs)
            if not first and (any(n == m for n, m in zip(xs[-c.rank:], c.output_size)) or xs[-c.rank:] in p.tried
                              or max(xs[-c.rank:]) <= 1):  # _try runs nothing there, yet it read as failed
                continue  # an axis of identity windows, or one element per plane, proves nothing; each size once
            budget -= 1
            if near and p.bound_why:
                hinted[id(t)] = hinted.get(id(t), 0) + math.prod(xs)
            shapes = {s: tuple(info[s][1]) for s in p.sources if s in info and info[s][1] is not None
                      and all(isinstance(d, int) for d in info[s][1])}
            why = _try(t, dtypes, shapes, xs, rng)
            if first:
                p.bound_at, p.bound_why = xs, why or ""
        first = False
    for _, p, _ in todo_all:
        p.searched = f"on the whole model, {len(p.tried)} sizes"


def _inference_cut(light: onnx.ModelProto, wanted: list[str]) -> onnx.ModelProto:
    """``light`` (changed in place) with only the nodes ``wanted`` are computed from: inference runs forward, so
    their shapes are the whole model's, at a fraction of the cost (a region's unrolled nodes come after it). The
    graph inputs and initializers stay (a binding is checked against every input)."""
    g = light.graph
    picked = set(cut_nodes(g, wanted)[0])
    dropped = {o for k, n in enumerate(g.node) if k not in picked for o in n.output if o}
    arrange(g.node, [n for k, n in enumerate(g.node) if k in picked])
    for field in (g.value_info, g.output):
        keep_only(field, lambda vi: vi.name not in dropped)
    return light


def _conclude(c: Candidate, p: Proof, bound: bool) -> None:
    """``p.proven_at`` or ``p.why`` from the sizes it equalled the reference at. With a binding, the region
    must be right there (it is the traced size): one right only elsewhere contradicts the binding. A pool to 1 of
    a symbolic axis proven only where it is 1 long is none (torch's None reads the same there: review44 F2b)."""
    _conclude_sizes(c, p, bound)
    unit = [a for a, m in enumerate(reversed(c.output_size), 1) if m == 1 and not isinstance(c.x_shape[-a], int)]
    if p.proven_at is not None and unit and not any(all(xs[-a] > 1 for a in unit) for xs in p.proofs):
        p.proven_at, p.why = None, (f"it pools to 1 an axis proven only where it is 1 long ({shape_text(p.proofs[0])}):"
                                    " a size of 1 or torch's None (it follows the input), which differ elsewhere")


def _conclude_sizes(c: Candidate, p: Proof, bound: bool) -> None:
    need = _proofs_needed(c)
    if p.mismatch:  # the size tensor taken for its output size is not it: nothing else says which is
        p.why = f"not proven: {p.mismatch}"
        return
    if bound and p.bound_why is not None:
        if p.bound_why == "" and _enough(c, p):
            p.proven_at = p.bound_at
            return
        if p.bound_why:
            # too large to prove there says nothing against the binding
            elsewhere = (next((xs for xs in p.proofs if xs != p.bound_at), None)
                         if "too large" not in p.bound_why else None)
            p.why = f"not proven at the bound size {shape_text(p.bound_at) if p.bound_at else ''}: {p.bound_why}"
            if elsewhere:
                p.contradicts = elsewhere
                p.why += f", though it equals adaptive average pooling at {shape_text(elsewhere)}"
            return
    if _enough(c, p):
        p.proven_at = p.proofs[0]
    elif p.proofs:  # what it lacks: sizes (no metadata), lengths of a size it computes, unequal axis lengths
        lacks = ("without metadata one size is not enough" if len(p.proofs) < need and c.evidence == "structure" else
                 "no size tried pools its axes unequally" if not any(isinstance(m, RuntimeDim) for m in c.output_size)
                 else f"a size it computes in too few of torch's branches must be right at every size: {p.last}" if
                 p.last else "the size it computes is proven at too few lengths")
        at = shape_text(p.proofs[0]) if len(p.proofs) == 1 else f"{len(p.proofs)} sizes ({shape_text(p.proofs[0])} ...)"
        p.why = f"under symbolic sizes it equals adaptive average pooling at {at}, and {lacks}"
    else:
        p.why = (f"under symbolic sizes, no input size found where it equals adaptive average pooling "
                 f"({len(p.tried)} sizes tried, {p.searched}; last: {p.last or 'none run'})")


def _inferred_at(model: onnx.ModelProto, input_shapes) -> dict:
    try:
        return infer_at(model, input_shapes)
    except PoolFixError as e:
        logger.debug("binding %s: %s", input_shapes, e)
        return {}


#: branch classes each axis of a computed output size is proven in, one of them uneven (not n % m == 0)
_RUNTIME_CLASSES = 3
_ONE_CLASS_LENGTHS = 6  # ... or, where every size tried proved, this many output lengths per axis


def _enough(c: Candidate, p: Proof) -> bool:
    """Proven at enough sizes: :func:`_proofs_needed` of them, and where the graph computes an output size, on each
    such axis in several branch classes of torch's decomposition (one with uneven windows; or, with no size failed,
    at many output lengths) and output lengths, and at a size where two such axes' lengths differ (a size tensor
    taken for the wrong axis shows there)."""
    if len(p.proofs) < _proofs_needed(c):
        return False
    axes = [a for a, m in enumerate(c.output_size) if isinstance(m, RuntimeDim)]
    if p.mismatch or len(axes) > 1 and not p.uneven:  # some proof where those axes' sizes differ from each other
        return False
    if not axes:
        return True
    # upsampling (n < m) takes one branch class at every size: there, many lengths and no size it failed at
    return all(len(p.lengths.get(a, ())) >= 2 and (len(p.branches.get(a, ())) >= _RUNTIME_CLASSES and any(
        not b[0] for b in p.branches.get(a, ())) or len(p.lengths.get(a, ())) >= _ONE_CLASS_LENGTHS and not p.last)
        for a in axes)


def _proofs_needed(c: Candidate) -> int:
    """Sizes a symbolic region must be right at. Its replacement changes what it computes at every other
    size: with metadata saying adaptive pooling one size proves the windows; from structure alone two
    different sizes are asked for (a fixed-kernel pooling written with gathers can equal adaptive pooling at
    one size, not at two with the same output size)."""
    # an output size the graph computes: its length checked at several sizes, taking different branches
    runtime = any(isinstance(m, RuntimeDim) for m in c.output_size)
    return (1 if c.evidence != "structure" else 2) + (2 if runtime else 0)

"""Where a dynamo region under symbolic sizes is right: a search over the pooled tensor's size, per axis,
on the region alone (:mod:`.proof` runs each try; docs/dynamo-files.md, "Dynamic dynamo exports").

torch's decomposition branches in Python per pooled axis, at the traced size: whether ``m`` divides ``n``,
whether windows of two lengths occur (``adaptive = not (n % m == 0 or m % (n % m) == 0)``), and the
longest window (``n // m + 1``, one more where adaptive, one less where divisible), whose unroll is frozen.
A region is right exactly at the sizes that take the traced branches on every axis, so one size per branch
class of each axis is tried (:func:`branch_class`), two axes' classes in pairs, the smallest first. Which class
the export took is found by running, not by this formula: a torch version that branches otherwise costs only
more tries, never a wrong proof. No whole-model shape inference per try: the pooled tensor's dims and the shapes
the region reads are the exporter's declared expressions (``(((H - 1)//2)) + 1``), evaluated at each binding
(:func:`evaluate`); a graph without them falls back on the whole-model search (:mod:`.proof_search`).
"""
from __future__ import annotations

import ast
import functools
import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence

import onnx

from ...check.feeds import graph_inputs
from ...graph.shapes import type_dims
from ...spec import InputDim, RuntimeDim

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
#: per pooled axis, the branch classes tried (one size each) and the largest symbol value considered
MAX_CLASSES = 48
MAX_SYMBOL = 4096
#: pooled lengths tried per axis whose output size the graph computes (scale_factor): 2, 3, ... this many
_RUNTIME_SIZES = 12


def symbols(expr: str) -> set[str] | None:
    """The symbol names of a declared dim expression, or None where it is not one this module evaluates."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif not isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.Constant, ast.Load,
                                *_OPS)):
            return None
        elif isinstance(n, ast.Constant) and not isinstance(n.value, int):
            return None
    return names


def evaluate(dim, env: Mapping[str, int]) -> int | None:
    """A declared dim (int, or an expression of symbols) at the binding ``env``; None where it cannot be."""
    if isinstance(dim, int):
        return dim
    if not isinstance(dim, str):
        return None
    try:
        return _eval(ast.parse(dim, mode="eval").body, env)
    except (SyntaxError, KeyError, ZeroDivisionError, TypeError, ValueError):
        return None


def _eval(n, env):
    if isinstance(n, ast.Constant) and isinstance(n.value, int):
        return n.value
    if isinstance(n, ast.Name):
        return env[n.id]
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        return -_eval(n.operand, env)
    if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
        return _OPS[type(n.op)](_eval(n.left, env), _eval(n.right, env))
    raise ValueError(ast.dump(n))


def branch_class(n: int, m: int) -> tuple:
    """The branches torch's decomposition takes on one axis of length ``n`` pooled to ``m`` (module doc)."""
    mod = n % m
    adaptive = not (mod == 0 or m % mod == 0)
    return mod == 0, adaptive, n // m + 1 + (1 if adaptive else 0) - (1 if mod == 0 else 0)


def declared_dims(model: onnx.ModelProto) -> dict[str, list]:
    """Every declared tensor's dims: int, the expression string, or None (no dim given)."""
    g = model.graph
    return {vi.name: list(dims) for vi in [*g.input, *g.value_info, *g.output]
            if (dims := type_dims(vi.type)[1]) is not None}


class SizeSpace:
    """The sizes a region can be tried at: bindings of the input symbols its pooled tensor's declared dims
    use, with the pooled shape and the shape sources' shapes at each (no shape inference)."""

    def __init__(self, pooled: Sequence, sources: Mapping[str, Sequence], output_size: Sequence[int]):
        self.pooled, self.sources, self.output_size = list(pooled), dict(sources), tuple(output_size)
        k = len(output_size)
        self.axis_symbols: list[str] = []
        for d in self.pooled[len(self.pooled) - k:]:
            names = symbols(d) if isinstance(d, str) else set()
            self.axis_symbols.append(next(iter(names)) if names and len(names) == 1 else "")
        every = self.pooled + [x for s in self.sources.values() for x in s]
        self.others = {x for d in every if isinstance(d, str) for x in symbols(d) or ()} - set(self.axis_symbols)

    @classmethod
    def of(cls, declared: Mapping[str, list], pooled: str, sources: Sequence[str], output_size) -> SizeSpace | None:
        """None where some dim is undeclared or not an expression this module evaluates."""
        dims = declared.get(pooled)
        if dims is None or len(dims) < len(output_size):
            return None
        src = {s: declared.get(s) for s in sources}
        if any(v is None for v in src.values()) or any(d is None or isinstance(d, str) and symbols(d) is None
                                                       for d in [*dims, *(x for v in src.values() for x in v)]):
            return None
        space = cls(dims, src, output_size)
        # a source sized by symbols the pooled axes do not use (the exporter renamed a size: 's39' for a
        # stride-32 map of '32*h') cannot be bound consistently from the pooled size alone
        renamed = any(isinstance(d, str) and not (symbols(d) or set()) <= set(space.axis_symbols)
                      for v in src.values() for d in v[1:])
        return space if any(space.axis_symbols) and not renamed else None

    def length(self, a: int, v: int) -> int | None:
        """Pooled axis ``a``'s length where its symbol is ``v`` (the symbols of no pooled axis at 1)."""
        d = self.pooled[len(self.pooled) - len(self.output_size) + a]
        return evaluate(d, {**{o: 1 for o in self.others}, self.axis_symbols[a]: v})

    def at(self, env: Mapping[str, int]) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]] | None:
        """(pooled shape, source shapes) at ``env``; None where some dim comes out below 1."""
        full = {**{s: 1 for s in self.others}, **env}
        xs = tuple(evaluate(d, full) for d in self.pooled)
        shapes = {s: tuple(evaluate(d, full) for d in dims) for s, dims in self.sources.items()}
        if any(d is None or d < 1 for d in xs) or any(d is None or d < 1 for v in shapes.values() for d in v):
            return None
        return xs, shapes

    def completed(self, env0: Mapping[str, int], pooled_shape: Sequence | None) -> dict[str, int]:
        """``env0`` with the pooled axes' symbols the input's do not give: the exporter names the sizes after a
        layer anew (an input declared ``4*h`` gives a conv output of ``2*s39``, with no relation between ``h``
        and ``s39`` in the file). Solved (the smallest values) from the pooled tensor's shape at the bound
        shapes (the whole model inferred there); ``env0`` unchanged where it cannot be."""
        if pooled_shape is None or not all(isinstance(d, int) and d >= 1 for d in pooled_shape):
            return dict(env0)
        env = {}
        for a, s in enumerate(self.axis_symbols):
            want = pooled_shape[len(pooled_shape) - len(self.output_size) + a]
            v = next((v for v in range(1, MAX_SYMBOL + 1) if self.length(a, v) == want), None) if s else None
            if v is None or env.get(s, v) != v:
                return dict(env0)
            env[s] = v
        return {**env, **env0}

    def pooling_classes(self, a: int, most: int = MAX_CLASSES) -> list[tuple[int, int, int]]:
        """Axis ``a``'s first ``most`` pooling classes (n > m) as (symbol value, n, longest window), in order
        of n."""
        m = self.output_size[a]
        out, seen = [], set()
        for v in range(1, MAX_SYMBOL + 1):
            n = self.length(a, v)
            if n is None or n <= m or branch_class(n, m) in seen:
                continue
            seen.add(branch_class(n, m))
            out.append((v, n, branch_class(n, m)[2]))
            if len(out) >= most:
                break
        return out

    def bindings(self, identity: bool = False) -> Iterator[dict[str, int]]:
        """Symbol bindings covering each axis's branch classes, pairs of the smallest classes first.

        ``identity``: also the size where an axis's windows are identity (n == m), second on that axis, but
        never on every axis at once. torch's decomposition takes a branch of its own there (one-element
        windows: right at n == m only), so a region traced with one axis of n == m (UPerNet's 6x6 level of
        a 6x5 map) is right at no other size on that axis; its other axes still prove the windows and the
        cut, which is enough where metadata names the pool (one size proves those)."""
        per_axis: list[list[int]] = []
        same: list[int | None] = []  # per axis, the index of its identity size in per_axis
        for a, s in enumerate(self.axis_symbols):
            m = self.output_size[a]
            if not s:  # a static pooled axis (H fixed, W symbolic): its windows are the same at every binding;
                # a length of several symbols (a flattened H*W) is none this search can bind: no size is tried
                static = isinstance(self.pooled[len(self.pooled) - len(self.output_size) + a], int)
                per_axis.append([None] if static else [])
                same.append(None)
                continue
            seen, down, up, ident = set(), [], [], []
            for v in range(1, MAX_SYMBOL + 1):
                n = self.length(a, v) if s else None
                if not isinstance(m, int):  # follows the input, or computed by the graph: sizes of 2 elements on
                    if n is not None and n >= 2 and n not in seen:  # (a computed m's branches are not known here)
                        seen.add(n)
                        down.append(v)
                    if len(seen) >= (3 if isinstance(m, InputDim) else _RUNTIME_SIZES):
                        break
                    continue
                if n is not None and n == m and identity and not ident:
                    ident.append(v)
                if n is None or n < 1 or n == m:  # identity windows alone prove nothing
                    continue
                key = branch_class(n, m)
                if key not in seen:
                    seen.add(key)
                    (down if n > m else up).append(v)
                    if len(down) >= MAX_CLASSES:
                        break
            # pooling sizes first: where every window holds one element (n < m) many a function looks the same.
            # Where metadata names the pool, the upsampling classes (at most two per axis) come second: a
            # region traced at n < m (UPerNet's 6x6 level of a 3x4 map) is right only there, and behind
            # every pair of the pooling classes they lay past the search budget
            per_axis.append(down[:1] + ident + up + down[1:] if identity else down[:1] + down[1:] + up)
            same.append(min(len(down), 1) if ident else None)
        if not all(per_axis):
            return
        order = sorted(itertools.product(*(range(len(v)) for v in per_axis)), key=lambda ix: (sum(ix), max(ix)))
        tried = set()
        for ix in order:
            if all(i == j for i, j in zip(ix, same)):
                continue  # identity on every axis: any function of the right shape equals it
            env: dict[str, int] = {}
            for a, i in enumerate(ix):
                s, v = self.axis_symbols[a], per_axis[a][i]
                if not s:
                    continue
                if s in env and env[s] != v:
                    break
                env[s] = v
            else:
                key = tuple(sorted(env.items()))
                if key not in tried:
                    tried.add(key)
                    yield env


def range_limit(g, region: Sequence[int], result: str, a: int, info) -> RuntimeDim | None:
    """The tensor the graph computes axis ``a`` of ``result``'s length in, where it is a Range's limit among
    the sizes the region reads (torch's ``F.interpolate(x, scale_factor=0.6, mode="area")`` under symbolic
    sizes: ``Range(0, trunc, 1)`` declared as long as the result's axis, ``trunc = Floor(H * 0.6)``). Only a
    hint: the proof checks at every size it tries that the result is that long, and pooled to that size."""
    params = info.params.get(result) or []
    want = params[a] if a < len(params) else ""
    if not want or want.startswith("unk__"):
        return None
    size_nodes, _ = g.size_ancestors(region)
    limits = {g.nodes[i].input[1] for i in size_nodes if g.nodes[i].op_type == "Range" and len(g.nodes[i].input) == 3
              and (info.params.get(g.nodes[i].output[0]) or [""])[0] == want}
    return RuntimeDim(limits.pop(), 0, scalar=True) if len(limits) == 1 else None


#: input sizes tried (beyond the bound one) to find where a symbolic export is right: common sizes first
_COMMON_SIZES = (224, 256, 512, 384, 320, 299, 128, 64, 32, 16)
_SEARCH_MAX = 256
_NEAR = 6  # sizes within this many of the bound one on each of the last two symbolic dims


def symbol_binding(declared, input_shapes) -> dict[str, int] | None:
    """The input symbols' values at the bound input shapes (a dim declared ``H`` bound to 24: H = 24; one
    declared ``2*h``: h solved for), or None where some bound dim cannot be solved for one symbol."""
    env: dict[str, int] = {}
    for name, dims in input_shapes.items():
        decl = declared.get(name)
        if decl is None or len(decl) != len(dims):
            return None
        for d, v in zip(decl, dims):
            if not isinstance(d, str):
                continue
            got = solved_dim(d, v)
            if got is None or got[1] is None or env.get(got[0], got[1]) != got[1]:
                return None
            env[got[0]] = got[1]
    return env


def first_undeclared(declared, binding) -> tuple | None:
    """The first bound dim its declared expression cannot take: (input, axis, declared dim, size, symbol, the
    (value, input, axis) that gave the symbol another value, or None where no value gives the size); None where
    the declared dims take every size ``binding`` gives: ``32*h`` only a multiple of 32, a symbol one value
    wherever used (inputs of another rank are not read). Nothing the file declares is ever run at another size
    (torch traced its program for these sizes alone; the check keeps to them too). A dim this module cannot
    solve for one symbol (two symbols, an expression it does not evaluate) takes any size."""
    env: dict[str, tuple] = {}
    for name, dims in binding.items():
        decl = declared.get(name)
        if decl is None or len(decl) != len(dims):
            continue
        for axis, (d, v) in enumerate(zip(decl, dims)):
            if (got := solved_dim(d, v) if isinstance(d, str) else None) is None:
                continue
            symbol, value = got
            if value is None or env.setdefault(symbol, (value, name, axis))[0] != value:
                return name, axis, d, v, symbol, None if value is None else env[symbol]
    return None


def solved_dim(d: str, v: int) -> tuple[str, int | None] | None:
    """(symbol, the smallest value of it giving ``v``; None where none up to MAX_SYMBOL does) for a dim declared
    as an expression of one symbol; None where it is not one. A dim that is its symbol is its value, however
    large (a size beyond MAX_SYMBOL took the whole-model search, every size near it run at that size: a typo of
    100000 ran for minutes)."""
    names = symbols(d)
    if not names or len(names) != 1:
        return None
    (s,) = names
    return s, v if d == s else dim_image(d, s, MAX_SYMBOL).get(v)


@functools.lru_cache(maxsize=256)
def dim_image(d: str, s: str, most: int) -> dict[int, int]:
    """Each value of the expression ``d`` at its one symbol ``s`` = 1 .. ``most``, with the smallest ``s``."""
    out: dict[int, int] = {}
    for u in range(1, most + 1):
        n = evaluate(d, {s: u})
        if n is not None:
            out.setdefault(n, u)
    return out


def whole_model_bindings(model: onnx.ModelProto, input_shapes):
    """Input shapes to try, each with whether it is near the binding: the caller's binding and sizes near it (a
    region known from structure alone needs a second size, and one near the traced size takes the same
    branches; near in the declared symbols: ``32*h`` moves by 32), then every symbolic dim but the first set
    to one size, then the last two to consecutive such sizes (with square sizes alone, the output sizes a graph
    computes per axis are always equal: one read for the other never shows). Only sizes the inputs' declared
    dims allow (:func:`first_undeclared`) after the binding: a region run at a size torch never traced its program for
    (a stride-2 map 127 long where the file declares ``16*s`` of a stride-32 map) fails where nothing is wrong."""
    declared = declared_dims(model)
    dims = {i.name: [d if isinstance(d, int) else None for d in type_dims(i.type)[1] or ()]
            for i in graph_inputs(model) if i.type.HasField("tensor_type")}
    if input_shapes:
        yield dict(input_shapes), False
        steps = sorted(((a, b) for a in range(-_NEAR, _NEAR + 1) for b in range(-_NEAR, _NEAR + 1) if a or b),
                       key=lambda ab: (abs(ab[0]) + abs(ab[1]), ab))
        for da, db in steps:
            near = {}
            for name, shape in input_shapes.items():
                free = [a for a, v in enumerate(dims.get(name, [])) if v is None and a > 0]
                moved = list(shape)
                for a, delta in zip(free[-2:], (da, db)):
                    decl = declared.get(name) or []
                    moved[a] = _moved(decl[a] if a < len(decl) else None, moved[a], delta)
                near[name] = moved
            if all(v >= 1 for shape in near.values() for v in shape) and first_undeclared(declared, near) is None:
                yield near, True
    if not any(v is None for d in dims.values() for v in d):
        return
    sizes = list(_COMMON_SIZES) + [s for s in range(2, _SEARCH_MAX + 1) if s not in _COMMON_SIZES]
    square = []
    for s in sizes:
        binding = _sized(dims, s, s)
        if first_undeclared(declared, binding) is None:
            square.append(s)
            yield binding, False
    if any(sum(v is None and not (a == 0 and len(d) > 2) for a, v in enumerate(d)) > 1 for d in dims.values()):
        for s, t in zip(square, square[1:]):
            binding = _sized(dims, s, t)
            if first_undeclared(declared, binding) is None:
                yield binding, False


def _sized(dims: Mapping[str, list], s: int, t: int) -> dict[str, list[int]]:
    """Each input's symbolic dims at ``s``, its last one at ``t`` (a batch-like first dim of a rank > 2 input at 1)."""
    out = {}
    for name, d in dims.items():
        free = [a for a, v in enumerate(d) if v is None and not (a == 0 and len(d) > 2)]
        out[name] = [v if v is not None else 1 if a not in free else t if a == free[-1] else s for a, v in enumerate(d)]
    return out


def _moved(d, v: int, delta: int) -> int:
    """The size ``delta`` steps from ``v`` of a dim declared ``d``: ``delta`` values of its one symbol, else ``v +
    delta`` (0 where no such size)."""
    got = solved_dim(d, v) if isinstance(d, str) else None
    if got is None or got[1] is None:
        return v + delta
    return (evaluate(d, {got[0]: got[1] + delta}) or 0) if got[1] + delta >= 1 else 0

"""What a call on a source line writes out in its arguments (part of :mod:`.metadata`): an output size as
literals, the module's own attributes, or something the line computes or does not show; whether an argument
can only be a size (no tensor); and the names of calls and attributes known to hold no pool."""
from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = ["BUILTINS", "COMPUTED", "CONTAINER_CALLS", "NO_PROPERTIES", "PLAIN_CALLS", "TENSOR_ATTRIBUTES",
           "TORCH_NAMES", "OwnLength", "fixed_names", "ints_written", "own_resolved", "pooled_name", "sizes_only",
           "sizes_written", "unpacks"]

#: an output-size entry that the line computes from something (``x.shape[2] // 2``) or does not show
COMPUTED = "computed"


@dataclass(frozen=True)
class OwnLength:
    """An output-size entry that is the pooled tensor's own length along ``axis`` as written (``x.size(3)``,
    ``x.shape[-1]`` in ``F.adaptive_avg_pool2d(x, (1, x.size(3)))``): torch's None where ``axis`` is the entry's
    own axis (:func:`own_resolved`, which needs the input's rank), else a size the line computes."""

    axis: int

#: the names torch's modules go by on a line (``torch.flatten``, ``F.relu``, ``nn.functional.pad``)
TORCH_NAMES = frozenset({"torch", "F", "nn", "functional"})

#: calls that are no pooling and hold none (torch ops and tensor methods a line around a pool uses); any other
#: call, other than a submodule's (its nodes carry its own scope), may hold a pool
PLAIN_CALLS = frozenset({
    "interpolate", "upsample", "cat", "concat", "stack", "sum", "mean", "amax", "amin", "max", "min", "relu",
    "relu_", "sigmoid", "softmax", "log_softmax", "tanh", "gelu", "silu", "hardswish", "hardsigmoid", "mish",
    "leaky_relu", "elu", "flatten", "view", "reshape", "permute", "transpose", "contiguous", "size", "squeeze",
    "unsqueeze", "add", "sub", "mul", "div", "pad", "dropout", "chunk", "split", "expand", "expand_as", "repeat",
    "matmul", "bmm", "einsum", "float", "half", "to", "type_as", "clone", "detach", "abs", "exp", "log", "pow",
    "sqrt", "rsqrt", "clamp", "clamp_min", "clamp_max", "norm", "normalize", "layer_norm", "batch_norm",
    "group_norm", "conv1d", "conv2d", "conv3d", "linear", "tuple", "list", "int", "len", "range", "zip",
    "enumerate", "isinstance", "getattr", "new_zeros", "new_ones", "zeros", "ones", "zeros_like", "ones_like",
    "narrow", "select", "index_select", "gather", "masked_fill", "where", "roll", "flip", "numel", "dim",
})

#: Python builtins a line around a pool calls, which hold none; any other bare name may be the user's own
#: function (the exporter records no frame inside it), even one named like a torch op (``normalize``)
BUILTINS = frozenset({"tuple", "list", "int", "float", "bool", "len", "range", "zip", "enumerate", "isinstance",
                       "getattr", "min", "max", "sum", "abs", "round", "dict", "set", "str", "super", "type"})

#: a list's and a dict's methods (``outs.append(F.adaptive_avg_pool2d(x, (8, 3)))``): they hold no pool
CONTAINER_CALLS = frozenset({"append", "extend", "insert", "update", "setdefault"})

#: a tensor's attributes a line reads (``x.shape``); any other attribute of an object other than the module
#: and torch's may be a property that computes (``feats.pooled`` pooling inside)
TENSOR_ATTRIBUTES = frozenset({"shape", "T", "mT", "H", "mH", "dtype", "device", "data", "real", "imag", "ndim",
                                "is_cuda", "layout", "requires_grad", "grad"})

#: names whose attributes a line reads that are no properties of the model's: the module, torch's, and the
#: modules of constants (``math.pi``, ``np.newaxis``)
NO_PROPERTIES = frozenset({"self", *TORCH_NAMES, "math", "np", "numpy", "operator", "einops", "sys"})


def sizes_written(arg, k: int | None, fixed: frozenset[str] = frozenset(), pooled: str | None = None
                  ) -> tuple | None:
    """Per axis an int, None (torch's None) or COMPUTED; None: not written out (the module's own attribute,
    ``self.bins``, fixed when it was built as a pooling module's size is: known at the traced size alone).
    COMPUTED is anything else: ``x.shape[2] // 2``, and a variable or ``**kw``, whose value the line does not show
    (``s = (x.shape[2] // 2, 3)`` a line before reads the same), except a name the line itself binds to the
    module's attributes or literals (``for s in self.bins``: ``fixed``). ``pooled``: the name the call pools,
    where nothing on the call rebinds it; a tuple of literals and its lengths (``(1, x.size(3))``) has an
    :class:`OwnLength` entry for each length."""
    if arg is None:
        return None
    if pooled is not None and isinstance(arg, (ast.Tuple, ast.List)):
        own = [_own_axis(e, pooled) for e in arg.elts]
        if any(a is not None for a in own) and all(a is not None or isinstance(e, ast.Constant) and literal_ints(e)
                                                   for a, e in zip(own, arg.elts)):
            return tuple(e.value if a is None else OwnLength(a) for a, e in zip(own, arg.elts))
    if isinstance(arg, ast.Constant) and literal_ints(arg):
        return (arg.value,) * (k or 1)
    if isinstance(arg, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in arg.elts):
        out = [e.value if isinstance(e, ast.Constant) and literal_ints(e) else None if is_fixed(e, fixed) else COMPUTED
               for e in arg.elts]
        if COMPUTED in out:
            return tuple(COMPUTED if m is None and not isinstance(e, ast.Constant) else m
                         for m, e in zip(out, arg.elts))
        return None if any(not isinstance(e, ast.Constant) for e in arg.elts) else tuple(out)
    return None if is_fixed(arg, fixed) else (COMPUTED,) * (k or 1)


def is_fixed(e, fixed: frozenset[str]) -> bool:
    """``self.bins``, ``self.cfg.sizes``, ``self.sizes[i]``, ``tuple(self.sizes)``, or a name in ``fixed``: a value
    the module was built with (its shape excepted)."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("tuple", "list") and len(e.args) == 1:
        return is_fixed(e.args[0], fixed)
    if isinstance(e, ast.Subscript):  # ``self.sizes[i]``: the index fixed too (not ``self.sizes[x.shape[2] > 40]``)
        return is_fixed(e.value, fixed) and _index_fixed(e.slice, fixed)
    if isinstance(e, ast.Name):
        return e.id in fixed
    attrs = []
    while isinstance(e, ast.Attribute):
        attrs.append(e.attr)
        e = e.value
    # the module's own attribute, and what it holds (``self.cfg.out_hw``), but no tensor's shape (``self.w.shape``)
    return isinstance(e, ast.Name) and e.id == "self" and bool(attrs) and not {"shape", "size"} & set(attrs[:-1])


def _index_fixed(e, fixed: frozenset[str]) -> bool:
    """An index or slice of literals, fixed names and the module's attributes (``0``, ``-1``, ``1:``, ``i``)."""
    if e is None or isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.UnaryOp):
        return _index_fixed(e.operand, fixed)
    if isinstance(e, ast.BinOp):
        return _index_fixed(e.left, fixed) and _index_fixed(e.right, fixed)
    if isinstance(e, ast.Slice):
        return all(_index_fixed(v, fixed) for v in (e.lower, e.upper, e.step))
    if isinstance(e, ast.Tuple):
        return all(_index_fixed(v, fixed) for v in e.elts)
    return is_fixed(e, fixed)


#: builtins that iterate what they are given (``enumerate(self.bins)``: its items fixed where those are)
_ITERATING = frozenset({"enumerate", "zip", "reversed", "sorted", "list", "tuple"})
_SCOPES = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _iterates_fixed(e, fixed: frozenset[str]) -> bool:
    if is_fixed(e, fixed) or literal_ints(e):
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _ITERATING and e.args:
        return all(_iterates_fixed(a, fixed) for a in e.args) and not e.keywords
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("items", "values", "keys"):
        return is_fixed(e.func.value, fixed)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "range" and not e.keywords:
        return 1 <= len(e.args) <= 3 and all(literal_ints(a) or is_fixed(a, fixed) or _length_of_fixed(a, fixed)
                                             for a in e.args)
    if isinstance(e, (ast.Tuple, ast.List)):  # every item fixed: ``(1, n)`` binds the name to n in turn (review30)
        return all(_iterates_fixed(x, fixed) for x in e.elts)
    return False


def _changes(t, names) -> bool:
    """Whether node ``t`` rebinds or may change one of ``names``: an assignment to it (a walrus's target is a
    Store too), into it (``s[0] = ...``, ``s.k = ...``), or a method call on it (``s.append(...)``; review30)."""
    if isinstance(t, ast.Name):
        return isinstance(t.ctx, (ast.Store, ast.Del)) and t.id in names
    if isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(t.ctx, (ast.Store, ast.Del)):
        root = t.value
        while isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        return isinstance(root, ast.Name) and root.id in names
    return (isinstance(t, ast.Call) and isinstance(t.func, ast.Attribute) and isinstance(t.func.value, ast.Name)
            and t.func.value.id in names)


def _length_of_fixed(e, fixed: frozenset[str]) -> bool:
    """``len(self.sizes)``: the length of a value the module was built with (``range(len(self.sizes))``)."""
    return (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1
            and not e.keywords and is_fixed(e.args[0], fixed))


def _targets(t) -> set[str] | None:
    """The names a loop target binds, or None where it stores into something else (``sz[0]``, ``self.s``: that
    object changes, and no name is bound)."""
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        parts = [_targets(x) for x in t.elts]
        return None if any(p is None for p in parts) else set().union(*parts)
    return None


def _bound_fixed(target, it, fixed: frozenset[str]) -> set[str]:
    """The names of a loop's ``target`` fixed over ``it``: all where every item is fixed; by position where the
    items are tuples of the target's length (``for y, s in ((x, 1), (x * 2, 2))``: ``s``, not ``y``)."""
    names = _targets(target)
    if not names or (isinstance(it, (ast.Tuple, ast.List))
                     and any(isinstance(n, ast.List) for e in it.elts for n in ast.walk(e))):
        return set()  # (a list item may be changed through another name: ``t = s; t[0] = n``; review31)
    if _iterates_fixed(it, fixed):
        return names
    if not (isinstance(target, ast.Tuple) and isinstance(it, (ast.Tuple, ast.List)) and it.elts
            and all(isinstance(e, (ast.Tuple, ast.List)) and len(e.elts) == len(target.elts) for e in it.elts)):
        return set()
    return {t.id for k, t in enumerate(target.elts) if isinstance(t, ast.Name) and _once(t.id, target)
            and all(_iterates_fixed(e.elts[k], fixed) for e in it.elts)}


def _once(name: str, target) -> bool:
    """Whether ``name`` is bound at one place of a loop's ``target`` (``for s, s in ((1, n),)`` binds the last:
    ``n``; review31)."""
    return sum(isinstance(t, ast.Name) and t.id == name for t in ast.walk(target)) == 1


def fixed_names(tree, end: int | None = None) -> dict[int, frozenset[str]]:
    """Per call (by ``id``), the names fixed where it is: those a comprehension around it binds over the
    module's attributes or literals (``[F.adaptive_avg_pool2d(x, s) for s in self.bins]``, ``for i, s in
    enumerate((1, 2, 3, 6))``), in Python's scopes (a comprehension's name is its own; the same name outside it
    is the variable's). A zip with other iterables fixes nothing (which target holds what, only order says).
    ``end``: where the line's own text ends in ``tree`` (:func:`.metadata.parse_line`); a comprehension that goes
    on past it fixes nothing: its iterable (``for s in (`` closed as ``()``, or ``for s in`` completed with
    ``None``) or a further ``for`` is on the next line (review88: read as literals, exit 0 and OUT wrong)."""
    out: dict[int, frozenset[str]] = {}

    def visit(n, fixed: frozenset[str]) -> None:
        if isinstance(n, ast.Call):
            out[id(n)] = fixed
        if isinstance(n, _SCOPES):
            inner = set(fixed)
            cut = end is not None and (n.end_lineno, n.end_col_offset) > (1, end)
            parts = [part for f in ("elt", "key", "value") if (part := getattr(n, f, None)) is not None]
            used = parts + [c for g in n.generators for c in g.ifs]
            for gen in n.generators:
                visit(gen.iter, frozenset(inner))
                names = {t.id for t in ast.walk(gen.target) if isinstance(t, ast.Name)}
                inner = (inner - names) | (set() if cut else _loop_fixed(gen, used, frozenset(inner)))
                for cond in gen.ifs:
                    visit(cond, frozenset(inner))
            for part in parts:
                visit(part, frozenset(inner))
            return
        if isinstance(n, ast.For):  # ``for s in (1, 2, 3, 6): outs.append(F.adaptive_avg_pool2d(x, s))``, one line
            visit(n.iter, fixed)
            names = {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
            kept = _loop_fixed(n, n.body, fixed)
            for b in n.body:
                visit(b, frozenset((fixed - names) | kept))
            for b in n.orelse:
                visit(b, frozenset(fixed - names))
            return
        if isinstance(n, ast.Lambda):
            fixed = fixed - {a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)}
        for child in ast.iter_child_nodes(n):
            visit(child, fixed)

    visit(tree, frozenset())
    return out


def _loop_fixed(loop: ast.comprehension | ast.For, body: list, fixed: frozenset[str]) -> set[str]:
    """The names a loop (a comprehension's generator or a ``for``) binds to fixed values (by position through a zip
    or tuples), less any its ``body`` changes (``s.append(...)``; a method of a name not fixed, ``f.relu()``, is
    no change)."""
    kept = _zipped_fixed(loop, fixed)
    kept = _bound_fixed(loop.target, loop.iter, fixed) if kept is None else kept
    return set() if any(_changes(t, kept) for b in body for t in ast.walk(b)) else kept


def _zipped_fixed(gen: ast.comprehension | ast.For, fixed: frozenset[str]) -> set[str] | None:
    """For ``for y, s in zip((x, x * 2), self.sizes)``: the target names bound to a fixed iterable, by position
    (``s``); None where the loop is no zip into as many plain names."""
    e, t = gen.iter, gen.target
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "zip" and not e.keywords
            and isinstance(t, ast.Tuple) and len(t.elts) == len(e.args)
            and all(isinstance(x, ast.Name) for x in t.elts)):
        return None
    return {x.id for x, a in zip(t.elts, e.args) if _once(x.id, t) and _iterates_fixed(a, fixed)}


def literal_ints(e) -> bool:
    if isinstance(e, ast.Constant):
        return e.value is None or type(e.value) is int
    return isinstance(e, (ast.Tuple, ast.List)) and all(literal_ints(x) for x in e.elts)


def unpacks(call: ast.Call) -> bool:
    """``f(*args)`` or ``f(**kw)``: what it passes, the line does not show."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def sizes_only(e) -> bool:
    """An argument that can be no tensor: literals, and arithmetic on them and on shapes (``x.size(0)``)."""
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, (ast.Tuple, ast.List)):
        return all(sizes_only(x) for x in e.elts)
    if isinstance(e, ast.UnaryOp):
        return sizes_only(e.operand)
    if isinstance(e, ast.BinOp):
        return sizes_only(e.left) and sizes_only(e.right)
    return reads_a_shape(e)


def reads_a_shape(e) -> bool:
    """``x.shape``, ``x.size(2)``; not an attribute of the module's own named ``size`` (``self.size``)."""
    return any(isinstance(n, ast.Attribute) and n.attr in ("shape", "size")
               and not (isinstance(n.value, ast.Name) and n.value.id == "self") for n in ast.walk(e))


def ints_written(e) -> tuple[int, ...] | None:
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return (e.value,)
    if isinstance(e, (ast.Tuple, ast.List)) and all(isinstance(x, ast.Constant) and type(x.value) is int
                                                     for x in e.elts):
        return tuple(x.value for x in e.elts)
    return None


def pooled_name(call: ast.Call, kw: dict) -> str | None:
    """The name ``call`` pools (its first argument), where nothing on the call can rebind it (no walrus)."""
    x = call.args[0] if call.args else kw.get("input")
    if not isinstance(x, ast.Name) or any(isinstance(n, ast.NamedExpr) for n in ast.walk(call)):
        return None
    return x.id


def _own_axis(e, pooled: str) -> int | None:
    """The axis of ``pooled``'s length ``e`` reads as written: ``x.size(3)``, ``x.size(dim=-1)``, ``x.shape[3]``,
    ``x.size()[3]``; else None."""
    def index(v):
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub):
            i = index(v.operand)
            return None if i is None else -i
        return v.value if isinstance(v, ast.Constant) and type(v.value) is int else None

    def is_pooled(v):
        return isinstance(v, ast.Name) and v.id == pooled

    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" \
            and is_pooled(e.func.value) and len(e.args) + len(e.keywords) == 1:
        return index(e.args[0] if e.args else e.keywords[0].value if e.keywords[0].arg == "dim" else None)
    if isinstance(e, ast.Subscript):
        v = e.value
        if (isinstance(v, ast.Attribute) and v.attr == "shape" and is_pooled(v.value)) or (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "size"
                and is_pooled(v.func.value) and not v.args and not v.keywords):
            return index(e.slice)
    return None


def own_resolved(size: tuple | None, k: int, rank: int | None) -> tuple | None:
    """``size`` (one entry per axis of a ``k``-axis pool, or one for all) with each :class:`OwnLength` entry
    None where it reads its own axis of a ``rank``-dim input, else COMPUTED (a positive axis also where the rank
    is unknown: an unbatched input's axis 2 is its width)."""
    if size is None or not any(isinstance(m, OwnLength) for m in size):
        return size
    if len(size) == 1:
        size *= k
    return tuple(m if not isinstance(m, OwnLength) else None if len(size) == k and (
        m.axis == a - k if m.axis < 0 else rank is not None and m.axis == rank - k + a) else COMPUTED
                 for a, m in enumerate(size))

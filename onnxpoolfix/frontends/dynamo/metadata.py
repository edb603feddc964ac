"""What a dynamo-written node's metadata says about the torch call that made it: the one place that reads
``pkg.torch.onnx.class_hierarchy`` and ``pkg.torch.onnx.stack_trace`` (docs/dynamo-files.md says what is read).

The module: the innermost ``torch.nn`` pooling class of the hierarchy. The source line: the stack trace's last
line, parsed as Python (``ast``), never matched by pattern, so a comment or a string is no evidence. Each pooling
call on it is a :class:`PoolCall` with its literal arguments. A call to anything else that may hold a pool (a
helper function, a lambda, a call through a variable) makes the line *opaque*: the node may come from inside it.
That includes ``self.helper(x)``: the exporter records the frames of modules' ``forward`` only (timm's Inception:
``self._forward(x)``); not ``self.conv(x)`` of a submodule (its own scope: :func:`submodules`).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache

import onnx

from .call_args import (
    BUILTINS,
    COMPUTED,
    CONTAINER_CALLS,
    NO_PROPERTIES,
    PLAIN_CALLS,
    TENSOR_ATTRIBUTES,
    TORCH_NAMES,
    fixed_names,
    ints_written,
    pooled_name,
    sizes_only,
    sizes_written,
    unpacks,
)

__all__ = ["COMPUTED", "FRAME", "PoolCall", "SourceLine", "has_metadata", "module_pool", "parse_line", "source_line",
           "submodules"]

_MODULE_RE = re.compile(r"^torch\.nn\.modules\.pooling\.(Adaptive)?(Avg|Max)Pool([123])d$")
_ADAPTIVE_CALL = re.compile(r"^adaptive_(avg|max)_pool([123])d(_with_indices)?$")
_GENUINE_CALL = re.compile(r"^(avg|max)_pool([123])d(_with_indices)?$")


@dataclass(frozen=True)
class PoolCall:
    """One pooling call on a source line, with what it writes out literally (None where it does not)."""

    kind: str  # "avg" or "max"
    adaptive: bool  # adaptive pooling or an area resize (windows from sizes), not a kernel pool
    rank: int | None = None  # from the name (adaptive_avg_pool2d: 2); None for interpolate
    size: tuple | None = None  # adaptive: per axis an int, None (follows the input) or COMPUTED
    scales: bool = False  # an area resize by scale_factor: its output size follows the input
    kernel: tuple[int, ...] | None = None  # a kernel pool's literal kernel (one entry: every axis)
    stride: tuple[int, ...] | None = None  # its literal stride (None: the kernel, or not literal)
    literal: bool = True  # a kernel pool whose kernel, stride and options are all written out


@dataclass(frozen=True)
class SourceLine:
    text: str
    calls: tuple[PoolCall, ...]
    opaque: bool  # some call may hold a pool (a helper, a lambda), or the line is no statement
    loops: bool = True  # it may run a call more than once (a comprehension, a for header; unparsed: unknown)
    lookalike: str = ""  # a call named like torch's pooling, not through torch's names (``nnf.``, bare)


def _metadata(node: onnx.NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in getattr(node, "metadata_props", ())}


def has_metadata(node: onnx.NodeProto) -> bool:
    """Whether the node still carries the exporter's metadata (onnxslim and onnxsim drop it)."""
    return any(p.key.startswith("pkg.torch.onnx.") for p in getattr(node, "metadata_props", ()))


def module_pool(node: onnx.NodeProto) -> tuple[str, bool, int] | None:
    """(kind, adaptive, rank) of the innermost torch.nn pooling module in the node's class hierarchy, or None
    where the innermost module is no pooling module (a user's module calling F.* on its own line)."""
    text = _metadata(node).get("pkg.torch.onnx.class_hierarchy", "")
    entries = _literal(text) if text else ()
    if not isinstance(entries, tuple):
        return None
    modules = [e for e in entries if isinstance(e, str) and not e.startswith("aten.")]
    if not modules:
        return None
    m = _MODULE_RE.match(modules[-1])
    return (m.group(2).lower(), bool(m.group(1)), int(m.group(3))) if m else None


def _scopes(node: onnx.NodeProto) -> list[str] | None:
    text = _metadata(node).get("pkg.torch.onnx.name_scopes", "")
    scopes = _literal(text) if text else None
    return list(scopes) if isinstance(scopes, tuple) and all(isinstance(e, str) for e in scopes) else None


@lru_cache(maxsize=4096)
def _literal(text: str) -> tuple | object | None:
    """A metadata value read as a Python literal (a list as a tuple), or None where it is none. Cached: every node
    of a module repeats its hierarchy and scopes, and a network has thousands of nodes."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return tuple(value) if isinstance(value, list) else value


def submodules(nodes) -> dict[tuple[str, ...], frozenset[str]]:
    """Per module path (``('', 'a')``), the names of its submodules that made some node: a node's name scopes are
    its module path and, last, its op (``['', 'a', 'b', 'conv2d']``: ``b`` is a submodule of ``('', 'a')``)."""
    out: dict[tuple[str, ...], set[str]] = {}
    for n in nodes:
        scopes = _scopes(n) or []
        for i in range(1, len(scopes) - 1):
            out.setdefault(tuple(scopes[:i]), set()).add(scopes[i])
    return {path: frozenset(names) for path, names in out.items()}


def stack_trace(node: onnx.NodeProto) -> str:  # without the ^/~ rows Python 3.11 marks lines with (strict exports)
    text = _metadata(node).get("pkg.torch.onnx.stack_trace", "")
    return "\n".join(t for t in text.splitlines() if t.strip(" ^~")).strip()


def module_scope(node: onnx.NodeProto) -> tuple[str, ...]:
    """The path of the module whose call made the node (its name scopes without the op's own)."""
    return tuple(_scopes(node) or ())[:-1]


def last_line(node: onnx.NodeProto) -> str:
    trace = stack_trace(node).splitlines()
    return trace[-1].strip() if trace else ""


#: a frame's header in a stack trace (a trace that ends in one held no source text at the export: review56)
FRAME = re.compile(r'^\s*File "(.*)", line \d+, in \S+\s*$')
_TORCH_POOLING = re.compile(r"[\\/]torch[\\/]nn[\\/]modules[\\/]pooling\.py$")


def _caller_line(node: onnx.NodeProto) -> str | None:
    """Where the trace ends in torch's own pooling module (``F.adaptive_avg_pool2d(input, self.output_size)``),
    the line of the frame that called it, which may build the module there (``nn.AdaptiveAvgPool2d((h // 2,
    3))(x)``); None where the trace ends elsewhere."""
    trace = stack_trace(node).splitlines()
    files = [(i, m.group(1)) for i, t in enumerate(trace) if (m := FRAME.match(t))]
    if len(files) < 2 or not _TORCH_POOLING.search(files[-1][1]):
        return None
    i = files[-2][0]
    return trace[i + 1].strip() if i + 1 < len(trace) and not FRAME.match(trace[i + 1]) else None


def source_line(node: onnx.NodeProto, modules: dict[tuple[str, ...], frozenset[str]] | None = None
                ) -> SourceLine | None:
    """The node's source line read as Python, or None where the node has no stack trace. ``modules``
    (:func:`submodules` of the graph): which ``self.name(...)`` calls are submodules; without it none is."""
    children = (modules or {}).get(module_scope(node), frozenset())  # (no key of submodules is empty)
    text = last_line(node)
    if not text:
        return None
    caller = _caller_line(node)
    if caller is not None:  # the trace ends in torch's own pooling module, no registered submodule's
        inline = _inline_modules(caller)  # (module_pool reads those): built on the caller's line, or elsewhere
        if inline is None:
            return SourceLine(caller, _unseen_module(text), True)
        seen = _read_line(caller, children) or SourceLine(caller, (), True)
        return SourceLine(caller, inline, seen.opaque, seen.loops)
    return _read_line(text, children) or SourceLine(text, (), True)


@lru_cache(maxsize=4096)
def _read_line(text: str, children: frozenset[str]) -> SourceLine | None:
    """:func:`source_line` of one line of Python, None where no completion of it parses; cached (nodes repeat lines).
    A pool module built and called on it (``nn.AdaptiveAvgPool2d((4, 3))(x)``) is none of its calls (its caller's)."""
    parsed = parse_line(text)
    if parsed is None:
        return None
    tree, end = parsed
    calls, opaque, other, lookalike = [], False, False, ""
    fixed = fixed_names(tree, end)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    built = {id(x) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Call)
             and _MODULE_CALL.match(_name(n.func)) for x in (n, n.func)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Lambda) or (isinstance(n, ast.Attribute) and id(n) not in called
                                         and _may_be_a_property(n)):
            opaque = other = True
        if not isinstance(n, ast.Call) or _name(n) == _OPEN or id(n) in built:
            continue
        cut = n.end_col_offset > end  # its arguments go on past the line: none of them is known
        call = _pool_call(n, cut, fixed=fixed.get(id(n), frozenset()))
        if call is not None and not _torchs(n):  # named like torch's pooling, but anyone's: it may pool anything
            opaque, lookalike = True, lookalike or ast.unparse(n.func)
        elif call is not None:
            calls.append(call)
        elif _may_hold_a_pool(n, children):
            opaque = other = True
    loops = any(isinstance(n, (ast.comprehension, ast.For, ast.While)) for n in ast.walk(tree))
    return SourceLine(text, tuple(calls), opaque, loops, "" if other else lookalike)  # the whole reason only


_MODULE_CALL, _RESIZES = re.compile(r"^Adaptive(Avg|Max)Pool([123])d$"), ("interpolate", "upsample")


def _unseen_module(text: str) -> tuple[PoolCall, ...]:
    """torch's own pooling line of a module neither a submodule nor built on its caller's line (``pool =
    nn.AdaptiveAvgPool2d((h // 2, 3))`` a line before ``pool(x)``): the call, of a size the file does not show."""
    parsed = parse_line(text)
    calls = [_pool_call(n) for n in ast.walk(parsed[0]) if isinstance(n, ast.Call)] if parsed else []
    return tuple(PoolCall(c.kind, True, c.rank, (COMPUTED,) * (c.rank or 1)) for c in calls if c and c.adaptive)


def _inline_modules(line: str) -> tuple[PoolCall, ...] | None:
    """The adaptive pooling modules ``line`` builds and calls on the spot (``nn.AdaptiveAvgPool2d(s)(x)``), each
    with its sizes as written; None where it builds none (a submodule's call: its size was fixed when built)."""
    parsed = parse_line(line)
    if parsed is None:
        return None
    calls, fixed = [], fixed_names(*parsed)  # ``[nn.AdaptiveAvgPool2d(b)(x) for b in (2, 3)]``: b as F's calls
    for n in ast.walk(parsed[0]):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Call) and (m := _MODULE_CALL.match(_name(n.func))):
            k, built = int(m.group(2)), n.func
            kw = {a.arg: a.value for a in built.keywords if a.arg}
            arg = built.args[0] if built.args else kw.get("output_size")
            calls.append(PoolCall(m.group(1).lower(), True, k,
                                  sizes_written(arg, k, fixed.get(id(built), frozenset())) if arg is not None
                                  else (COMPUTED,) * k))
    return tuple(calls) or None


#: the name of the calls :func:`parse_line` opens where a line starts inside brackets
_OPEN = "__onnxpoolfix_open__"
_PAIRS = {")": "(", "]": "[", "}": "{"}


@lru_cache(maxsize=4096)
def parse_line(text: str) -> tuple[ast.AST, int] | None:
    """The line as Python, and where the line's own text ends in what was parsed (in UTF-8 bytes, as ``ast``'s
    column offsets count: review56). A statement continued over several lines is one line of it: brackets left
    open are closed after it, brackets it closes are opened before it (as a call, so keyword arguments parse), and
    a header (``for ... :``) gets a body. None where no such completion parses. Cached (many nodes share a line)."""
    code, opened, unopened = _brackets(text)
    head = "".join(f"{_OPEN}(" if c == ")" else _PAIRS[c] for c in reversed(unopened))
    tail = "".join({"(": ")", "[": "]", "{": "}"}[c] for c in reversed(opened))
    for lead in ("", "None"):
        for end in ("", " None", " pass"):
            try:
                return ast.parse(head + lead + code + end + tail), len((head + lead + code).encode())
            except SyntaxError:
                continue
    return None


def _brackets(text: str) -> tuple[str, list[str], list[str]]:
    """(the line without its comment, brackets it leaves open, closing brackets it has no opener for)."""
    stack, unopened = [], []  # type: list[str], list[str]
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif c == "#":
            return text[:i].rstrip(), stack, unopened
        elif c in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ("\"\"\"", "'''") else c
            i += len(quote)
            continue
        elif c in "([{":
            stack.append(c)
        elif c in ")]}":
            if stack and stack[-1] == _PAIRS[c]:
                stack.pop()
            else:
                unopened.append(c)
        i += 1
    return text, stack, unopened


def _name(call: ast.Call) -> str:
    """The called function's name; an aten overload's op (``torch.ops.aten.adaptive_avg_pool2d.default(x, [8,
    3])``, the FX code torch.export writes for a forward under ``torch.no_grad()``) by its op's name."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and _dotted(f.value.value) in _OPS:
        return f.value.attr
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


_OPS = frozenset({"torch.ops.aten", "torch.ops.prims"})


def _dotted(e) -> str:
    return f"{_dotted(e.value)}.{e.attr}" if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else ""


def _torchs(call: ast.Call) -> bool:
    """The call is made through torch's own names (``F.adaptive_avg_pool2d``, ``torch.ops.aten...``): a bare
    name (``from ... import adaptive_avg_pool2d``, or the user's own function of that name) or another namespace
    (``nnf.``, ``ops.``) may be anyone's, and the exporter records no frame inside it."""
    root = call.func
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(call.func, ast.Attribute) and isinstance(root, ast.Name) and root.id in TORCH_NAMES


def _self_call(call: ast.Call) -> str | None:
    """``name`` of a ``self.name(...)`` call, else None."""
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" else None


def _may_hold_a_pool(call: ast.Call, children: frozenset[str]) -> bool:
    f = call.func
    if _self_call(call) is not None:
        return _self_call(call) not in children  # a submodule's nodes carry their own scope; a method's do not
    name = _name(call)
    if isinstance(f, ast.Name):  # a bare name: a function of the user's (``normalize(x)``) unless a builtin
        return name not in BUILTINS
    if name in _RESIZES and _torchs(call):  # a mode the line does not write out may be "area"
        mode = {a.arg: a.value for a in call.keywords}.get("mode", call.args[3] if len(call.args) > 3 else None)
        return unpacks(call) or (mode is not None and not isinstance(mode, ast.Constant))
    if name in CONTAINER_CALLS:  # ``outs.append(F.adaptive_avg_pool2d(x, b))``; ``tracker.update(x)`` may pool
        return not call.args or not all(isinstance(a, ast.Call) for a in call.args) or bool(call.keywords)
    if not name or name not in PLAIN_CALLS:
        return True
    # ``torch.relu(x)``, ``F.relu(x)``, ``y.flatten(1)``, ``self.pool(x).view(b, -1)``: torch's. ``ops.relu(x)``
    # may be the user's own function named like a torch op (the exporter records no frame inside it): a call on
    # a bare name other than torch's modules that hands it anything but sizes may hold a pool
    root = f.value
    while isinstance(root, (ast.Attribute, ast.Subscript)):  # ``self.helpers[0].relu(x)``: the helper's, indexed
        root = root.value
    if isinstance(root, ast.Call):  # a method of what a call made: a tensor where torch's call or a module made it
        if _torchs(root) or (_name(root) in PLAIN_CALLS and _name(root) not in BUILTINS) or (
                _self_call(root) in children):
            return False  # ``F.adaptive_avg_pool2d(x, 3).flatten(1)``, ``self.fc(x).view(...)``
    elif not isinstance(root, (ast.Name, ast.IfExp, ast.BoolOp)) or getattr(root, "id", None) in TORCH_NAMES:
        return False  # torch's, or a constant's
    return unpacks(call) or not all(sizes_only(a) for a in [*call.args, *(k.value for k in call.keywords)])


def _may_be_a_property(e: ast.Attribute) -> bool:
    """An attribute read (not called) of a name other than ``self`` and torch's that no tensor has."""
    return isinstance(e.ctx, ast.Load) and isinstance(e.value, ast.Name) and e.value.id not in NO_PROPERTIES \
        and e.attr not in TENSOR_ATTRIBUTES


def _pool_call(call: ast.Call, cut: bool = False, fixed: frozenset[str] = frozenset()) -> PoolCall | None:
    """The pooling call ``call`` is, with its literal arguments; ``cut``: its arguments go on past the line, so
    none is known (an interpolate's mode among them); ``fixed``: names the line binds to fixed values
    (:func:`.call_args.fixed_names`)."""
    name = _name(call)
    m = _ADAPTIVE_CALL.match(name) or _GENUINE_CALL.match(name)
    if cut or (unpacks(call) and (m or name in _RESIZES)):  # (*args, **kw: none is known either)
        if name in _RESIZES:
            return PoolCall("avg", True, size=(COMPUTED,))
        if m is None:
            return None
        adaptive = name.startswith("adaptive")
        k = int(m.group(2))
        return PoolCall(m.group(1), adaptive, k, (COMPUTED,) * k if adaptive else None, literal=adaptive)
    kw = {a.arg: a.value for a in call.keywords if a.arg}
    if m := _ADAPTIVE_CALL.match(name):
        k = int(m.group(2))
        arg = call.args[1] if len(call.args) > 1 else kw.get("output_size")
        return PoolCall(m.group(1), True, k, sizes_written(arg, k, fixed, pooled_name(call, kw)))
    if name in _RESIZES:  # ``F.upsample``: torch's alias of F.interpolate (review56: its area resize was no call)
        mode = kw.get("mode", call.args[3] if len(call.args) > 3 else None)
        if not (isinstance(mode, ast.Constant) and mode.value == "area"):
            return None
        size = call.args[1] if len(call.args) > 1 else kw.get("size")
        scale = call.args[2] if len(call.args) > 2 else kw.get("scale_factor")
        if size is None or (isinstance(size, ast.Constant) and size.value is None):
            return PoolCall("avg", True, scales=scale is not None)
        return PoolCall("avg", True, None, sizes_written(size, None, fixed, pooled_name(call, kw)))
    if m := _GENUINE_CALL.match(name):
        kernel = call.args[1] if len(call.args) > 1 else kw.get("kernel_size")
        stride = call.args[2] if len(call.args) > 2 else kw.get("stride")
        options = call.args[3:] + [v for k, v in kw.items() if k not in ("input", "kernel_size", "stride")]
        kernel_t, stride_t = ints_written(kernel), None if stride is None else ints_written(stride)
        plain = all(isinstance(v, ast.Constant) and v.value in (0, False, None, True) for v in options)
        literal = kernel_t is not None and (stride is None or stride_t is not None) and plain
        return PoolCall(m.group(1), False, int(m.group(2)), kernel=kernel_t, stride=stride_t, literal=literal)
    return None



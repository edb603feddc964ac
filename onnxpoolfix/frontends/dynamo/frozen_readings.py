"""The readings of a pooling node the dynamo exporter may have frozen at the traced size: every way the
evidence allows to read it (a genuine pool, an adaptive pool frozen where its windows were uniform, an area
resize by scale_factor, or unknown), and which of them the traced size leaves (part of :mod:`.frozen`).
Readings differ at other sizes, so the caller replaces a node only where exactly one reading is left, and
refuses otherwise: a reading that could be wrong is no evidence. E.g. the line ``F.avg_pool2d(f, 2) +
F.adaptive_avg_pool2d(f, (4, 4))`` and a node K = S = 2: genuine (kernel 2), or adaptive 4x4 at a traced 8x8;
traced at 16x16 the adaptive reading needs K = 4, so only the genuine one is left.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx

from ...graph import attributes, constant_value
from ..exporter_pools import adaptive_sizes
from .call_args import own_resolved
from .metadata import COMPUTED, FRAME, has_metadata, module_pool, source_line

__all__ = ["ADAPTIVE", "GENUINE", "SCALES", "UNKNOWN", "Reading", "node_readings", "implied_traced", "at_traced",
           "window_attrs", "classifier_features"]

GENUINE, ADAPTIVE, SCALES, UNKNOWN = "genuine pool", "adaptive pool", "area resize by scale_factor", "unknown"


@dataclass(frozen=True)
class Reading:
    what: str  # GENUINE, ADAPTIVE, SCALES or UNKNOWN
    says: str  # where it was read (the module, the call on the line, "no metadata")
    size: tuple | None = None  # ADAPTIVE: per pooled axis an int, None (follows the input) or COMPUTED;
    #                            None: not written out (known only at the traced size)


def window_attrs(node: onnx.NodeProto) -> tuple[list[int], list[int]] | None:
    """(kernel, strides) of a pooling node whose windows a frozen adaptive pool could have, else None: such a
    node is what it says. Frozen means divisible at the traced size, where torch's decomposition (and 2.14's
    adaptive max translation) calls the pool with kernel = stride = n/m: no pads, no dilation, no ceil mode,
    kernel equal to stride on every axis. A MaxPool(3, stride 2) is AlexNet's or Inception's own pool even
    when its metadata is gone or its stack trace stops at a helper method's call."""
    attrs = attributes(node)
    kernel = list(attrs.get("kernel_shape", []))
    strides = list(attrs.get("strides", [1] * len(kernel)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if (not kernel or len(strides) != len(kernel) or any(attrs.get("pads", [])) or attrs.get("ceil_mode", 0)
            or any(d != 1 for d in attrs.get("dilations", [])) or auto_pad not in ("NOTSET", "VALID")
            or any(s < 1 or k != s for k, s in zip(kernel, strides))):
        return None
    return kernel, strides


def node_readings(node: onnx.NodeProto, kind: str, k: int, lifted: bool,
                  modules: dict[tuple[str, ...], frozenset[str]] | None = None, rank: int | None = None
                  ) -> list[Reading]:
    """Every reading the node's metadata allows (before any size is known). ``lifted``: a 2D node of an
    (N, C, 1, L) input whose first axis has single-element windows: a 1D pool may have written it.
    ``modules``: the graph's :func:`.metadata.submodules` (without it every ``self.name(...)`` call may hold
    the pool). ``rank``: the pooled tensor's as the call saw it (None: unknown), for a length the call reads of it."""
    if not has_metadata(node):
        return [Reading(UNKNOWN, "its exporter metadata is gone (onnxslim, onnxsim and the like drop it)")]
    module = module_pool(node)
    if module is not None and module[0] == kind and _rank_fits(module[2], k, lifted):
        name = f"{'Adaptive' if module[1] else ''}{kind.title()}Pool{module[2]}d"
        return [Reading(ADAPTIVE if module[1] else GENUINE, f"metadata: torch.nn.modules.pooling.{name}")]
    line = source_line(node, modules)
    if line is None:
        return [Reading(UNKNOWN, "its exporter metadata names no pooling and no source line")]
    kernel, strides = window_attrs(node) or ([], [])
    out: list[Reading] = []
    says = f"stack trace: {line.text[:100]}"
    for call in line.calls:
        if call.kind != kind or not _rank_fits(call.rank, k, lifted):
            continue
        if not call.adaptive:
            if not call.literal or _genuine_fits(call, kernel, strides, k, lifted):
                out.append(Reading(GENUINE, says))
        elif call.scales:
            out.append(Reading(SCALES, says))
        else:
            size = _expand(own_resolved(call.size, call.rank or k, rank), k, lifted)
            if size is not False and _sizes_fit(node, size, kernel, strides):
                out.append(Reading(ADAPTIVE, says, size))
    if line.opaque or not out:
        why = (f"its source line calls `{line.lookalike}`, named like torch's pooling but not through torch's own "
               "names (`F.`, `torch.`, `nn.functional.`): anyone's, it may pool anything (write it through them)"
               if line.lookalike else "its stack trace holds no source text (a model defined by exec() or in a "
               "notebook whose cells linecache does not hold): nothing says which call made it" if FRAME.match(
                   line.text) else "its source line calls something that may hold a pool" if line.opaque
               else "its source line holds no pooling call its windows fit")
        out.append(Reading(UNKNOWN, f"{why}: {line.text[:100]}"))
    return list(dict.fromkeys(out))


def at_traced(node: onnx.NodeProto, readings: list[Reading], traced: tuple[int, ...]) -> list[Reading]:
    """The readings left where the pooled axes were ``traced`` long at the export: an adaptive reading must
    pool them to its written sizes with exactly the node's windows."""
    sizes = adaptive_sizes(node, traced)
    return [r for r in readings if (sizes is not None or r.what not in (ADAPTIVE, SCALES)) and (
        r.what != ADAPTIVE or r.size is None or all(m == got or m is COMPUTED or (m is None and got == n)
                                                    for m, got, n in zip(r.size, sizes, traced)))]


def implied_traced(node: onnx.NodeProto, reading: Reading) -> tuple[int | None, ...] | None:
    """The pooled lengths at the export that an adaptive reading of written sizes implies (None on an axis that
    follows the input), or None where it implies none."""
    if reading.what != ADAPTIVE or reading.size is None or COMPUTED in reading.size:
        return None
    kernel, strides = window_attrs(node) or ([], [])
    if len(kernel) != len(reading.size):
        return None
    return tuple(None if m is None else (m - 1) * s + kk for m, kk, s in zip(reading.size, kernel, strides))


def _rank_fits(rank: int | None, k: int, lifted: bool) -> bool:
    return rank is None or rank == k or (lifted and rank == 1)


def _expand(size, k: int, lifted: bool):
    """A written size as one entry per pooled axis of the node (a lifted 1D size gets the unit axis first);
    None stays None (not written); False where it cannot be the node's."""
    if size is None:
        return None
    if lifted and len(size) == 1 and k == 2:
        return (1, size[0])
    if len(size) == 1 and k > 1:
        return size * k
    return tuple(size) if len(size) == k else False


def _genuine_fits(call, kernel, strides, k: int, lifted: bool) -> bool:
    want_k = call.kernel * k if len(call.kernel) == 1 else call.kernel
    want_s = want_k if call.stride is None else (call.stride * k if len(call.stride) == 1 else call.stride)
    if lifted and len(call.kernel) == 1 and k == 2:
        want_k, want_s = (1, call.kernel[0]), (1, (call.stride or call.kernel)[0])
    return list(want_k) == kernel and list(want_s) == strides


def _sizes_fit(node, size, kernel, strides) -> bool:
    """Whether some pooled lengths give exactly the node's windows for the written sizes (None: windows of one
    element; COMPUTED and unwritten sizes fit any)."""
    if size is None:
        return True
    traced = []
    for m, kk, s in zip(size, kernel, strides):
        if m is None:
            if (kk, s) != (1, 1):
                return False
            traced.append(1)
        elif m is COMPUTED:
            traced.append(kk)
        else:
            traced.append((m - 1) * s + kk)
    got = adaptive_sizes(node, tuple(traced))
    return got is not None and all(m in (None, COMPUTED) or m == g for m, g in zip(size, got))


#: ops a flattened pool output passes through unchanged in size on its way to a classifier
_SAME_SIZE = frozenset({"Relu", "Clip", "Dropout", "Identity", "Cast", "Sigmoid", "HardSwish", "LeakyRelu", "Gelu"})
_BINARY = frozenset({"Add", "Mul", "Sub", "Div", "Max", "Min"})
_POOLS = frozenset({"ReduceMean", "ReduceMax", "AveragePool", "MaxPool"})


def classifier_features(nodes, initializers, result: str, joined: bool = False, info=None) -> int | None:
    """The number of features a classifier after the pool takes: the pool's output, flattened from axis 1
    (through size-keeping ops, and a sum or product with a scalar or with another pool of the same tensor: timm's
    avgmax), meets a Gemm/MatMul whose constant weight takes that many (AlexNet's Linear after its 6x6 pool); None
    where no such consumer is found. Under symbolic sizes the pool's output size must then be fixed: a torch None
    would make the flattened length follow the input, which that weight takes at no other size. ``joined``: also
    through a Concat along the channels (timm's catavgmax), where the count is no longer the pool's alone.
    ``info`` (a :class:`.dataflow.LazyInfo`): also read torch's own view sizes where it flattened (review71)."""
    readers: dict[str, list] = {}
    made = {o: n for n in nodes for o in n.output}
    for n in nodes:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    constants = {n.output[0]: n for n in nodes if n.op_type == "Constant" and n.output}
    pooled = made[result].input[0] if result in made and made[result].input else None

    def beside(x):  # a scalar, or another pool's result of the pooled tensor
        v = constant_value(x, initializers, constants)
        return (v is not None and np.size(v) == 1) or (x in made and made[x].op_type in _POOLS
                                                   and made[x].input[:1] == [pooled])

    frontier, steps = [result], 0
    while frontier and steps < 16:  # a count, not a search: a few size-keeping ops between pool and classifier
        t, steps = frontier.pop(), steps + 1
        for n in readers.get(t, []):
            if (n.op_type in _SAME_SIZE and n.input[0] == t) or (
                    n.op_type in _BINARY and len(n.input) == 2 and all(x == t or beside(x) for x in n.input)) or (
                    joined and n.op_type == "Concat" and attributes(n).get("axis") == 1
                    and all(x == t or beside(x) for x in n.input)):
                frontier.append(n.output[0])
            elif _flattens_from_axis_1(n, t, initializers, constants, info):
                for c in readers.get(n.output[0], []):
                    if (features := _features(c, n.output[0], initializers)) is not None:
                        return features
    return None


def _flattens_from_axis_1(n, t: str, initializers, constants, info=None) -> bool:
    if n.op_type == "Flatten" and n.input[0] == t:
        return all(a.i == 1 for a in n.attribute if a.name == "axis")
    if n.op_type != "Reshape" or n.input[0] != t or len(n.input) < 2:
        return False
    target = constant_value(n.input[1], initializers, constants)  # [N, -1], or [1, C] of a static batch
    if target is None or len(target) != 2:
        return False
    return int(target[1]) == -1 or min(map(int, target)) >= 1 or (
        int(target[0]) == -1 and int(target[1]) > 1 and (_flatten_module(n) or _view_of_the_batch(n, t, info)))


def _flatten_module(n) -> bool:
    """``n`` is an ``nn.Flatten``'s (the innermost module of the exporter's ``class_hierarchy``): under a symbolic
    batch torch writes its ``flatten(p, 1)`` as a Reshape to [-1, C], which a per-position ``view(-1, C)`` writes
    too; an nn.Flatten of a pool's [N, C, 1, 1] to two dims whose last is longer than 1 is start_dim=1 alone
    (timm's SelectAdaptivePool2d(flatten=True) with a symbolic batch; review62)."""
    text = next((p.value for p in n.metadata_props if p.key == "pkg.torch.onnx.class_hierarchy"), "")
    modules = re.findall(r"'([^']+)'", text)
    return len(modules) >= 2 and modules[-2] == "torch.nn.modules.flatten.Flatten"


def _view_of_the_batch(n, t: str, info) -> bool:
    """``n`` is torch's ``view(t, [N, C])`` (or ``[N, -1]``), N the batch read from a tensor's size, which the
    exporter wrote as a Reshape to [-1, C] under a symbolic batch: ``torch.flatten(p, 1)``, ``p.flatten(1)``,
    ``p.view(p.size(0), -1)`` (torchvision's resnet18 and r3d_18 heads; review71). The exporter's ``fx_node``
    keeps the sizes as torch gave them: a ``%sym_size_int`` first, where a per-position ``view(-1, C)`` has -1;
    and it declares that first size the same symbol as ``t``'s batch. torch's view of [N, C, ...] to N rows keeps
    the element count, so the pooled axes are 1 wherever torch runs."""
    fx = next((p.value for p in n.metadata_props if p.key == "pkg.torch.onnx.fx_node"), "")
    if info is None or not re.search(r"aten\.view\.default\]\(args = \(%" + re.escape(t)
                                     + r", \[%sym_size_int\w*, -?\d+\]\)", fx):
        return False
    src, dst = info.params.get(t), info.params.get(n.output[0])  # the exporter's own symbols (ranks differ)
    return bool(src and dst and len(dst) == 2 and src[0] and src[0] == dst[0])


def _features(n, x: str, initializers) -> int | None:
    """The number of input features the Gemm/MatMul ``n`` takes from ``x`` through a constant weight."""
    if len(n.input) < 2 or n.input[0] != x or n.input[1] not in initializers:
        return None
    dims = list(initializers[n.input[1]].dims)
    if n.op_type == "MatMul" and len(dims) == 2:
        return dims[0]
    if n.op_type == "Gemm" and len(dims) == 2:
        trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
        return dims[1] if trans_b else dims[0]
    return None

"""Small read-only helpers over ONNX graphs, each defined once: the subgraph walk, the names nodes read,
the default-domain opset, and protobuf's repeated-field test and field copy. A leaf module: it imports only onnx."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Iterator

import onnx
from onnx import numpy_helper

#: the names the ONNX default domain goes by
STANDARD_DOMAINS = ("", "ai.onnx")


def named_subgraphs(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """``(attribute name, body)`` for every body a node holds (If branches, Loop/Scan bodies)."""
    return [(a.name, g) for a in node.attribute
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


#: torch's TorchScript exporter (2.9.1, 2.13, 2.14.1 measured) writes permute's and movedim's negative axes into
#: a Transpose's perm as given, which ONNX refuses; not read as torch means them: torch's own inference over such
#: a perm can size what follows from made-up dims (a MaxPool of kernel 49 over a symbolic axis, measured)
NEGATIVE_PERM_HINT = ("torch's TorchScript exporter writes permute's and movedim's negative axes as given, which "
                      "ONNX refuses and shape inference cannot follow: write them non-negative "
                      "(x.permute(0, 3, 1, 2)), or export with dynamo=True")


def negative_perms(graph: onnx.GraphProto) -> list[str]:
    """The Transposes of ``graph`` (not its bodies) whose perm holds a negative axis."""
    return [n.name or n.output[0] for n in graph.node if n.op_type == "Transpose" and n.output
            and any(p < 0 for a in n.attribute if a.name == "perm" for p in a.ints)]


def attributes(node: onnx.NodeProto) -> dict:
    """A node's attributes by name, as Python values."""
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies a node holds (If branches, Loop/Scan bodies)."""
    return [g for _, g in named_subgraphs(node)]


def graph_holding(graph: onnx.GraphProto, name: str) -> onnx.GraphProto | None:
    """The graph (``graph`` or a body at any depth) whose nodes write ``name``; None where none does."""
    if any(name in n.output for n in graph.node):
        return graph
    return next((g for n in graph.node for sub in subgraphs(n) if (g := graph_holding(sub, name))), None)


def nodes_deep(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """``nodes`` in order, each followed by the nodes of its subgraphs (recursively)."""
    for node in nodes:
        yield node
        for sub in subgraphs(node):
            yield from nodes_deep(sub.node)


def read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name read by a node, including implicit reads from subgraphs."""
    return {i for n in nodes_deep(graph.node) for i in n.input if i}


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """Names a node's bodies (If branches, Loop/Scan bodies) read from outside themselves: unlike
    :func:`read_names`, not the names a body makes itself (nor a nested body's reads of them)."""
    out: list[str] = []
    for sub in subgraphs(node):
        made = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        made |= {t.name for t in sub.initializer}
        for n in sub.node:
            out.extend(i for i in list(n.input) + outer_reads(n) if i and i not in made)
    return out


def default_opset(model: onnx.ModelProto) -> int | None:
    """The model's default-domain (ai.onnx) opset, or None when it imports none."""
    return next((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), None)


def is_repeated(fd) -> bool:
    """Whether a protobuf field descriptor is a repeated field (``label`` is deprecated in protobuf 5+)."""
    is_rep = getattr(fd, "is_repeated", None)
    return bool(is_rep) if is_rep is not None else fd.label == fd.LABEL_REPEATED


def copy_field(dst, field, value) -> None:
    """Field ``field`` (a descriptor) of message ``dst`` set to a copy of ``value``."""
    if is_repeated(field):
        getattr(dst, field.name).extend(value)
    elif field.message_type:
        getattr(dst, field.name).CopyFrom(value)
    else:
        setattr(dst, field.name, value)


def arrange(field, order: Iterable) -> None:
    """Make the repeated message field ``field`` hold exactly ``order`` (items of ``field`` itself, each at most
    once), in that order, in place: items move by pointer (a stable sort, then one slice deletion at the tail),
    none is copied. ``del field[:]`` then ``extend`` would copy every kept item (whole weights for
    ``graph.initializer``: seconds on a 500 MB model), and deleting items one by one is quadratic."""
    items = list(field)  # holds the wrappers, so ``id`` stays each item's own while sorting
    rank = {id(x): k for k, x in enumerate(order)}
    if len(rank) == len(items) and all(rank.get(id(x)) == k for k, x in enumerate(items)):
        return
    field.sort(key=lambda x: rank.get(id(x), len(rank)))
    del field[len(rank):]


def keep_only(field, keep) -> int:
    """Remove the items of the repeated message field ``field`` for which ``keep(item)`` is false, in place and
    without copying the rest (see :func:`arrange`). Returns how many went."""
    kept = [x for x in field if keep(x)]
    removed = len(field) - len(kept)
    if removed:
        arrange(field, kept)
    return removed


def constant_value(name: str, initializers, constants):
    """``name``'s value where an initializer or a Constant node (``constants``: output -> node) holds it, as a
    list; None otherwise, and where its bytes are not in the proto (a light copy's stub)."""
    tensor = initializers[name] if name in initializers else next(
        (a.t for a in constants[name].attribute if a.name == "value"), None) if name in constants else None
    if tensor is None:
        return None
    try:
        return numpy_helper.to_array(tensor).tolist()
    except Exception:  # noqa: BLE001 - external data: no values to read here
        return None


def drop_unread(graph: onnx.GraphProto, names: Iterable[str], removable: Callable[[onnx.NodeProto], bool],
                freed: Iterable[str] = ()) -> int:
    """Remove, working back from the tensors ``names``, every ``removable`` node none of whose outputs is read
    (by a node, a body, or as a graph output); its inputs lose a reader, and their producers are tried in turn.
    Then the initializers among ``names``, ``freed`` and the removed nodes' reads that nothing reads go, with
    their graph-input entries (IR 3 and keep_initializers_as_inputs list them: they would become inputs the
    caller must feed). Returns how many nodes went."""
    names = [t for t in names if t]
    outputs = {o.name for o in graph.output}
    nodes = list(graph.node)
    reads = [[i for i in n.input if i] + [i for sub in subgraphs(n) for i in read_names(sub)] for n in nodes]
    readers = Counter(i for r in reads for i in r)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    freed = set(freed) | set(names)
    alive = [True] * len(nodes)
    todo = [producer[t] for t in names if t in producer]
    while todo:  # a worklist over reader counts
        k = todo.pop()
        if not alive[k] or not removable(nodes[k]) or any(readers[o] or o in outputs for o in nodes[k].output if o):
            continue
        alive[k] = False
        for i in reads[k]:
            freed.add(i)
            readers[i] -= 1
            if not readers[i] and i in producer:
                todo.append(producer[i])
    removed = alive.count(False)
    if removed:
        arrange(graph.node, [n for n, keep in zip(nodes, alive) if keep])
    read = {i for r, keep in zip(reads, alive) if keep for i in r} | outputs
    unused = {t.name for t in graph.initializer if t.name in freed and t.name not in read}
    if unused:
        for field in (graph.initializer, graph.input):
            keep_only(field, lambda t: t.name not in unused)
    return removed

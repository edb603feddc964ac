"""The per-axis size search of the dynamo front end (onnxpoolfix/frontends/dynamo/search.py), a source
line's output size (source_line: the line parsed as Python) and the check's declared step, without torch."""
from __future__ import annotations

import itertools

import pytest
from onnx import helper

from onnxpoolfix.check.feeds import declared_step
from onnxpoolfix.frontends.dynamo.frozen_readings import UNKNOWN, node_readings
from onnxpoolfix.frontends.dynamo.metadata import COMPUTED, source_line, submodules
from onnxpoolfix.frontends.dynamo.search import SizeSpace, branch_class, evaluate, symbols


def test_declared_dim_expressions_evaluate_as_python_integers():
    assert evaluate("(((H - 1)//2)) + 1", {"H": 20}) == 10
    assert evaluate("(W//4)", {"W": 63}) == 15
    assert evaluate("32*h", {"h": 3}) == 96 and evaluate(7, {}) == 7
    assert evaluate("H", {}) is None and evaluate("H**2", {"H": 2}) is None and evaluate(None, {}) is None
    assert symbols("(((H - 1)//2)) + 1") == {"H"} and symbols("__import__('os')") is None


@pytest.mark.parametrize("n,m,adaptive", [(10, 4, False), (11, 4, True), (12, 4, False), (13, 6, False),
                                          (10, 6, True), (3, 4, True), (2, 4, False)])
def test_branch_class_is_torchs_adaptive_flag(n, m, adaptive):
    """torch's decomposition: adaptive = not (n % m == 0 or m % (n % m) == 0)."""
    divisible, got, longest = branch_class(n, m)
    assert (divisible, got) == (n % m == 0, adaptive)
    starts = [i * n // m for i in range(m)]
    ends = [-(-(i + 1) * n // m) for i in range(m)]
    assert longest >= max(e - s for s, e in zip(starts, ends))  # the gather is never shorter than a window


def test_the_search_reaches_every_pair_of_branch_classes_of_a_non_square_map():
    """A 10x13 map (UPerNet's PPM traced at 20x26) pooled to 6x6: the traced classes are reached in pairs,
    although no square size shares them, and every size tried is consistent with the input's."""
    space = SizeSpace.of({"p": [1, 4, "(((H - 1)//2)) + 1", "(((W - 1)//2)) + 1"], "x": [1, 3, "H", "W"]},
                         "p", ["x"], (6, 6))
    assert space is not None
    want = (branch_class(10, 6), branch_class(13, 6))
    assert not any((branch_class(n, 6), branch_class(n, 6)) == want for n in range(1, 300))
    seen = []
    for env in itertools.islice(space.bindings(), 400):
        xs, shapes = space.at(env)
        assert shapes["x"][2:] == (env["H"], env["W"]) and xs[2:] == ((env["H"] - 1) // 2 + 1, (env["W"] - 1) // 2 + 1)
        seen.append((branch_class(xs[2], 6), branch_class(xs[3], 6)))
    assert want in seen
    assert len(seen) == len(set(seen))  # one size per pair of classes


def test_a_source_sized_by_other_symbols_is_no_space():
    """'s39' is a size the exporter renamed: binding it from the pooled size alone would feed x another size."""
    assert SizeSpace.of({"p": [1, 4, "s39", "s94"], "x": [1, 3, "32*h", "32*w"]}, "p", ["x"], (3, 3)) is None
    assert SizeSpace.of({"p": [1, 4, "H", "W"]}, "p", ["x"], (3, 3)) is None  # x undeclared


def _node(line: str):
    n = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    p = n.metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.stack_trace", f'File "m.py", line 3, in forward\n    {line}'
    p = n.metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.name_scopes", "['', 'head', 'avg_pool2d']"
    return n


@pytest.mark.parametrize("line,want", [
    ("return F.adaptive_avg_pool2d(x, (4, 7))", [(4, 7)]),
    ("return F.adaptive_avg_pool2d(x, (None, 1))", [(None, 1)]),
    ("return F.adaptive_avg_pool2d(x, 5)", [(5, 5)]),
    ("y = F.interpolate(x, size=(3, 6), mode='area')", [(3, 6)]),
    ("return F.adaptive_avg_pool2d(x, (x.shape[2] // 2, 4))", [(COMPUTED, 4)]),
    # names the line does not bind: what they hold it does not show (k = x.shape[2] // 4 a line before)
    ("return F.interpolate(F.interpolate(y, size=(k, k), mode='area'), size=y.shape[-2:], mode='nearest')",
     [(COMPUTED, COMPUTED)]),
    ("return self.pool(x)", []),
    ("return F.adaptive_avg_pool2d(x,", [(COMPUTED, COMPUTED)]),  # continued on the next line: not shown
    ("y = F.avg_pool2d(f, 4)  # same as F.adaptive_avg_pool2d(f, (4, 4)) at 16x16", []),  # a comment is no call
    ("a = F.adaptive_avg_pool2d(f, (2, 2)); b = F.adaptive_avg_pool2d(f, 4)", [(2, 2), (4, 4)]),
    # arithmetic on names the line does not define (h, w = x.shape[2:] a line before): may follow the input
    ("return F.adaptive_avg_pool2d(x, (h // 2, w // 3))", [(COMPUTED, COMPUTED)]),
    ("return F.adaptive_avg_pool2d(x, (round(H / r), 4))", [(COMPUTED, 4)]),
    ("return F.adaptive_avg_pool2d(x, self.size)", [None]),  # the module's attribute, no shape read
    ("return F.adaptive_avg_pool2d(x, tuple(self.sizes))", [None]),  # a builtin around it computes nothing
    ("return F.adaptive_avg_pool2d(x, (int(h / 2), 4))", [(COMPUTED, 4)]),
    ("return [F.adaptive_avg_pool2d(x, s) for s in self.bins]", [None]),  # bound on the line to the module's
    ("return [F.adaptive_avg_pool2d(x, (s, 2)) for s in (1, 2, 4)]", [None]),  # or to literals
    # review12: a size held in a variable, unpacked or cut may be computed from the input a line before
    ("return F.adaptive_avg_pool2d(x, s)", [(COMPUTED, COMPUTED)]),
    ("return F.adaptive_avg_pool2d(x, (n, 3))", [(COMPUTED, 3)]),
    ("return F.adaptive_avg_pool2d(x, **kw)", [(COMPUTED, COMPUTED)]),
    ("return F.adaptive_avg_pool2d(*args)", [(COMPUTED, COMPUTED)]),
    ("return F.adaptive_avg_pool2d(x, (self.h, 3))", [None]),  # the module's attribute
    ("return F.adaptive_avg_pool2d(x, self.cfg.out_hw)", [None]),  # and what it holds (review14)
    ("return F.adaptive_avg_pool2d(x, self.w.shape[2:])", [(COMPUTED, COMPUTED)]),  # but no tensor's shape
    # review14: a comprehension's name is its own; the same name outside it is the variable's
    ("return F.adaptive_avg_pool2d(x, s) * sum(1 for s in self.bins)", [(COMPUTED, COMPUTED)]),
    ("return [F.adaptive_avg_pool2d(x, b) for i, b in enumerate(self.bins)]", [None]),
    ("return [F.adaptive_avg_pool2d(y, s) for y, s in zip((x, x * 2), self.sizes)]", [None]),
    ("return [F.adaptive_avg_pool2d(y, s) for s, y in zip(sizes, (x, x))]", [(COMPUTED, COMPUTED)]),
    ("return F.adaptive_avg_pool2d(x, (self.h, n))", [(COMPUTED, COMPUTED)]),  # (None would be torch's None)
    ("y, i = F.adaptive_max_pool2d_with_indices(x, (8, 3))", [(8, 3)]),  # review12 F14: torch's, with indices
    ("return F.interpolate(x, **kw)", [(COMPUTED,)]),  # its mode may be "area", its size anything
    # a forward under torch.no_grad(): the trace ends in the FX code torch.export writes (review12 F21)
    ("adaptive_avg_pool2d = torch.ops.aten.adaptive_avg_pool2d.default(x, [8, 3]);  x = None", [(8, 3)]),
    ("adaptive_avg_pool2d = torch.ops.aten.adaptive_avg_pool2d.default(x, [floordiv, 3])", [(COMPUTED, 3)]),
])
def test_a_source_lines_output_sizes(line, want):
    line = source_line(_node(line))
    assert [c.size for c in line.calls if c.adaptive] == want


@pytest.mark.parametrize("line,opaque", [
    ("return downsample(tok, side, 5)", True),  # a helper may hold the pool
    ("return (lambda t: t)(F.adaptive_avg_pool2d(x, 3))", True),
    ("return helper(F.adaptive_avg_pool2d(x,", True),  # continued, and a helper around it
    ("return self.fc(F.adaptive_avg_pool2d(x, 3).flatten(1))", False),  # a submodule carries its own scope
    ("return self.pool(F.adaptive_avg_pool2d(x, 3).flatten(1))", True),  # a method: the trace stops at its call
    ("return torch.cat([F.avg_pool2d(x, 2), x.mean((2, 3), keepdim=True)], 1)", False),
    # a bare name is the user's own function, even one named like a torch op: no frame inside it is recorded
    ("return F.adaptive_avg_pool2d(x, (4, 6)), normalize(x)", True),
    ("return F.normalize(F.adaptive_avg_pool2d(x, 3).flatten(1)), len(x)", False),
    # a mode the line does not write out may be "area"
    ("return F.interpolate(x, size=(2, 3), mode=self.mode) + F.adaptive_avg_pool2d(x, (2, 3))", True),
    ("return F.interpolate(x, size=(2, 3), mode='nearest') + F.adaptive_avg_pool2d(x, (2, 3))", False),
    # review12: a call on a name other than torch's, named like a torch op, that is handed a tensor may be the
    # user's own function (``ops.relu`` in another file, whose frame the exporter does not record)
    ("return F.adaptive_avg_pool2d(x, (16, 4)), ops.relu(x)", True),
    ("return F.adaptive_avg_pool2d(x, (16, 4)), nnf.relu(x)", True),  # (an alias of torch's, unknown here)
    ("return F.adaptive_avg_pool2d(x, (16, 4)), torch.nn.functional.relu(x)", False),
    ("return F.adaptive_avg_pool2d(x, (16, 4)).view(x.size(0), -1), x.flatten(1)", False),  # sizes only
    ("return F.adaptive_avg_pool2d(x, (16, 4)), y.reshape(b, -1)", True),  # b: a tensor or a size?
    ("return F.adaptive_avg_pool2d(x, (16, 4)), self.ops.relu(x)", True),  # a namespace behind an attribute
    ("return F.adaptive_avg_pool2d(x, (16, 4)), pkg.ops.relu(x)", True),
    ("return F.adaptive_avg_pool2d(x, (16, 4)), feats.pooled", True),  # a property may compute a pool
    ("return F.adaptive_avg_pool2d(x, (16, 4)), x.shape[2], x.dtype", False),  # a tensor's own attributes
    ("outs.append(F.adaptive_avg_pool2d(x, (8, 3)))", False),  # a list's method holds no pool
    ("return F.adaptive_avg_pool2d(x, (8, 3)), tracker.update(x)", True),  # handed a tensor: may be anyone's
    ("return F.adaptive_avg_pool2d(x, (4, 3)) * math.pi", False),  # a constant of a module (review14)
    # named like torch's pooling, through a name that may be anyone's: the user's own function of that name
    ("return adaptive_avg_pool2d(x, (8, 3))", True),
    ("return nnf.adaptive_avg_pool2d(x, (8, 3))", True),
    ("return utils.interpolate(x, size=(2, 3), mode='nearest') + F.adaptive_avg_pool2d(x, (2, 3))", True),
    ("return torch.nn.functional.adaptive_avg_pool2d(x, (8, 3))", False),
    # review16: a helper's method named like a tensor's, reached through an index of the module's list
    ("return self.helpers[0].relu(x) + F.adaptive_avg_pool2d(x, (8, 4))", True),
    ("return x[0].relu() + F.adaptive_avg_pool2d(x, (4, 3))", False),  # a tensor's, indexed
    # review17: or through what a builtin or a conditional gives; a tensor torch's call made is none of these
    ("return getattr(self, 'helper').relu(x) + F.adaptive_avg_pool2d(x, (8, 4))", True),
    ("return (self.a if f else self.b).relu(x) + F.adaptive_avg_pool2d(x, (8, 4))", True),
    ("return torch.cat([x, x], 1).mul(y) + F.adaptive_avg_pool2d(x, (4, 3))", False),
])
def test_a_line_that_may_hide_a_pool_is_opaque(line, opaque):
    """Which ``self.name`` is a submodule comes from the graph's scopes: ``fc`` made nodes under ``head.fc``, so it
    is one; ``pool`` made none, so it may be a method of the module (whose frame the exporter does not record)."""
    conv = helper.make_node("Gemm", ["a", "b"], ["c"])
    p = conv.metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.name_scopes", "['', 'head', 'fc', 'linear']"
    node = _node(line)
    assert source_line(node, submodules([conv, node])).opaque is opaque



@pytest.mark.parametrize("line,lookalike", [
    ("return nnf.adaptive_avg_pool2d(x, (8, 3))", "nnf.adaptive_avg_pool2d"),
    ("return adaptive_avg_pool2d(x, (8, 3)) + F.adaptive_avg_pool2d(x, (8, 3))", "adaptive_avg_pool2d"),
    ("return helper(x) + F.adaptive_avg_pool2d(x, (8, 3))", None),  # opaque, but named like no pooling
    ("return helper(x) + nnf.adaptive_avg_pool2d(x, (8, 3))", None),  # review21 F3: writing F. would not do
])
def test_a_refusal_names_the_pooling_call_not_reached_through_torchs_names(line, lookalike):
    """review16 #8: the refusal says which call looks like torch's pooling and that writing it through torch's
    names (as the docs say) lets the line be read; a plain helper keeps the general reason."""
    (reading,) = [r for r in node_readings(_node(line), "avg", 2, False) if r.what == UNKNOWN]
    if lookalike is None:
        assert "may hold a pool" in reading.says and "torch's own names" not in reading.says
    else:
        assert f"`{lookalike}`" in reading.says and "torch's own names" in reading.says

def test_declared_step_reads_multiples_of_symbols():
    free = {"x": (1, 3, "32*h", "32*w"), "y": (1, "n", "h*8")}
    assert declared_step(free, {"x": [2, 3], "y": [2]}) == 32
    assert declared_step({"x": (1, 3, "H", "W")}, {"x": [2, 3]}) == 1

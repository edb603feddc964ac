"""Frozen dynamo pools (uniform windows at the traced size, symbolic H/W) whose source line writes the output
size in a form the reading once took for a computed one, and so refused (review27): a one-line ``for`` over
literals (a tuple, ``range``, tuples read by position). Each patched file is compared with torch itself at
other sizes; each twin that looks alike but computes its size from the input stays refused (review30: a name
among the literals, a loop target that stores into a list, a flag or an index the forward computes from the
input's shape, the pooled tensor's own shape read beside a generator's pool that runs on the same line)."""
from __future__ import annotations

from pathlib import Path

import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch


class OneLineFor(nn.Module):
    def forward(self, x):
        outs = []
        for s in (1, 2, 3, 6): outs.append(F.adaptive_avg_pool2d(x, s).flatten(1))  # noqa: E701
        return torch.cat(outs, 1)


class OneLineRange(nn.Module):
    def forward(self, x):
        outs = []
        for s in range(1, 4): outs.append(F.adaptive_avg_pool2d(x, s).flatten(1))  # noqa: E701
        return torch.cat(outs, 1)


class ByPosition(nn.Module):  # the tuples' second items are literals; the first, tensors, are not sizes
    def forward(self, x):
        outs = []
        for y, s in ((x, 2), (x * 2, 3)): outs.append(F.adaptive_avg_pool2d(y.relu(), s).flatten(1))  # noqa: E701
        return torch.cat(outs, 1)


class ForZip(nn.Module):  # a one-line for over a zip: the sizes by position
    def __init__(self):
        super().__init__()
        self.sizes = (2, 3)

    def forward(self, x):
        outs = []
        for f, s in zip((x, x * 2), self.sizes): outs.append(F.adaptive_avg_pool2d(f, s).flatten(1))  # noqa: E701
        return torch.cat(outs, 1)


class ForZipComputed(nn.Module):  # the twin: the zipped sizes hold one computed from the input
    def forward(self, x):
        outs = []; n = x.shape[2] // 12  # noqa: E702
        for f, s in zip((x, x * 2), (2, n)): outs.append(F.adaptive_avg_pool2d(f, s).flatten(1))  # noqa: E701
        return torch.cat(outs, 1)


class RangeOfLength(nn.Module):  # the module's sizes by index over range(len(...))
    def __init__(self):
        super().__init__()
        self.sizes = (2, 3)

    def forward(self, x):
        return torch.cat([F.adaptive_avg_pool2d(x, self.sizes[i]).flatten(1) for i in range(len(self.sizes))], 1)


#: name -> (module, traced size, whether the size needs --traced-shape to be decided)
CASES = {"one_line_for": (OneLineFor, (36, 36), True), "one_line_range": (OneLineRange, (36, 36), True),
         "by_position": (ByPosition, (36, 36), True), "range_of_length": (RangeOfLength, (36, 36), True),
         "for_zip": (ForZip, (36, 36), True)}
OTHER = [(37, 29), (64, 48), (9, 13), (23, 17), (40, 41)]


def _export(module, hw, path: Path):
    dims = {2: torch.export.Dim("H", min=2, max=512), 3: torch.export.Dim("W", min=2, max=512)}
    return export_live(module.eval(), torch.randn(1, 3, *hw), path, dims)


@pytest.mark.parametrize("name", list(CASES))
def test_patched_equals_torch_at_other_sizes(name, tmp_path: Path):
    make, hw, needs_traced = CASES[name]
    m = make().eval()
    model = _export(m, hw, tmp_path / "in.onnx")
    assert any(n.op_type == "AveragePool" for n in model.graph.node)  # the premise: frozen at the traced size
    out = onnxpoolfix.patch(model, traced_shapes={"x": [1, 3, *hw]}).model
    assert_matches_torch(out, m, [(1, 3, *s) for s in [hw, *OTHER]], rtol=1e-5, atol=1e-5)
    if needs_traced:  # two readings (or a size only n / kernel gives) without the traced size: refused
        with pytest.raises(UnsupportedNodeError):
            onnxpoolfix.patch(model)
    else:
        assert_matches_torch(onnxpoolfix.patch(model).model, m, [(1, 3, *s) for s in OTHER], rtol=1e-5, atol=1e-5)


class Training(nn.Module):  # a flag of the module's: read like any attribute a forward may set (below)
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, 7 if self.training else 5)


class FlagFromShape(nn.Module):  # the flag set from the input's shape: 7 above 40 rows (review30 W2)
    def forward(self, x):
        self.big = x.shape[2] > 40
        return F.adaptive_avg_pool2d(x, 7 if self.big else 5)


class IndexFromShape(nn.Module):  # the module's sizes, indexed by a flag of the input's shape
    def __init__(self):
        super().__init__()
        self.sizes = (5, 7)

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.sizes[int(x.shape[2] > 40)])


class ForTupleName(nn.Module):  # a name among the literals: s takes n = H // 7 in turn (review30 W1)
    def forward(self, x):
        outs = []; n = x.shape[2] // 7  # noqa: E702
        for s in (1, n): outs.append(F.adaptive_avg_pool2d(x, s))  # noqa: E701
        return outs[1] * 2


class ComprehensionTupleName(nn.Module):  # the same in a comprehension
    def forward(self, x):
        n = x.shape[2] // 7
        return [F.adaptive_avg_pool2d(x, s) for s in (1, n)][1] * 2


class ForTupleTarget(nn.Module):  # by position: t takes n
    def forward(self, x):
        outs = []; n = x.shape[2] // 7  # noqa: E702
        for s, t in ((1, n),): outs.append(F.adaptive_avg_pool2d(x, t))  # noqa: E701
        return outs[0] * 2


class ForSubscriptTarget(nn.Module):  # the loop stores into the list; its other item is computed (review30 W3)
    def forward(self, x):
        outs = []; sz = [1, x.shape[2] // 7]  # noqa: E702
        for sz[0] in (1, 2): outs.append(F.adaptive_avg_pool2d(x, sz[1]))  # noqa: E701
        return outs[1] * 2


class ComprehensionSubscriptTarget(nn.Module):
    def forward(self, x):
        sz = [1, x.shape[2] // 7]
        return [F.adaptive_avg_pool2d(x, sz[1]) for sz[0] in (1, 2)][1] * 2


class ForListChanged(nn.Module):  # the loop's own list changed in its body (review30 W7)
    def forward(self, x):
        outs = []
        for s in ([1, 1],): s[0] = x.shape[2] // 7; outs.append(F.adaptive_avg_pool2d(x, s))  # noqa: E701, E702
        return outs[0] * 2


class ForListAppended(nn.Module):
    def forward(self, x):
        outs = []
        for s in ([1],): s.append(max(x.shape[2] // 7, 1)); outs.append(F.adaptive_avg_pool2d(x, s))  # noqa: E701, E702
        return outs[0] * 2


class ForListAliased(nn.Module):  # the loop's list item changed through another name (review31)
    def forward(self, x):
        outs = []; n = x.shape[2] // 7  # noqa: E702
        for s in ([5, 5],): t = s; t[0] = n; outs.append(F.adaptive_avg_pool2d(x, s))  # noqa: E701, E702
        return outs[0] * 2


class ForTwiceBound(nn.Module):  # one name twice in the target: it ends as the last item, n (review31)
    def forward(self, x):
        outs = []; n = x.shape[2] // 7  # noqa: E702
        for s, s in ((1, n),): outs.append(F.adaptive_avg_pool2d(x, s))  # noqa: E701
        return outs[0] * 2


class ZipTwiceBound(nn.Module):
    def forward(self, x):
        n = x.shape[2] // 7
        return [F.adaptive_avg_pool2d(x, s) for s, s in zip((1,), (n,))][0] * 2


class TrainingOrComputed(nn.Module):  # the twin: one branch computes from the input
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, 7 if self.training else (x.shape[2] // 7, 7))


class ForRebound(nn.Module):  # the loop's name rebound on the line before the call
    def forward(self, x):
        outs = []
        for s in (1, 2, 3, 6): s = x.shape[2] // (7 * s); outs.append(F.adaptive_avg_pool2d(x, s).flatten(1))  # noqa: E702, E701
        return torch.cat(outs, 1)


class ForNextLine(nn.Module):  # the call on the loop's next line: the trace keeps that line alone
    def forward(self, x):
        outs = []
        for s in (1, 2, 3, 6):
            outs.append(F.adaptive_avg_pool2d(x, s).flatten(1))
        return torch.cat(outs, 1)


class ShapeTail(nn.Module):  # the identity, but the reading cannot tell its node from a hidden pool's (below)
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, x.shape[-2:]) * 2


class LazyBesideShape(nn.Module):  # a generator's pool runs on the consumer's line: k1 s1 at 35x35 (review30 W5)
    def forward(self, x):
        y = F.avg_pool2d(x, 7)
        g = (F.adaptive_avg_pool2d(y, 5) for _ in (0,))
        outs = [F.adaptive_avg_pool2d(x, x.shape[-2:])] + [t for t in g]
        return outs[1], outs[0]


TWINS = {"training_or_computed": (TrainingOrComputed, (35, 28)), "for_rebound": (ForRebound, (42, 42)),
         "for_next_line": (ForNextLine, (36, 36)), "training": (Training, (35, 25)),
         "flag_from_shape": (FlagFromShape, (35, 25)), "index_from_shape": (IndexFromShape, (35, 25)),
         "for_tuple_name": (ForTupleName, (35, 35)), "comprehension_tuple_name": (ComprehensionTupleName, (35, 35)),
         "for_tuple_target": (ForTupleTarget, (35, 35)), "for_subscript_target": (ForSubscriptTarget, (35, 35)),
         "comprehension_subscript_target": (ComprehensionSubscriptTarget, (35, 35)),
         "for_list_changed": (ForListChanged, (35, 35)), "for_list_appended": (ForListAppended, (35, 35)),
         "for_zip_computed": (ForZipComputed, (36, 36)), "for_list_aliased": (ForListAliased, (35, 35)), "for_twice_bound": (ForTwiceBound, (35, 35)), "zip_twice_bound": (ZipTwiceBound, (35, 35)),
         "shape_tail": (ShapeTail, (37, 29)), "lazy_beside_shape": (LazyBesideShape, (35, 35))}


@pytest.mark.parametrize("name", list(TWINS))
def test_twins_that_compute_their_size_are_refused_or_exact(name, tmp_path: Path):
    make, hw = TWINS[name]
    m = make().eval()
    try:
        model = _export(m, hw, tmp_path / "in.onnx")
    except Exception as e:  # noqa: BLE001 - torch's exporter may refuse a size computed from a symbolic dim
        pytest.skip(f"torch cannot export it: {type(e).__name__}")
    for traced in ({"x": [1, 3, *hw]}, None):
        try:
            out = onnxpoolfix.patch(model, traced_shapes=traced).model
        except UnsupportedNodeError:
            continue
        assert_matches_torch(out, m, [(1, 3, *s) for s in [hw, *OTHER]], rtol=1e-5, atol=1e-5)


class OthersShape(nn.Module):  # the twin: another tensor's shape (half the size), uniform k2 at an even size
    def forward(self, x):
        y = F.avg_pool2d(x, 2)
        return F.adaptive_avg_pool2d(x, y.shape[-2:]) * 2


class Rebound(nn.Module):  # the twin: the name rebound inside the size argument (a walrus, after the first)
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x := x[:, :, ::2, ::2]).shape[-2:]) * 2


@pytest.mark.parametrize("make", [OthersShape, Rebound])
def test_another_tensors_shape_is_refused_or_exact(make, tmp_path: Path):
    m = make().eval()
    try:
        model = _export(m, (36, 28), tmp_path / "in.onnx")
    except Exception as e:  # noqa: BLE001 - torch's exporter may refuse the form
        pytest.skip(f"torch cannot export it: {type(e).__name__}")
    for traced in ({"x": [1, 3, 36, 28]}, None):
        try:
            out = onnxpoolfix.patch(model, traced_shapes=traced).model
        except UnsupportedNodeError:
            continue
        assert_matches_torch(out, m, [(1, 3, 36, 28), (1, 3, 40, 44), (1, 3, 37, 29), (1, 3, 64, 48)],
                             rtol=1e-5, atol=1e-5)

"""A dynamo region traced where the pooled map is smaller than the output (n < m on some axis): UperNet's 6x6
pyramid level of a 3x4 map (a stride-32 backbone at 97x130). torch's decomposition is right there only in
the upsampling branch classes; the per-axis search tried those after every pair of pooling classes, past its
budget, and refused the file ("no input size found") though --traced-shape proved it at once. Where metadata
names the pool they now come right after the first pooling class. Real torch 2.13 dynamo exports."""
from __future__ import annotations

import itertools

import pytest

from onnxpoolfix.frontends.dynamo.search import SizeSpace, branch_class

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class Pyramid(nn.Module):
    def __init__(self, bins):
        super().__init__()
        self.pools = nn.ModuleList(nn.AdaptiveAvgPool2d(b) for b in bins)

    def forward(self, x):
        return tuple(p(x) for p in self.pools)


@pytest.mark.parametrize("bins,hw", [((6,), (3, 4)), ((1, 2, 3, 6), (3, 4)), ((8,), (3, 16)), ((5, 3), (4, 2))])
def test_a_region_traced_below_its_output_size_is_found_without_the_traced_shape(bins, hw):
    module = Pyramid(bins)
    model = export_symbolic_hw(module, hw)
    sizes = [hw, (9, 11), (5, 3), (13, 6), (31, 17)]
    assert max(errors_vs_torch(module, model, sizes[1:], seed=3).values()) > 1e-3  # wrong as exported
    result = patch(model)  # no traced_shapes=: the search reaches the traced (upsampling) classes
    errs = errors_vs_torch(module, result.model, sizes, seed=3)
    assert all(e < 1e-5 for e in errs.values()), errs


def test_with_metadata_stripped_the_upsampling_classes_keep_their_place():
    """From structure alone (two sizes asked for) nothing moves: a 3x4 map pooled to 6x6 stays refused."""
    model = export_symbolic_hw(Pyramid((6,)), (3, 4))
    for n in model.graph.node:
        del n.metadata_props[:]
    with pytest.raises(UnsupportedNodeError):
        patch(model)


def test_the_upsampling_classes_come_right_after_the_first_pooling_class():
    space = SizeSpace.of({"p": [1, 4, "H", "W"]}, "p", [], (6, 6))
    seen = [space.at(env)[0][2:] for env in itertools.islice(space.bindings(identity=True), 40)]
    classes = [tuple(branch_class(n, 6) for n in xs) for xs in seen]
    up = {branch_class(n, 6) for n in (3, 4)}  # the two upsampling classes of an axis pooled to 6
    assert all(pair in classes[:25] for pair in itertools.product(up, up))
    plain = [space.at(env)[0][2:] for env in itertools.islice(space.bindings(), 600)]
    assert not any(n < 6 for xs in plain[:100] for n in xs)  # without metadata: after the pooling classes

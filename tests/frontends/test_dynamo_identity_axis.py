"""A dynamo region traced where one pooled axis is already the output size (n == m): UPerNet's 6x6 pyramid
level of a 6x5 map (a ConvNeXt backbone at 211x173). torch's decomposition takes its own branch at n == m,
right there only, so the per-axis search must try that size; it used to skip it ("identity windows prove
nothing") and refused the file, though --traced-shape proved it at once. Real torch 2.13 dynamo exports."""
from __future__ import annotations

import itertools

import pytest

from onnxpoolfix.frontends.dynamo.search import SizeSpace

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class Level6(nn.Module):
    """A stride-2 map pooled to 6x6 (traced 12x10: a 6x5 map, H identity, W upsampled)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(6)

    def forward(self, x):
        return self.pool(self.conv(x))


def _export(module, hw):
    return export_symbolic_hw(module, hw)


def _errors(module, model, sizes) -> dict:
    return errors_vs_torch(module, model, sizes, seed=5)


@pytest.mark.parametrize("hw", [(12, 10), (10, 12), (12, 22)])
def test_a_region_whose_traced_axis_is_identity_is_found_without_the_traced_shape(hw):
    module = Level6()
    model = _export(module, hw)
    sizes = [hw, (9, 13), (20, 7), (31, 30), (64, 48)]
    assert max(_errors(module, model, sizes[1:]).values()) > 1e-3  # the export as written is wrong there
    result = patch(model)  # no traced_shapes=: the search finds the traced branches
    errs = _errors(module, result.model, sizes)
    assert all(e < 1e-5 for e in errs.values()), errs
    assert [n.lowering for n in result.report.nodes] == ["dynamic"]


def test_with_metadata_stripped_an_identity_axis_alone_is_still_no_proof():
    """From structure alone two sizes are asked for, and the identity size is not offered: still refused."""
    model = _export(Level6(), (12, 10))
    for n in model.graph.node:
        del n.metadata_props[:]
    with pytest.raises(UnsupportedNodeError):
        patch(model)


def test_the_identity_size_comes_early_and_never_on_every_axis():
    space = SizeSpace.of({"p": [1, 4, "(((H - 1)//2)) + 1", "(((W - 1)//2)) + 1"], "x": [1, 3, "H", "W"]},
                         "p", ["x"], (6, 6))
    plain = [space.at(env)[0][2:] for env in itertools.islice(space.bindings(), 600)]
    assert not any(6 in xs for xs in plain)  # as before, without identity=True
    seen = [space.at(env)[0][2:] for env in itertools.islice(space.bindings(identity=True), 600)]
    assert (6, 6) not in seen and len(seen) == len(set(seen))
    assert {xs for xs in seen[:4] if 6 in xs} == {(6, 7), (7, 6)}  # second on each axis, beside the first class
    assert sum(xs[0] == 6 for xs in seen) >= 30  # paired with many classes of the other axis

"""A --traced-shape the graph contradicts: the hint names an input size the graph is right at (review41: alexnet
exported at 2x3x97x131, N, H and W symbolic, given x:1,3,200,180, the hint named the pooled size 1x256x7x7, the
region's proof having no value for the batch symbol). Its own file: the exports are keyed by the test file's
bytes (tests/support/export_cache.py), so test_dynamo_traced.py's recorded ones stay valid."""
from __future__ import annotations

import math

import pytest
from export_cache import dynamo_export

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

from dynamo_exports import errors_vs_torch, export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import ShapeError, UnsupportedNodeError


class BatchPooled(nn.Module):
    """AlexNet's head: AdaptiveAvgPool2d(6) of a map smaller than 6 (traced 2x3: torch's decomposition takes
    the branches of 6 % n == 0), exported with the batch symbolic too."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(6)

    def forward(self, x):
        return self.pool(self.conv(x))


def test_a_contradicted_traced_shape_names_an_input_size_with_the_given_batch():
    torch.manual_seed(0)
    module = BatchPooled().eval()
    dims = {"x": {0: torch.export.Dim("N", min=1, max=64), 2: torch.export.Dim("H", min=2, max=1024),
                  3: torch.export.Dim("W", min=2, max=1024)}}
    model = dynamo_export(module, (torch.randn(2, 3, 2, 3),), dynamic_shapes=dims, input_names=["x"])
    with pytest.raises(ShapeError, match="contradicts the graph") as err:
        patch(model, traced_shapes={"x": [1, 3, 5, 4]}, check=False)  # 5x4 -> 6x6 takes other branches
    data = err.value.data
    assert data["regions"] and len(data["pooled"]) == 4 and data["pooled"][:2] == [1, 4]
    (shape,) = data["right_at"].values()
    assert shape[:2] == [1, 3] and shape[2:] == data["pooled"][2:]  # a 1x1 conv: the pooled size is the input's
    assert "sizes such as x:" + ",".join(map(str, shape)) in err.value.hint
    # the size named is one the graph is right at: given as the traced size, OUT is exact
    errs = errors_vs_torch(module, patch(model, traced_shapes=data["right_at"]).model, [(2, 3), (5, 4), (13, 9)],
                           seed=3, relative=True)
    assert all(e < 1e-5 for e in errs.values()), errs


class Classifier(nn.Module):
    """review40 F5's cls_53: a conv, AdaptiveAvgPool2d((5, 3)) and a Linear, traced at 37x23."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(3, 8, 2), nn.AdaptiveAvgPool2d((5, 3)), nn.Linear(120, 4)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x).relu()).flatten(1))


@pytest.mark.parametrize("declared", [True, False], ids=["declared sizes", "value_info stripped"])
def test_a_huge_traced_shape_runs_the_region_at_it_a_bounded_number_of_times(declared, monkeypatch):
    """review40 F5: --traced-shape x:1,3,100000,23 (a typo for 100) ran for minutes: a size beyond
    search.MAX_SYMBOL left the per-axis search (symbol_binding solved symbols up to it) for the whole-model one,
    which ran the region at each of the 168 sizes near the bound one, all as large. Now the per-axis search takes
    it (the verdict is the one at a small wrong size), and the whole-model one runs sizes near a bound size that
    did not prove within an element budget. Counted runs, never seconds."""
    from onnxpoolfix.frontends.dynamo import proof_search

    torch.manual_seed(0)
    model = export_symbolic_hw(Classifier(), (37, 23))
    if not declared:  # no dim expressions: the whole-model search
        del model.graph.value_info[:]
    runs = []
    prove = proof_search.prove
    monkeypatch.setattr(proof_search, "prove", lambda *a, **k: runs.append(a[5]) or prove(*a, **k))
    with pytest.raises((ShapeError, UnsupportedNodeError)) as huge:
        patch(model, traced_shapes={"x": [1, 3, 20000, 23]}, check=False)
    big = [xs for xs in runs if xs[-2] > 1000]
    # the bound size, and (stripped) the near ones within 1 << 24 elements: 3.5M each here
    assert big and len(big) <= (1 if declared else 1 + -(-(1 << 24) // math.prod(big[0]))), len(big)
    if declared:
        with pytest.raises(ShapeError) as small:
            patch(model, traced_shapes={"x": [1, 3, 200, 23]}, check=False)
        assert huge.type is ShapeError and huge.value.data["pooled"] == small.value.data["pooled"]

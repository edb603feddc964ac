"""A --traced-shape the graph contradicts, where several pools pool one map (review48: UperNet's PSP head from
transformers, traced at 197x131, given 384x256): the hint said "the graph is right at sizes such as X" with X a
size one region was right at; another level differed there, and given X the next refusal named a third size.
The size is now the region's own, and said so."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn = torch.nn

from dynamo_exports import export_symbolic_hw

from onnxpoolfix import patch
from onnxpoolfix.errors import ShapeError


class Pyramid(nn.Module):
    """A 1x1 conv, then PSP levels 2, 3, 6 of one map (traced 6x4: 2 and 3 divide 6, 6 keeps it)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.levels = nn.ModuleList([nn.AdaptiveAvgPool2d(k) for k in (2, 3, 6)])

    def forward(self, x):
        f = self.conv(x)
        return torch.cat([p(f).flatten(1) for p in self.levels], 1)


def test_a_contradicted_pyramid_names_a_size_as_one_regions_not_the_graphs():
    model = export_symbolic_hw(Pyramid(), (6, 4))
    assert patch(model, traced_shapes={"x": [1, 3, 6, 4]}, check=False).model is not None
    with pytest.raises(ShapeError, match="contradicts the graph") as err:
        patch(model, traced_shapes={"x": [1, 3, 12, 8]}, check=False)
    right_at = err.value.data["right_at"]
    named = "sizes such as x:" + ",".join(map(str, right_at["x"]))
    assert named in err.value.hint
    try:  # the size named, given: if the graph were right there, the hint might say so
        patch(model, traced_shapes=right_at, check=False)
    except ShapeError:
        assert "the graph is right at" not in err.value.hint, err.value.hint
        assert "region '" in err.value.hint and "other pools" in err.value.hint

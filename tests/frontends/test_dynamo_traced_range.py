"""review56 F7: a Python branch on a size (``if x.shape[2] > 40``) narrows the range torch.export proves its
program for, silently under ``Dim.DYNAMIC`` and within a Dim's bounds alike, and the file holds the branch
taken alone: below H = 41 torch's model pools to 4, the file (and OUT) to 6, and nothing in the graph tells
a written 6 from a branch's. The file's metadata keeps the range (``range_constraints``): the report names it
(``traced-range``), where OUT equals torch; a file whose sizes torch left free gets no such note."""
from __future__ import annotations

import onnx
import pytest

from onnxpoolfix.frontends.dynamo.ranges import RANGE_KEY, narrowed_ranges

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch  # noqa: E402
from export_cache import dynamo_export  # noqa: E402

from onnxpoolfix import patch  # noqa: E402


@pytest.mark.parametrize("text, want", [
    ("{s53: VR[41, 256], s0: VR[4, 256]}", [("s53", "41", "256"), ("s0", "4", "256")]),
    ("{s53: VR[2, int_oo], s0: VR[2, int_oo]}", []),  # Dim.DYNAMIC, nothing narrowed
    ("{s77: VR[0, int_oo], s53: VR[2, 64]}", [("s53", "2", "64")]),
    ("", []),
    # a derived Dim (``8*h``): its key is the expression, not the symbol it names (review59 F1: "s39 in [8, 512]")
    ("{8*s39: VR[8, 512], 8*s94: VR[8, 512], s39: VR[2, 64], s94: VR[2, 64]}",
     [("8*s39", "8", "512"), ("8*s94", "8", "512"), ("s39", "2", "64"), ("s94", "2", "64")]),
    ("{2*s1 + 1: VR[5, 129], s1: VR[2, int_oo]}", [("2*s1 + 1", "5", "129")]),
])
def test_the_narrowed_ranges_are_read_from_the_metadata(text, want):
    model = onnx.ModelProto()
    if text:
        model.metadata_props.add(key=RANGE_KEY, value=text)
    assert narrowed_ranges(model) == want


class BranchOnHeight(nn.Module):
    def forward(self, x):
        if x.shape[2] > 40:
            return F.adaptive_avg_pool2d(x, 6)
        return F.adaptive_avg_pool2d(x, 4)


class Plain(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, 6)


def _export(module):
    dyn = torch.export.Dim.DYNAMIC
    return dynamo_export(module, (torch.randn(1, 3, 48, 48),), input_names=["x"],
                         dynamic_shapes={"x": {2: dyn, 3: dyn}})


def test_a_branch_on_a_size_is_named_with_its_range():
    module = BranchOnHeight().eval()
    result = patch(_export(module))
    (note,) = [n for n in result.report.notes if n.code == "traced-range"]
    assert [r[1:] for r in note.data["ranges"]] == [["41", "int_oo"]] and "[41, int_oo]" in note
    # OUT equals torch inside the range (H > 40), non-square and odd
    errs = errors_vs_torch(module, result.model, [(48, 48), (41, 67), (97, 53)], seed=0)
    assert max(errs.values()) < 1e-5, errs


def test_free_sizes_get_no_range_note():
    result = patch(_export(Plain().eval()))
    assert "traced-range" not in [n.code for n in result.report.notes]

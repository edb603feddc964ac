"""review70: ``--input-shape`` on a dynamo file whose inputs' dims torch renamed (a named ``Dim("H")``, a derived
``8*h``, a ``dynamic_axes`` name): the range check of review65 read torch's symbols (``s53``, ``8*s39``) alone, so a
binding outside the file's range_constraints bound OUT where the file is not torch's model (exit 0, OUT 0.7 to 1.5 off
torch at the one size it accepts). The keys are read in the inputs' dim names now; a size the declared dim cannot take
(``8*h`` bound to 33) is a usage error (exit 2)."""
from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn = torch.nn

from dynamo_exports import assert_matches_torch, ranged_model  # noqa: E402
from export_cache import dynamo_export  # noqa: E402

from onnxpoolfix import patch  # noqa: E402
from onnxpoolfix.cli import main  # noqa: E402
from onnxpoolfix.errors import ArgumentError, ShapeError  # noqa: E402
from onnxpoolfix.frontends.dynamo.ranges import key_names, outside_ranges, unchecked_ranges  # noqa: E402

pytestmark = pytest.mark.torch


class Branchy(nn.Module):
    """A Python branch on H: torch.export narrows H to [17, ..] and the file holds only the branch taken."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        if x.shape[2] > 16:
            x = x * 2
        return self.pool(x)


class BranchyW(nn.Module):
    """The branch on H (declared ``8*h``), the pool on W alone: a binding's pooled size is right at any H."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(7)

    def forward(self, x):
        if x.shape[2] > 16:
            x = x * 2
        return self.pool(x.mean(2))


def _export(module, hw, **kwargs) -> onnx.ModelProto:
    torch.manual_seed(0)
    return dynamo_export(module.eval(), (torch.randn(1, 3, *hw),), input_names=["x"], **kwargs)


def _patched_or_refused(model, module, shape, refused=ShapeError):
    """patch at ``shape`` for both targets: refused, or OUT equal to torch there (what exit 0 promises)."""
    outcomes = []
    for target in ("onnxruntime", "portable"):
        try:
            out = patch(model, target=target, input_shapes={"x": shape}).model
        except refused:
            outcomes.append("refused")
            continue
        torch.manual_seed(1)
        assert_matches_torch(out, module, [shape], rtol=1e-5, atol=1e-6)
        outcomes.append("bound")
    return outcomes


def _cli_exit(model, tmp_path, shape) -> int:
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(dst), "--input-shape", "x:" + ",".join(map(str, shape))])
    assert r.exit_code == 0 or not dst.exists(), r.output
    return r.exit_code


def _dims():
    return {"named": dict(dynamic_shapes={"x": {2: torch.export.Dim("H", min=4, max=64),
                                                3: torch.export.Dim("W", min=4, max=64)}}),
            "dynamic_axes": dict(dynamic_axes={"x": {2: "height", 3: "width"}})}


@pytest.mark.parametrize("how", ["named", "dynamic_axes"])
def test_a_renamed_dim_bound_outside_the_range_refused(how, tmp_path):
    """16x15 (the region is right there, H outside [17, ..]): exit 0 with OUT 0.93 off torch before; refused (exit 4,
    nothing written) now. 20x13, inside the range, still binds, exact against torch."""
    module = Branchy()
    model = _export(module, (17, 13), **_dims()[how])
    assert _patched_or_refused(model, module, [1, 3, 16, 15]) == ["refused", "refused"]
    assert _cli_exit(model, tmp_path, [1, 3, 16, 15]) == 4
    assert _patched_or_refused(model, module, [1, 3, 20, 13]) == ["bound", "bound"]


def test_a_derived_dim_bound_outside_the_range_refused(tmp_path):
    """``8*h`` narrowed to h in [3, 8]: H = 16 (h = 2) bound OUT 0.37 off torch before; refused now (exit 4). 32, in
    range, binds exact. 33, no multiple of 8, is a usage error (exit 2) naming the dim."""
    module = BranchyW()
    dims = {"x": {2: 8 * torch.export.Dim("h", min=1, max=8), 3: torch.export.Dim("W", min=4, max=64)}}
    model = _export(module, (24, 13), dynamic_shapes=dims)
    assert _patched_or_refused(model, module, [1, 3, 16, 13]) == ["refused", "refused"]
    assert _cli_exit(model, tmp_path, [1, 3, 16, 13]) == 4
    assert _patched_or_refused(model, module, [1, 3, 32, 13]) == ["bound", "bound"]
    with pytest.raises(ArgumentError) as e:
        patch(model, input_shapes={"x": [1, 3, 33, 13]})
    assert (e.value.data["axis"], e.value.data["declared"]) == (2, "8*h")
    assert _cli_exit(model, tmp_path, [1, 3, 33, 13]) == 2


@pytest.mark.parametrize("ranges, dims, want", [
    # the order torch writes the keys in (torch 2.13, measured): the inputs' dims as met, derived roots last
    ("{s53: VR[17, 64], s0: VR[4, 64]}", [[1, 3, "H", "W"]], {"s53": "H", "s0": "W"}),
    ("{s17: VR[1, 8], s53: VR[17, 64], s0: VR[4, 64], s48: VR[3, 99]}", [["B", 3, "H", "W"], ["B", 4, "L"]],
     {"s17": "B", "s53": "H", "s0": "W", "s48": "L"}),
    ("{8*s39: VR[8, 64], s0: VR[4, 64], s39: VR[3, 8]}", [[1, 3, "8*h", "W"]], {"s39": "h", "s0": "W"}),
    ("{s0: VR[13, 64]}", [[1, 3, "H", "H"]], {"s0": "H"}),
    ("{s53: VR[17, int_oo], s0: VR[0, int_oo]}", [[1, 3, "s53", "s0"]], {"s53": "s53", "s0": "s0"}),
    # pairings the order does not confirm: none
    ("{s53: VR[17, 64], s0: VR[4, 64]}", [[1, 3, "s0", "W"]], {}),  # torch's own name on another key
    ("{8*s39: VR[8, 64], s0: VR[4, 64]}", [[1, 3, "h+8", "W"]], {}),  # a derived dim of another form
    ("{s53: VR[17, 64], s0: VR[4, 64], s1: VR[2, 9]}", [[1, 3, "H", "W"], []], {}),  # a scalar (SymInt) input
    ("{s53: VR[17, 64]}", [[1, 3, "H", "W"]], {}),  # fewer keys than dims
])
def test_range_keys_read_in_the_inputs_dim_names(ranges, dims, want):
    assert key_names(ranged_model(ranges, *dims)) == want


def test_a_binding_is_checked_in_the_inputs_dim_names():
    """Values by hand: the keys read as the inputs' dims; a narrowed key tied to no dim cannot be checked."""
    model = ranged_model("{8*s39: VR[8, 64], s0: VR[4, 64], s39: VR[3, 8]}", [1, 3, "8*h", "W"])
    assert outside_ranges(model, {"h": 2, "W": 13}) == [("h", 2, "3", "8")]
    assert outside_ranges(model, {"h": 3, "W": 70}) == [("W", 70, "4", "64")]
    assert unchecked_ranges(model, {"h": 3, "W": 13}) == []
    model = ranged_model("{s53: VR[17, 64], s0: VR[4, 64], s83: VR[2, 9]}", [1, 3, "H", "W"])
    assert unchecked_ranges(model, {"H": 20, "W": 13}) == [("s83", "2", "9")]
    model = ranged_model("{s53: VR[17, 64], s0: VR[4, 64], s48: VR[0, int_oo]}", [1, 3, "H", "W"], [1, "L"])
    assert unchecked_ranges(model, {"H": 20, "W": 13}, free={"L"}) == []

"""review53 F2: smp's Unet, FPN, MAnet and Unet++ with ``decoder_interpolation="area"``, exported with
``dynamic_shapes={"x": {2: 32*h, 3: 32*w}}``: the decoder's last ``F.interpolate(mode="area")`` upsamples a
stride-2 map that torch declares as a multiple of a deeper map's new symbol (``16*s39``: nothing in the file ties
``s39`` to ``h``) to the input's size. Its region is searched on the whole model, which ran it at input sizes the
declared dims never take (254: a 127-long map, where torch's window tables index out of range), and the file,
right at every size it declares, was refused with and without --traced-shape. The whole-model search now keeps to
the sizes the inputs' declared dims allow, and tries non-square ones (two output sizes the graph computes, one
per axis, are always equal at square sizes), and a size where the pooled map holds one element per plane (MAnet's
stride-32 map at a 32x32 input), which proves nothing, no longer reads as one the region failed at. A region wrong
at such sizes is still refused."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

from dynamo_exports import errors_vs_torch
from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.frontends.dynamo.search import whole_model_bindings

K = 8  # the input's dims are declared K*h, K*w
TRACED = (3, 4)  # h, w at the export
OTHERS = [(5, 3), (7, 9), (9, 5), (1, 2)]  # odd, non-square, smaller and larger


class AreaDecoder(nn.Module):
    """Three stride-2 convs, then a decoder upsampling by ``F.interpolate(mode="area")`` to each skip's size, the
    last to the input's (smp's UnetDecoder); ``third``: the last to a third of the input's instead (pooling, its
    windows change class with h and w: right at the traced size's classes only); ``deepest``: no decoder, the
    stride-8 map upsampled to the input's size at once."""

    def __init__(self, third: bool = False, deepest: bool = False):
        super().__init__()
        self.third, self.deepest = third, deepest
        self.enc = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, stride=2, padding=1) for i in range(3))
        self.dec = nn.ModuleList(nn.Conv2d(4, 4, 3, padding=1) for _ in range(3))

    def forward(self, x):
        feats = [x]
        for conv in self.enc:
            feats.append(torch.relu(conv(feats[-1])))
        y = feats[-1]
        if self.deepest:  # the stride-8 map straight to the input's size: one element per plane at 8x8
            return F.interpolate(y, size=x.shape[2:], mode="area")
        for i, (conv, skip) in enumerate(zip(self.dec, feats[-2::-1])):
            h, w = skip.shape[2:]
            if i == 2 and self.third:
                h, w = h // 3, w // 3
            y = F.interpolate(y, size=(h, w), mode="area")
            y = torch.relu(conv(y))
        return y


def _export(module):
    torch.manual_seed(0)
    module.eval()
    h, w = torch.export.Dim("h", min=1, max=64), torch.export.Dim("w", min=1, max=64)
    return dynamo_export(module, (torch.randn(1, 3, K * TRACED[0], K * TRACED[1]),), input_names=["x"],
                         dynamic_shapes={"x": {2: K * h, 3: K * w}})


def _sizes(hws):
    return [(K * h, K * w) for h, w in hws]


@pytest.fixture(scope="module", params=["decoder", "deepest"])
def upsampling(request):
    module = AreaDecoder(deepest=request.param == "deepest")
    model = _export(module)
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim[2:]]
    assert dims == [f"{K}*h", f"{K}*w"], dims  # declared as multiples
    # the maps are declared anew, in the stride-8 map's symbol: no expression of h, w
    declared = [[d.dim_value or d.dim_param for d in vi.type.tensor_type.shape.dim] for vi in model.graph.value_info]
    assert any(len(d) == 4 and isinstance(d[2], str) and d[2] and "h" not in d[2] for d in declared), declared
    # the file as exported is right at every size it declares
    assert max(errors_vs_torch(module, model, _sizes([TRACED, *OTHERS]), seed=1).values()) < 1e-5
    return module, model


@pytest.mark.parametrize("traced", [False, True], ids=["no option", "traced shape"])
def test_an_area_decoder_declared_as_multiples_is_patched_and_exact(upsampling, traced):
    module, model = upsampling
    kwargs = {"traced_shapes": {"x": [1, 3, K * TRACED[0], K * TRACED[1]]}} if traced else {}
    result = patch(model, **kwargs)
    assert [n.lowering for n in result.report.nodes] == ["dynamic"] * (1 if module.deepest else 3)
    errs = errors_vs_torch(module, result.model, _sizes([TRACED, *OTHERS]), seed=2)
    assert all(e < 1e-5 for e in errs.values()), errs


def test_the_whole_model_search_keeps_to_the_declared_multiples(upsampling):
    _, model = upsampling
    for traced in (None, {"x": [1, 3, K * TRACED[0], K * TRACED[1]]}):
        tried = [tuple(b["x"][2:]) for b, _ in whole_model_bindings(model, traced)]
        assert tried and all(h % K == 0 and w % K == 0 for h, w in tried), tried
        assert any(h != w for h, w in tried[1:])  # non-square sizes too


def test_a_region_wrong_at_declared_sizes_is_still_refused():
    """The last interpolation to a third of the input (a pool whose windows change class with h): torch's file
    is wrong at declared sizes of other classes, and stays refused with and without the traced size."""
    module = AreaDecoder(third=True)
    model = _export(module)
    assert max(errors_vs_torch(module, model, _sizes(OTHERS), seed=1).values()) > 1e-3
    for kwargs in ({}, {"traced_shapes": {"x": [1, 3, K * TRACED[0], K * TRACED[1]]}}):
        with pytest.raises(UnsupportedNodeError, match="would stay frozen"):
            patch(model, **kwargs)

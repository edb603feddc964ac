"""A crop on the pool's line that the graph does not hold (review51): torch 2.9.1 exports
`F.adaptive_avg_pool2d(x[..., :40], (3, 5))` traced at a width below 40 with no Slice at all (its program guards
W <= 39; the ONNX file drops the guard), so the region reads the uncropped tensor: exit 0, OUT 0.17 off at widths
past 40. torch 2.13 keeps the Slice; the file 2.9.1 writes is that export without it, built here from a real 2.13
export. Refused now (exit 4, the export as the remedy); a crop of the channels (not a pooled axis) is no such
crop, and the file with its Slice stays refused or exact as before."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
F = torch.nn.functional

import onnx
from dynamo_exports import assert_cli_refuses, errors_vs_torch, older_torch
from export_cache import dynamo_export

from onnxpoolfix import patch
from onnxpoolfix.errors import UnsupportedNodeError


class CroppedWidth(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[..., :40], (3, 5))


class CroppedChannels(torch.nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :3], (3, 5))


SIZES = [(37, 23), (40, 30), (7, 5), (64, 9), (100, 51), (45, 64)]


def _export(module, hw=(37, 23)) -> onnx.ModelProto:
    torch.manual_seed(0)
    dims = {"x": {a: torch.export.Dim(f"d{a}", min=2, max=1024) for a in (2, 3)}}
    return dynamo_export(module.eval(), (torch.randn(1, 3, *hw),), dynamic_shapes=dims, input_names=["x"])


def _without_slices(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each Slice of the graph input removed, its readers reading the input: torch 2.9.1's file."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    gone = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Slice" and n.input[0] == "x"}
    if not gone and older_torch(torch):  # torch 2.9.1 itself wrote this file (review63): nothing to remove
        return out
    assert gone, "torch wrote no Slice of x"
    kept = [n for n in g.node if n.output[0] not in gone]
    for n in kept:
        n.input[:] = [gone.get(i, i) for i in n.input]
    del g.node[:]
    g.node.extend(kept)
    keep = [vi for vi in g.value_info if vi.name not in gone]
    del g.value_info[:]
    g.value_info.extend(keep)
    return out


@pytest.mark.parametrize("hw", [(37, 23), (36, 20)], ids=["region", "frozen_pool"])
def test_a_crop_the_graph_does_not_hold_is_refused(hw, tmp_path):
    """At 37x23 a decomposed region; at 36x20, where the sizes divide, a frozen AveragePool."""
    model = _without_slices(_export(CroppedWidth(), hw))
    errors = errors_vs_torch(CroppedWidth(), model, [hw, *SIZES], seed=0)
    assert errors[hw] < 1e-5 and errors[(100, 51)] > 1e-3  # right where traced, as torch 2.9.1's file is
    assert_cli_refuses(model, tmp_path, ([], ["--traced-shape", f"x:1,3,{hw[0]},{hw[1]}"]))


def test_the_crop_in_the_graph_is_never_pooled_past():
    model = _export(CroppedWidth())
    for traced in (None, {"x": [1, 3, 37, 23]}):
        try:
            out = patch(model, traced_shapes=traced).model
        except UnsupportedNodeError as err:
            assert err.exit_code == 4
        else:
            assert max(errors_vs_torch(CroppedWidth(), out, SIZES, seed=1).values()) < 1e-5


def test_a_crop_of_the_channels_is_no_crop_of_the_pooled_axes():
    module = CroppedChannels()
    out = patch(_export(module)).model
    assert max(errors_vs_torch(module, out, SIZES, seed=1).values()) < 1e-5

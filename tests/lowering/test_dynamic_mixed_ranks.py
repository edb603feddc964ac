"""Dynamic H/W with leftovers that pool different numbers of axes (issue 12, case 1).

The check's size probe fits input size -> pooled length per pooled axis; with a 2d pool first and a 3d
pool later it used to index the first node's two axes for the three of the larger rank (IndexError).
Every order and mix must now patch, pass the check, and match torch at sizes the check did not choose.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from helpers import assert_avg_close, assert_bits_equal, ort_run

import onnxpoolfix

POOLS = {  # name -> (function on x of shape N,C,H,W, kind)
    "avg2d": (lambda F, x: F.adaptive_avg_pool2d(x, 3), "avg"),
    "avg3d": (lambda F, x: F.adaptive_avg_pool3d(x.unsqueeze(1), 3), "avg"),
    "max3d": (lambda F, x: F.adaptive_max_pool3d(x.unsqueeze(1), (2, 3, 4)), "max"),
    "avg1d": (lambda F, x: F.adaptive_avg_pool1d(x[:, 0], 4), "avg"),
    "max1d": (lambda F, x: F.adaptive_max_pool1d(x[:, 1], 3), "max"),
    "max2d": (lambda F, x: F.adaptive_max_pool2d(x, (4, 2)), "max"),
}

ORDERS = [
    ("avg2d", "avg3d"),  # the model: the first dynamic leftover pools fewer axes
    ("avg3d", "avg2d"),  # the other order
    ("avg1d", "avg3d"),
    ("max1d", "max3d"),
    ("max2d", "avg3d"),  # max and avg mixed
    ("avg1d", "max2d", "max3d"),
]


def _export(torch, names):
    F = torch.nn.functional

    class M(torch.nn.Module):
        def forward(self, x):
            return tuple(POOLS[n][0](F, x) for n in names)

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M(), (torch.randn(1, 2, 9, 10),), f, dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {2: "H", 3: "W"}},
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return M(), onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("names", ORDERS, ids=["+".join(o) for o in ORDERS])
def test_leftovers_of_different_ranks_with_symbolic_hw_patch_and_match_torch(names, torch_mod):
    torch = torch_mod
    module, exported = _export(torch, names)
    result = onnxpoolfix.patch(exported)  # the check's probe ran (it used to raise IndexError here)
    assert [n.lowering for n in result.report.nodes] == ["dynamic"] * len(names)
    assert "symbolic pooled axes checked at" in result.report.check_note
    assert "upsampling" in result.report.check_note and "non-uniform" in result.report.check_note
    rng = np.random.default_rng(0)
    for shape in [(1, 2, 9, 10), (1, 2, 7, 13), (1, 2, 2, 3), (1, 2, 20, 11)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = ort_run(result.model, {"x": x})
        with torch.no_grad():
            want = [w.numpy() for w in module(torch.from_numpy(x))]
        for name, g, w in zip(names, got, want):
            if POOLS[name][1] == "max":
                assert_bits_equal(g, w, f"{name} at {shape}")
            else:
                assert_avg_close(g, w, x, rel=2e-6)

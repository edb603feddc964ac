"""onnx2torch (issue 33, item 3): every float32 fixture with every target, converted to a torch.fx module by
onnx2torch and run in torch against torch's saved outputs; symbolic files as written, one conversion run at every
saved size. Where the converter has no converter for an op the file holds, the refusal is asserted, so the test
fails the day it converts. NaN, inf and -inf in the portable target's files reach the outputs torch's do.

onnx2torch 1.5.15 declares torchvision as a dependency but imports it only for its NMS and RoiAlign converters;
torchvision from PyPI does not import beside this project's CPU build of torch (docs/targets.md), so `make
test-runtimes` installs onnx2torch without its dependencies and, where torchvision is absent, this test imports
onnx2torch beside a stand-in torchvision that is removed again at once (no file here holds NMS or RoiAlign)."""
from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import onnx
import pytest
from helpers import (
    NON_FINITE_MAX_CASES,
    NON_FINITE_MAX_IDS,
    OLD_OPSET_AVG,
    POOLED_AVG_FEW,
    POOLED_AVG_FEW_IDS,
    assert_bits_equal,
    assert_same_non_finite,
    make_leftover,
    non_finite_avg_input,
    non_finite_max_input,
    non_finite_pool_input,
    portable_max,
    portable_pooled_avg,
    scattered_non_finite_input,
    torch_adaptive_pool,
)
from runtime_fixtures import CASES, FIXTURES, TARGETS, runs
from runtime_matrix import record

import onnxpoolfix

# looked up, not imported: collecting the fast suite imports no runtime it does not run
if importlib.util.find_spec("onnx2torch") is None:
    pytest.skip("onnx2torch is not installed (make test-runtimes installs it)", allow_module_level=True)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def _import_onnx2torch():
    if importlib.util.find_spec("torchvision") is not None:
        import onnx2torch
        return onnx2torch
    stand_in = types.ModuleType("torchvision")
    stand_in.ops = types.ModuleType("torchvision.ops")
    stand_in.ops.roi_align = stand_in.ops.nms = stand_in.ops.box_convert = None
    sys.modules.update({"torchvision": stand_in, "torchvision.ops": stand_in.ops})
    try:
        import onnx2torch
    finally:
        del sys.modules["torchvision"], sys.modules["torchvision.ops"]
    return onnx2torch


onnx2torch = _import_onnx2torch()

#: (op, opset versions) onnx2torch 1.5.15 has no converter for, measured on the patched fixtures
NOT_CONVERTED = {"If": range(1, 100), "Size": range(1, 100), "Max": range(1, 8), "Min": range(1, 8),
                 "AveragePool": range(19, 100), "Equal": range(19, 100)}


#: the opsets at which onnx2torch converts every op the tensorrt and portable targets write
CONVERTED_OPSETS = range(8, 19)


def _op_version(model: onnx.ModelProto, op: str) -> int:
    """The version of ``op`` in the model's default-domain opset (the schema in force at its opset import)."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return onnx.defs.get_schema(op, opset).since_version


def not_converted(model: onnx.ModelProto) -> str | None:
    """The first op of the main graph onnx2torch cannot convert, or None."""
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and _op_version(model, node.op_type) in NOT_CONVERTED.get(node.op_type, ()):
            return node.op_type
    return None


def onnx2torch_run(model: onnx.ModelProto, feed: dict) -> dict:
    module = onnx2torch.convert(model)
    names = [i.name for i in model.graph.input if i.name in feed]
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names])
    outs = out if isinstance(out, (tuple, list)) else [out]
    return {o.name: t.numpy() for o, t in zip(model.graph.output, outs)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_onnx2torch_matches_torch(case, target):
    rtol, atol = case["suggested_tolerance"]
    patched = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, check=False).model
    missing = not_converted(patched)
    if target != "onnxruntime":  # no If, no Size: only the opsets onnx2torch has no converter at keep them out
        assert missing is None or case["opset"] not in CONVERTED_OPSETS, missing
    if missing:
        with pytest.raises(NotImplementedError, match=f"operation_type='{missing}'"):
            onnx2torch.convert(patched)
        record("onnx2torch", case, target, "refused")
        return
    for sfx, feed, want in runs(case):
        if sfx and not case["dynamic"]:
            continue
        got = onnx2torch_run(patched, feed)
        for name, w in want.items():
            np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} at {sfx or 'traced'}")
    record("onnx2torch", case, target, "exact")


def test_the_refusals_are_the_converters():
    """The table above is what onnx2torch refuses, not a guess: a lone node of each op at a version the table
    names is refused, and at the nearest version it does not name, converted."""
    def lone(op: str, opset: int) -> onnx.ModelProto:
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 4, 4])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
        attrs = {"kernel_shape": [2, 2]} if op == "AveragePool" else {}
        node = onnx.helper.make_node(op, ["x", "x"][: 1 if op == "AveragePool" else 2], ["y"], **attrs)
        graph = onnx.helper.make_graph([node], "g", [x], [y])
        return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])

    for op, refused, taken in (("Max", 7, 8), ("Min", 7, 8), ("AveragePool", 19, 18), ("Equal", 19, 13)):
        with pytest.raises(NotImplementedError, match=f"operation_type='{op}'"):
            onnx2torch.convert(lone(op, refused))
        onnx2torch.convert(lone(op, taken))


@pytest.mark.parametrize("target", ["tensorrt", "portable"])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape,size", [((1, 2, 8, 9), (5, 7)), (("N", 2, "H", "W"), (5, 7)), ((2, 3, 11), (4,))],
                         ids=["static", "symbolic", "1d"])
def test_non_finite_values_reach_torchs_outputs(kind, shape, size, target):
    """NaN, +inf and whole windows of -inf, static and under symbolic sizes (one file run at a size it was not
    written for), in the targets onnx2torch converts."""
    patched = onnxpoolfix.patch(make_leftover(kind, shape, size), target=target, check=False).model
    x = scattered_non_finite_input(shape)
    assert_same_non_finite(onnx2torch_run(patched, {"x": x})["y"], torch_adaptive_pool(kind, x, size))


@pytest.mark.parametrize("shape,size,opset", [c for c in NON_FINITE_MAX_CASES if c[2] in CONVERTED_OPSETS],
                         ids=[i for c, i in zip(NON_FINITE_MAX_CASES, NON_FINITE_MAX_IDS) if c[2] in CONVERTED_OPSETS])
def test_portable_max_keeps_torchs_non_finite_values(shape, size, opset):
    """The portable target's static max pooling (lowering/max_steps.py): torch's NaN, +-inf, windows of only -inf,
    -FLT_MAX and -0.0 bit for bit (its NaN carrier's mean is an AveragePool: refused from opset 19)."""
    model = portable_max(shape, size, opset)
    x = non_finite_max_input(shape)
    assert_bits_equal(onnx2torch_run(model, {"x": x})["y"], torch_adaptive_pool("max", x, size))


@pytest.mark.parametrize("shape,size,opset", [c for c in POOLED_AVG_FEW if c[2] in CONVERTED_OPSETS],
                         ids=[i for c, i in zip(POOLED_AVG_FEW, POOLED_AVG_FEW_IDS) if c[2] in CONVERTED_OPSETS])
def test_portable_pooled_averages_keep_torchs_non_finite_values(shape, size, opset):
    """The portable target's averages through AveragePool, with the form that keeps TFLite's NaN
    (lowering/avg_non_finite.py): NaN (either sign), +inf, -inf and both infinities in one window reach the outputs
    torch's do (below opset 8 the form's Max and Min are refused, from opset 19 AveragePool: above)."""
    x = non_finite_pool_input(shape)
    got = onnx2torch_run(portable_pooled_avg(shape, size, opset), {"x": x})["y"]
    assert_same_non_finite(got, torch_adaptive_pool("avg", x, size))


@pytest.mark.parametrize("target", ["tensorrt", "portable"])
@pytest.mark.parametrize("name", [n for n in OLD_OPSET_AVG if n != "avg2d_opset7"])
def test_old_opset_averages_keep_torchs_non_finite_values(name, target):
    """The average fixtures below opset 11 with NaN (either sign), +inf, -inf and both infinities in one window."""
    (case,) = [c for c in CASES if c["name"] == name]
    _, feed, want = next(runs(case))
    x = non_finite_avg_input(feed["x"])
    model = onnxpoolfix.patch(onnx.load(FIXTURES / case["file"]), target=target, check=False).model
    assert_same_non_finite(onnx2torch_run(model, {"x": x})["y"], torch_adaptive_pool("avg", x, want["y"].shape[2:]))

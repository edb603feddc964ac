"""Adaptive max pooling WITH its indices output over symbolic pooled axes (the 'dynamic' lowering).

Real TorchScript exports (ONNX_FALLTHROUGH, dynamic_axes, return_indices=True) whose indices are both a graph
output and read by a downstream op, patched once with no size bound, then run at many sizes (uniform,
non-uniform, upsampling, size 1) on inputs full of ties, NaN and -inf, and compared with torch itself: values
bit for bit, indices exactly. Both targets (TensorRT's form has no ArgMax and no If; it is standard ONNX, so
onnxruntime runs it too).
"""
from __future__ import annotations

import io
import itertools
import warnings

import numpy as np
import onnx
import pytest
from helpers import assert_bits_equal, leftover_nodes, ort_session

import onnxpoolfix
from onnxpoolfix.graph import read_names


def _module(torch, k: int, size):
    pool_cls = getattr(torch.nn, f"AdaptiveMaxPool{k}d")

    class PoolWithIndices(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = pool_cls(size, return_indices=True)

        def forward(self, x):
            y, idx = self.pool(x)
            return y, idx, idx * 3 + 1  # the indices leave as an output AND feed a downstream op

    return PoolWithIndices().eval()


def _export(torch, module, traced, opset=17):
    axes = {0: "N"} | {a: f"d{a}" for a in range(2, len(traced))}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(*traced),), f, dynamo=False,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          opset_version=opset, input_names=["x"], output_names=["y", "idx", "down"],
                          dynamic_axes={"x": axes})
    return onnx.load_from_string(f.getvalue())


def _hard_input(rng, shape):
    """Few distinct values (ties everywhere, -0.0 next to 0.0), scattered NaN, -inf bands and whole windows."""
    x = rng.integers(-2, 3, size=shape).astype(np.float32)
    x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, 0.0, -0.0)
    x[rng.random(shape) < 0.05] = np.nan
    x[rng.random(shape) < 0.1] = -np.inf
    x[..., : max(1, shape[-1] // 3)][(rng.random(shape[:-1]) < 0.3)] = -np.inf  # some rows all -inf
    return x


# (k, output size, traced shape, sizes to run: uniform, non-uniform, upsampling, size 1, mixed)
CASES = {
    "1d": (1, (4,), (1, 3, 9), [(8,), (12,), (9,), (11,), (3,), (1,), (2,), (37,)]),
    "2d": (2, (5, 7), (1, 2, 8, 9), [(10, 14), (11, 13), (3, 4), (1, 1), (5, 7), (1, 30), (23, 2), (8, 9)]),
    "3d": (3, (2, 3, 2), (1, 2, 4, 5, 3), [(4, 6, 2), (5, 7, 3), (1, 2, 1), (1, 1, 1), (9, 3, 7)]),
}


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize("case", list(CASES))
def test_dynamic_indices_match_torch_at_many_sizes(case, target, torch_mod):
    torch = torch_mod
    k, size, traced, sizes = CASES[case]
    module = _module(torch, k, size)
    exported = _export(torch, module, traced)
    assert leftover_nodes(exported), "the export leaves the aten node (dynamic axes)"
    result = onnxpoolfix.patch(exported, target=target)  # the tool's own check runs too
    node = result.report.nodes[0]
    assert node.lowering == "dynamic" and result.report.check_passed
    assert len(node.checked_shapes) >= 3
    ops = [n.op_type for n in result.model.graph.node]
    # an If only with the onnxruntime target: the NaN-aware choice runs only for non-finite windows
    assert "Loop" not in ops and ("If" in ops) == (target == "onnxruntime")
    read = read_names(result.model.graph)  # the If's branches read outer names too
    dead = [t.name for t in result.model.graph.initializer if t.name not in read]
    assert dead == [], f"emitted initializers nothing reads (onnxruntime warns about each): {dead}"
    if target == "tensorrt":
        from onnxpoolfix.tensorrt import lint_tensorrt

        assert "ArgMax" not in ops and "TopK" not in ops
        assert [f for f in lint_tensorrt(result.model) if f.severity == "error"] == []
    sess = ort_session(result.model)
    rng = np.random.default_rng(0)
    for spatial in sizes:
        for batch in (1, 2):
            ties = rng.integers(0, 3, (batch, traced[1]) + spatial).astype(np.float32)  # finite: the If's fast branch
            for x in (_hard_input(rng, (batch, traced[1]) + spatial), ties):
                got = sess.run(None, {"x": x})
                with torch.no_grad():
                    want = [t.numpy() for t in module(torch.from_numpy(x))]
                what = f"{case} {target} at {x.shape}"
                assert_bits_equal(got[0], want[0], f"values {what}")
                assert_bits_equal(got[1], want[1], f"indices {what}")
            assert_bits_equal(got[2], want[2], f"downstream {what}")


def test_dynamic_indices_every_size_2d(torch_mod):
    """Every H x W in 1..2x the traced size (64 sizes), random finite input and the hard one."""
    torch = torch_mod
    module = _module(torch, 2, (3, 4))
    model = onnxpoolfix.patch(_export(torch, module, (1, 2, 4, 4)), check=False).model
    sess = ort_session(model)
    rng = np.random.default_rng(1)
    for h, w in itertools.product(range(1, 9), range(1, 9)):
        for x in (rng.standard_normal((1, 2, h, w)).astype(np.float32), _hard_input(rng, (2, 2, h, w))):
            got = sess.run(None, {"x": x})
            with torch.no_grad():
                want = [t.numpy() for t in module(torch.from_numpy(x))]
            assert_bits_equal(got[0], want[0], f"values at {x.shape}")
            assert_bits_equal(got[1], want[1], f"indices at {x.shape}")


@pytest.mark.parametrize("size", [(None, 3), (3, None)])
def test_dynamic_indices_with_an_axis_that_follows_the_input(size, torch_mod):
    """AdaptiveMaxPool2d((None, 3)): the kept axis is not gathered, but its coordinate is in the index."""
    torch = torch_mod
    module = _module(torch, 2, size)
    result = onnxpoolfix.patch(_export(torch, module, (1, 2, 5, 6)))
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed
    sess = ort_session(result.model)
    rng = np.random.default_rng(2)
    for spatial in [(5, 6), (1, 1), (7, 2), (2, 11)]:
        x = _hard_input(rng, (2, 2) + spatial)
        got = sess.run(None, {"x": x})
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x))]
        assert_bits_equal(got[0], want[0], f"values at {x.shape}")
        assert_bits_equal(got[1], want[1], f"indices at {x.shape}")


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_dynamic_indices_other_dtypes(dtype, torch_mod):
    torch = torch_mod
    module = _module(torch, 2, (3, 2)).to(getattr(torch, dtype))
    axes = {"x": {0: "N", 2: "H", 3: "W"}}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, 2, 5, 5, dtype=getattr(torch, dtype)),), f, dynamo=False,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, opset_version=17,
                          input_names=["x"], output_names=["y", "idx", "down"], dynamic_axes=axes)
    result = onnxpoolfix.patch(onnx.load_from_string(f.getvalue()))
    assert result.report.nodes[0].lowering == "dynamic" and result.report.check_passed
    sess = ort_session(result.model)
    rng = np.random.default_rng(3)
    for spatial in [(5, 5), (7, 3), (1, 9)]:
        x = _hard_input(rng, (1, 2) + spatial).astype(dtype)
        got = sess.run(None, {"x": x})
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x))]
        assert_bits_equal(got[0], want[0], f"values at {x.shape}")
        assert_bits_equal(got[1], want[1], f"indices at {x.shape}")

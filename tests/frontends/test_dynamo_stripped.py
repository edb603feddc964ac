"""A dynamo-written AveragePool (kernel = stride) under symbolic sizes whose metadata is stripped (onnxslim,
onnxsim) or names no pooling (a helper function's F.interpolate(mode="area")): the graph of
F.interpolate(x, scale_factor=0.5, mode="area") traced at an even size is the same as nn.AvgPool2d(2)'s. The two
readings differ at other sizes and nothing in the file tells them apart, so the patch is refused (exit 4) with
a hint naming what would decide it; --allow-partial writes it as it is, with a warning."""
from __future__ import annotations

import pytest
from export_cache import dynamo_export
from onnx import TensorProto, helper

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError
from onnxpoolfix.report import WarningNote


def _avgpool(name: str, kernel=(2, 2), metadata: dict | None = None, dims=("H", "W")):
    node = helper.make_node("AveragePool", ["x"], ["avg_pool2d"], name=name, kernel_shape=list(kernel),
                            strides=list(kernel))
    for k, v in (metadata or {}).items():
        node.metadata_props.add(key=k, value=v)
    out = [f"({d}//{kernel[i]})" if isinstance(d, str) else d // kernel[i] for i, d in enumerate(dims)]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *dims])],
                              [helper.make_tensor_value_info("avg_pool2d", TensorProto.FLOAT, [1, 3, *out])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def _refused(model) -> UnsupportedNodeError:
    with pytest.raises(UnsupportedNodeError) as err:
        onnxpoolfix.patch(model)
    partial = onnxpoolfix.patch(model, allow_partial=True).report  # written as it is, never silently
    assert partial.nodes == [] and partial.partial
    assert any(isinstance(n, WarningNote) and "'avg_pool2d' left frozen" in n for n in partial.notes)
    return err.value


def test_a_stripped_dynamo_average_pool_under_symbolic_sizes_is_refused():
    err = _refused(_avgpool("node_avg_pool2d"))
    assert err.exit_code == 4 and "'avg_pool2d'" in str(err)
    assert "metadata" in err.hint and "onnxslim" in err.hint and "onnxpoolfix.export" in err.hint


def test_a_stripped_kernel_1_pool_is_refused_too():
    """AlexNet's 6 -> 6 at 224 is an AveragePool k1 s1: an adaptive pool or nothing at all, stripped."""
    _refused(_avgpool("node_avg_pool2d", kernel=(1, 1)))


def _warnings(model):
    report = onnxpoolfix.patch(model).report
    assert report.nodes == []  # left as written
    return [n for n in report.notes if isinstance(n, WarningNote)]


@pytest.mark.parametrize("model", [
    _avgpool("/pool/AveragePool"),  # TorchScript's own node: nn.AvgPool2d as it exports it
    _avgpool("node_avg_pool2d", dims=(10, 14)),  # static: right as written
    _avgpool("node_avg_pool2d", metadata={"pkg.torch.onnx.class_hierarchy":
                                          "['torch.nn.modules.pooling.AvgPool2d', 'aten.avg_pool2d.default']"}),
], ids=["torchscript", "static", "metadata-says-AvgPool2d"])
def test_no_warning_where_the_pool_is_what_it_says(model):
    assert _warnings(model) == []


_HELPER_CALL = {"pkg.torch.onnx.class_hierarchy": "['m.Granite', 'aten.avg_pool2d.default']",
                "pkg.torch.onnx.stack_trace": 'File "m.py", line 9, in forward\n    return downsample(tok, side, 5)'}


def test_metadata_that_names_no_pooling_is_refused_too():
    """transformers' granite4_vision: F.interpolate(mode="area") inside a helper function; the trace keeps only
    the module's frame, the call of the helper, and the class hierarchy names no pooling module."""
    err = _refused(_avgpool("node_avg_pool2d", metadata=_HELPER_CALL))
    assert "downsample(tok, side, 5)" in err.hint and "onnxpoolfix.export" in err.hint


def test_no_warning_where_the_source_line_is_an_average_pool():
    line = {"pkg.torch.onnx.class_hierarchy": "['m.Net', 'aten.avg_pool2d.default']",
            "pkg.torch.onnx.stack_trace": 'File "m.py", line 9, in forward\n    return F.avg_pool2d(x, 2)'}
    assert _warnings(_avgpool("node_avg_pool2d", metadata=line)) == []


def test_a_helper_functions_area_interpolation_is_wrong_elsewhere_and_refused():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")

    import numpy as np

    def downsample(y, side):  # granite4_vision's interpolate_downsample, in a function of its own
        return torch.nn.functional.interpolate(y, size=(side, side), mode="area")

    class Granite(torch.nn.Module):
        def forward(self, x):
            return downsample(x, 5)

    s = torch.export.Dim("S", min=2, max=256)
    model = dynamo_export(Granite(), (torch.randn(1, 2, 15, 15),), input_names=["x"],
                          dynamic_shapes={"x": {2: s, 3: s}})
    x = np.random.default_rng(0).standard_normal((1, 2, 19, 19)).astype(np.float32)
    (got,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got.shape != tuple(Granite()(torch.from_numpy(x)).shape)  # frozen k3 s3: 6x6 at 19, torch 5x5
    err = _refused(model)
    assert "downsample(x, 5)" in err.hint and "may hold a pool" in err.hint

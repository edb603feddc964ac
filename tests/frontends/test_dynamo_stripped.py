"""A dynamo-written AveragePool (kernel = stride) under symbolic sizes with its metadata stripped: the whole graph
of F.interpolate(x, scale_factor=0.5, mode="area") traced at an even size, and the same as nn.AvgPool2d(2)'s.
It cannot be told apart, so it is left as written, with a warning (never silently)."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import onnxpoolfix
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


def _warnings(model):
    report = onnxpoolfix.patch(model).report
    assert report.nodes == []  # left as written
    return [n for n in report.notes if isinstance(n, WarningNote)]


def test_a_stripped_dynamo_average_pool_under_symbolic_sizes_is_left_with_a_warning():
    (warning,) = _warnings(_avgpool("node_avg_pool2d"))
    assert "'avg_pool2d'" in warning and "kernel = stride = 2x2" in warning and "no exporter metadata" in warning
    assert "onnxpoolfix.export" in warning


@pytest.mark.parametrize("model", [
    _avgpool("/pool/AveragePool"),  # TorchScript's own node: nn.AvgPool2d as it exports it
    _avgpool("node_avg_pool2d", dims=(10, 14)),  # static: right as written
    _avgpool("node_avg_pool2d", kernel=(1, 1)),  # kernel 1: every size divides
    _avgpool("node_avg_pool2d", metadata={"pkg.torch.onnx.class_hierarchy":
                                          "['torch.nn.modules.pooling.AvgPool2d', 'aten.avg_pool2d.default']"}),
], ids=["torchscript", "static", "kernel-1", "metadata-says-AvgPool2d"])
def test_no_warning_where_the_pool_is_what_it_says(model):
    assert _warnings(model) == []


_HELPER_CALL = {"pkg.torch.onnx.class_hierarchy": "['m.Granite', 'aten.avg_pool2d.default']",
                "pkg.torch.onnx.stack_trace": 'File "m.py", line 9, in forward\n    return downsample(tok, side, 5)'}


def test_metadata_that_names_no_pooling_is_left_with_a_warning_too():
    """transformers' granite4_vision: F.interpolate(mode="area") inside a helper function; the trace keeps only
    the module's frame, the call of the helper, and the class hierarchy names no pooling module."""
    (warning,) = _warnings(_avgpool("node_avg_pool2d", metadata=_HELPER_CALL))
    assert "names no pooling" in warning and "downsample(tok, side, 5)" in warning and "onnxpoolfix.export" in warning


def test_no_warning_where_the_source_line_is_an_average_pool():
    line = {"pkg.torch.onnx.class_hierarchy": "['m.Net', 'aten.avg_pool2d.default']",
            "pkg.torch.onnx.stack_trace": 'File "m.py", line 9, in forward\n    return F.avg_pool2d(x, 2)'}
    assert _warnings(_avgpool("node_avg_pool2d", metadata=line)) == []


def test_a_helper_functions_area_interpolation_is_wrong_elsewhere_and_warned_about():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    import logging
    import warnings

    import numpy as np
    import onnx

    def downsample(y, side):  # granite4_vision's interpolate_downsample, in a function of its own
        return torch.nn.functional.interpolate(y, size=(side, side), mode="area")

    class Granite(torch.nn.Module):
        def forward(self, x):
            return downsample(x, 5)

    s = torch.export.Dim("S", min=2, max=256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            program = torch.onnx.export(Granite(), (torch.randn(1, 2, 15, 15),), dynamo=True, input_names=["x"],
                                        dynamic_shapes={"x": {2: s, 3: s}})
        finally:
            logging.disable(logging.NOTSET)
    model = onnx.load_from_string(program.model_proto.SerializeToString())
    x = np.random.default_rng(0).standard_normal((1, 2, 19, 19)).astype(np.float32)
    (got,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got.shape != tuple(Granite()(torch.from_numpy(x)).shape)  # frozen k3 s3: 6x6 at 19, torch 5x5
    (warning,) = _warnings(model)
    assert "names no pooling" in warning and "downsample(x, 5)" in warning

"""The Python API's contract on its arguments: wrong types and values get a clear TypeError/ValueError (or a
PoolFixError with its exit code) before any work, never an obscure internal exception; numpy integers are
welcome; the report's JSON is strict; inplace=True means the caller's object."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxpoolfix
from onnxpoolfix.errors import ArgumentError, InvalidModelError, PoolFixError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def dynamic():
    return onnx.load(FIXTURES / "dynamic_avg2d.onnx")


def _rank(model) -> int:
    return len(model.graph.input[0].type.tensor_type.shape.dim)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"strategy": "nonsense"}, ArgumentError, "strategy must be one of"),
    ({"target": "TensorRT"}, ArgumentError, "target must be one of"),  # as a bad strategy: exit 2, a ValueError
    ({"target": None}, ArgumentError, "target must be one of"),
    ({"seed": -1}, ValueError, "seed must be a non-negative integer"),
    ({"seed": "a"}, ValueError, "seed must be a non-negative integer"),
    ({"check": "no"}, TypeError, "check takes True or False, not 'no'"),  # a truthy string: it used to check
    ({"inplace": 1}, TypeError, "inplace takes True or False"),
    ({"allow_partial": None}, TypeError, "allow_partial takes True or False"),
    ({"input_shapes": [[1, 2, 8, 9]]}, TypeError, "input_shapes takes a mapping"),
    ({"input_shapes": {"x": "1,2,8,9"}}, TypeError, "sequence of ints"),
    ({"input_shapes": {"x": [1, 2, 8.5, 9]}}, TypeError, "dims are integers, not float"),
    ({"input_shapes": {"x": [1, 2, None, 9]}}, TypeError, "dims are integers, not NoneType"),
    ({"input_shapes": {"x": [1, 2, 2**63, 9]}}, ArgumentError, "not in [1, 2147483647]"),
    ({"input_shapes": {"x": [1, 2, -5, 9]}}, ArgumentError, "not in [1, 2147483647]"),  # was a plain ValueError
    ({"check_shapes": {"x": [1, 2, 8, 9]}}, TypeError, "list of {input name: shape} mappings"),
    ({"check_shapes": [[1, 2, 8, 9]]}, TypeError, "check_shapes entry takes a mapping"),
    ({"check_shapes": [{"x": [1, 2, 8.5, 9]}]}, TypeError, "dims are integers, not float"),
    ({"input_shapes": {"nope": [1, 2, 8, 9]}}, ArgumentError, "not a graph input"),
    ({"input_shapes": {"x": [1, 2, 8]}}, ArgumentError, "has rank 3"),
    ({"check_shapes": [{"nope": [1, 2, 8, 9]}]}, ArgumentError, "not a graph input"),
])
def test_bad_arguments_are_refused_up_front(dynamic, kwargs, error, words):
    with pytest.raises(error) as info:
        onnxpoolfix.patch(dynamic, **kwargs)
    assert words in str(info.value)
    if error is ArgumentError:  # outcomes as data: the argument it names, in the API's words throughout
        err = info.value
        assert err.exit_code == 2 and isinstance(err, ValueError) and err.data["argument"] == next(iter(kwargs))
        assert "--" not in err.hint and "onnxpoolfix " not in err.hint, err.hint


def test_an_argument_errors_data_says_what_to_change(dynamic):
    """The input, axis and value an ArgumentError is about are data, not only words."""
    with pytest.raises(ArgumentError) as info:
        onnxpoolfix.patch(dynamic, input_shapes={"nope": [1, 2, 8, 9]})
    assert info.value.data == {"argument": "input_shapes", "input": "nope", "choices": ["x"]}
    with pytest.raises(ArgumentError) as info:
        onnxpoolfix.patch(dynamic, input_shapes={"x": [1, 3, 8, 9]})  # x is [1, 2, H, W]
    assert info.value.data == {"argument": "input_shapes", "input": "x", "axis": 1, "value": 3, "fixed": 2}
    with pytest.raises(ArgumentError) as info:
        onnxpoolfix.patch(dynamic, target="TensorRT")
    assert info.value.data["value"] == "TensorRT" and "tensorrt" in info.value.data["choices"]


def test_bad_arguments_are_refused_even_with_nothing_to_patch():
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    plain = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError):
        onnxpoolfix.patch(plain, strategy="nonsense")
    with pytest.raises(ArgumentError):
        onnxpoolfix.patch(plain, input_shapes={"nope": [1]})
    assert onnxpoolfix.patch(plain).report.status == "nothing-to-patch"


def test_numpy_integers_are_shapes_too(dynamic):
    n = _rank(dynamic)
    shape = np.array([1, 2, 8, 9][:n], dtype=np.int64)
    result = onnxpoolfix.patch(dynamic, check_shapes=[{"x": shape}, {"x": [np.int32(d) for d in shape]}])
    assert result.report.check_passed
    bound = onnxpoolfix.patch(dynamic, input_shapes={"x": shape})
    assert bound.report.check_passed


def test_inspect_model_refuses_what_patch_refuses():
    from onnxpoolfix.inspection.model import inspect_model

    with pytest.raises(TypeError, match="onnx.ModelProto"):
        inspect_model(str(FIXTURES / "avg2d_8x9_to_5x7.onnx"))
    with pytest.raises(InvalidModelError):
        onnxpoolfix.patch(onnx.ModelProto())
    assert inspect_model(onnx.ModelProto()).blocker_exit_code == 3


def test_inplace_means_the_callers_object_even_when_functions_are_inlined():
    from helpers import model_with_function

    m = model_with_function()
    result = onnxpoolfix.patch(m, inplace=True)
    assert result.model is m
    assert not m.functions or not any(n.domain == "org.pytorch.aten" for f in m.functions for n in f.node)
    assert not any(n.domain in ("org.pytorch.aten", "local") for n in m.graph.node)


def test_report_json_is_strict_when_a_check_fails(monkeypatch):
    """Indices that differ are an infinite error: the JSON says null there (strict JSON has no Infinity)."""
    from onnxpoolfix import reference
    from onnxpoolfix.errors import CheckFailedError

    real = reference.adaptive_max_pool

    def shifted(x, size, *a, **k):
        values, idx = real(x, size, *a, **k)
        return values, (idx + 1 if idx is not None else None)

    monkeypatch.setattr(reference, "adaptive_max_pool", shifted)
    with pytest.raises(CheckFailedError) as info:
        onnxpoolfix.patch(onnx.load(FIXTURES / "max2d_indices_output.onnx"))
    text = info.value.report.to_json()
    parsed = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert parsed["check_passed"] is False and parsed["nodes"][0]["max_error"] is None


def test_missing_external_data_says_model_dir(tmp_path, monkeypatch):
    src = tmp_path / "m.onnx"
    onnx.save(onnx.load(FIXTURES / "small_convnet.onnx"), src, save_as_external_data=True, location="m.data",
              size_threshold=0)
    model = onnx.load(src, load_external_data=False)
    monkeypatch.chdir(FIXTURES.parent)  # not the model's folder
    with pytest.raises(PoolFixError) as info:
        onnxpoolfix.patch(model)
    assert "model_dir" in info.value.hint
    assert onnxpoolfix.patch(model, model_dir=str(tmp_path)).report.check_passed


@pytest.mark.parametrize("module, f, error", [("notamodule", "BYTES", TypeError), (None, "BYTES", TypeError),
                                              ("NET", None, TypeError), ("NET", "READONLY", ValueError)])
def test_export_checks_its_arguments_first(tmp_path, module, f, error):
    torch = pytest.importorskip("torch")
    net = torch.nn.AdaptiveAvgPool2d(3)
    target = {"BYTES": io.BytesIO(), "READONLY": io.BytesIO(b"x"), None: None}[f]
    if f == "READONLY":
        target = open(tmp_path / "ro.onnx", "wb+")
        target.close()
        target = open(tmp_path / "ro.onnx", "rb")
    try:
        with pytest.raises(error):
            onnxpoolfix.export(net if module == "NET" else module, (torch.randn(1, 2, 7, 7),), target)
    finally:
        if hasattr(target, "close"):
            target.close()


def test_yes_no_arguments_take_bools_only(dynamic):
    from onnxpoolfix.inspection.model import inspect_model

    with pytest.raises(TypeError, match="allow_partial takes True or False"):
        inspect_model(dynamic, allow_partial="yes")
    assert onnxpoolfix.patch(dynamic, check=np.bool_(False)).report.checked is False  # numpy's bool is a bool
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="verify takes True or False"):
        onnxpoolfix.export(torch.nn.AdaptiveAvgPool2d(3), (torch.randn(1, 2, 7, 7),), io.BytesIO(), verify="off")


def test_export_refuses_a_text_file_before_exporting(tmp_path):
    torch = pytest.importorskip("torch")
    for f in (io.StringIO(), open(tmp_path / "t.onnx", "w")):
        with pytest.raises(TypeError, match="text file"):
            onnxpoolfix.export(torch.nn.AdaptiveAvgPool2d(3), (torch.randn(1, 2, 7, 7),), f)
        f.close()


def test_seed_reaches_every_random_input_drawn(monkeypatch):
    """patch(seed=...) and inspect_model(seed=...) seed the dynamo front end's proof as well as the check."""
    from onnxpoolfix.frontends.dynamo import front_end as dynamo
    from onnxpoolfix.inspection.model import inspect_model

    seen = []

    def recording(model, g, candidates, input_shapes, seed, *rest, **kw):
        seen.append(seed)
        return proven(model, g, candidates, input_shapes, seed, *rest, **kw)

    proven = dynamo.prove_all
    monkeypatch.setattr(dynamo, "prove_all", recording)
    model = onnx.load(FIXTURES / "dynamo" / "psp_area_symbolic.onnx")
    result = onnxpoolfix.patch(model, seed=7, check=False, allow_partial=True)  # its 2x2 bin is frozen
    assert seen and set(seen) == {7} and [n.encoding for n in result.report.nodes] == ["dynamo", "dynamo"]
    seen.clear()
    assert inspect_model(model, seed=np.int64(11), allow_partial=True).would_patch and set(seen) == {11}
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        inspect_model(model, seed=-1)

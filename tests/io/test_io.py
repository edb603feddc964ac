"""Tests for onnxpoolfix.io: loading refuses every kind of bad input with one clear line, saving is atomic,
self-contained and memory-frugal, and every saved model runs in onnxruntime exactly like its input."""
from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from big_models import write_big_model
from helpers import slow_named
from onnx import TensorProto, helper, numpy_helper

from onnxpoolfix import io as pio
from onnxpoolfix.errors import InvalidModelError, OutputError
from onnxpoolfix.io import load as pio_load
from onnxpoolfix.io import save as pio_save
from onnxpoolfix.io import tensors as pio_tensors
from onnxpoolfix.io import wire as pio_wire

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 8)).astype(np.float32)


def make_model() -> onnx.ModelProto:
    """x[2,8] @ w1[8,64] + b (a Constant node's tensor) -> Relu -> @ w2[64,4] + c (small inline): y[2,4].
    Covers initializers, attribute tensors and a tensor under the size threshold."""
    w1 = numpy_helper.from_array(RNG.standard_normal((8, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((64, 4)).astype(np.float32), "w2")
    c = numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "c")
    nodes = [
        helper.make_node("Constant", [], ["b"], value=helper.make_tensor("bt", TensorProto.FLOAT, [256], np.arange(256, dtype=np.float32).tolist())),
        helper.make_node("Slice", ["b", "s0", "s1"], ["b64"]),
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b64"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["h4"]),
        helper.make_node("Add", ["h4", "c"], ["y"]),
    ]
    inits = [w1, w2, c, numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([64], np.int64), "s1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    model.ir_version = 8
    return model


def run(path: Path, x: np.ndarray = X, name: str = "x") -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {name: x})[0]


def assert_one_line(err: pytest.ExceptionInfo, path: Path) -> None:
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg, msg
    assert err.value.hint


def external_tensor_names(model: onnx.ModelProto) -> set[str]:
    return {t.name for _, t in pio_tensors.walk_tensors(model) if pio_tensors.is_external(t)}


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def inline_model(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "model.onnx"
    path.parent.mkdir()
    onnx.save(make_model(), path)
    return path


@pytest.fixture
def external_model(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "model.onnx"
    path.parent.mkdir()
    onnx.save(make_model(), path, save_as_external_data=True, location="weights.bin", size_threshold=256)
    return path


# ------------------------------------------------------------------------------------------ bad inputs


def _bad_inputs(tmp: Path, good: bytes):
    yield "missing", tmp / "nope.onnx"
    d = tmp / "adir.onnx"
    d.mkdir()
    yield "directory", d
    for name, data in [
        ("empty", b""),
        ("random", np.random.default_rng(1).bytes(4096)),
        ("text", b"hello, this is not a model\n"),
        ("truncated", good[: len(good) // 2]),
        ("tensor", numpy_helper.from_array(np.ones((3, 4), np.float32), "t").SerializeToString()),
        ("graph", make_model().graph.SerializeToString()),
        ("node", helper.make_node("Add", ["a", "b"], ["c"], domain="org.pytorch.aten").SerializeToString()),
        ("model_without_graph", onnx.ModelProto(ir_version=8).SerializeToString()),
    ]:
        p = tmp / f"{name}.onnx"
        p.write_bytes(data)
        yield name, p


def test_bad_inputs_give_one_line_invalid_model_error(tmp_path: Path) -> None:
    good = make_model().SerializeToString()
    for name, path in _bad_inputs(tmp_path, good):
        with pytest.raises(InvalidModelError) as err:
            pio.load_model(path)
        assert_one_line(err, path)
        assert err.value.exit_code == 3


@pytest.mark.parametrize("proto", [make_model().graph, helper.make_node("Add", ["a", "b"], ["c"])])
def test_other_protobuf_messages_are_not_models(tmp_path: Path, proto) -> None:
    """A GraphProto or NodeProto parses as a ModelProto without error; it must still be refused.
    (A TensorProto, or a node with a domain, already fails to parse: covered by the test above.)"""
    p = tmp_path / "t.onnx"
    p.write_bytes(proto.SerializeToString())
    with pytest.raises(InvalidModelError, match="is not an ONNX model .* no ir_version"):
        pio.load_model(p)


def test_unreadable_file(tmp_path: Path, inline_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() == 0:  # root reads through chmod 000: simulate the failing open instead
        def denied(*_a, **_k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(pio_load, "open", denied, raising=False)
    else:
        inline_model.chmod(0)
    with pytest.raises(InvalidModelError, match="permission denied") as err:
        pio.load_model(inline_model)
    assert_one_line(err, inline_model)


def test_over_2gb_without_external_data(inline_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pio_load, "PROTOBUF_LIMIT", 100)  # stands in for a real > 2 GiB file
    with pytest.raises(InvalidModelError, match="2 GiB") as err:
        pio.load_model(inline_model)
    assert_one_line(err, inline_model)
    assert "external" in err.value.hint


def test_missing_external_data_file(external_model: Path) -> None:
    (external_model.parent / "weights.bin").unlink()
    with pytest.raises(InvalidModelError, match="weights.bin.*does not exist") as err:
        pio.load_model(external_model)
    assert_one_line(err, external_model)


def test_truncated_external_data_file(external_model: Path) -> None:
    data = external_model.parent / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(InvalidModelError, match="truncated") as err:
        pio.load_model(external_model)
    assert_one_line(err, external_model)


def test_external_location_outside_folder(tmp_path: Path, external_model: Path) -> None:
    model = onnx.load(external_model, load_external_data=False)
    for _, t in pio_tensors.walk_tensors(model):
        for e in t.external_data:
            if e.key == "location":
                e.value = "../weights.bin"
    shutil.copy(external_model.parent / "weights.bin", tmp_path / "weights.bin")
    onnx.save(model, external_model)
    with pytest.raises(InvalidModelError, match="outside the model's folder") as err:
        pio.load_model(external_model)
    assert_one_line(err, external_model)


# ------------------------------------------------------------------------------------------ loading, checking


def test_load_keeps_external_references(external_model: Path) -> None:
    model = pio.load_model(external_model)
    assert pio.has_external_data(model)
    assert external_tensor_names(model) == {"w1", "w2"}
    assert pio.external_data_files(model, external_model.parent) == [external_model.parent / "weights.bin"]
    loaded = pio.load_model(external_model, load_external_data=True)
    assert not pio.has_external_data(loaded)
    assert onnx.numpy_helper.to_array(loaded.graph.initializer[0]).shape == (8, 64)


def test_check_model(tmp_path: Path, external_model: Path) -> None:
    pio.check_model(make_model())
    pio.check_model(pio.load_model(external_model), external_model)
    with pytest.raises(ValueError):
        pio.check_model(pio.load_model(external_model))
    bad = make_model()
    bad.graph.node[2].input.pop()  # MatMul with one input
    with pytest.raises(InvalidModelError, match="fails the ONNX checker") as err:
        pio.check_model(bad, tmp_path / "bad.onnx")
    assert_one_line(err, tmp_path / "bad.onnx")


# ------------------------------------------------------------------------------------------ saving


def test_emitter_is_byte_identical_to_protobuf() -> None:
    model = make_model()
    import io as stdio

    buf = stdio.BytesIO()
    pio_wire.WireEmitter({}).write(buf, model)
    assert buf.getvalue() == model.SerializeToString()
    assert pio_wire.WireEmitter({}).size(model) == model.ByteSize()


def test_round_trip_inline(tmp_path: Path, inline_model: Path) -> None:
    model = pio.load_model(inline_model)
    out = tmp_path / "out" / "fixed.onnx"
    out.parent.mkdir()
    assert pio.save_model(model, out, source_path=inline_model) == [out]
    assert out.read_bytes() == inline_model.read_bytes()
    assert listing(out.parent) == ["fixed.onnx"]
    np.testing.assert_array_equal(run(out), run(inline_model))


def test_round_trip_external_same_folder(external_model: Path) -> None:
    model = pio.load_model(external_model)
    out = external_model.parent / "fixed.onnx"
    pio.save_model(model, out, source_path=external_model)
    assert listing(out.parent) == ["fixed.onnx", "model.onnx", "weights.bin"]  # locations kept, data shared
    assert external_tensor_names(onnx.load(out, load_external_data=False)) == {"w1", "w2"}
    onnx.load(out)
    np.testing.assert_array_equal(run(out), run(external_model))


def test_round_trip_external_other_folder_is_self_contained(tmp_path: Path, external_model: Path) -> None:
    model = pio.load_model(external_model)
    before = model.SerializeToString()
    expected = run(external_model)
    out = tmp_path / "out" / "fixed.onnx"
    out.parent.mkdir()
    written = pio.save_model(model, out, source_path=external_model)
    assert written == [out, out.parent / "fixed.onnx.data"]
    assert model.SerializeToString() == before  # the caller's model is never modified
    assert listing(out.parent) == ["fixed.onnx", "fixed.onnx.data"]
    assert (out.parent / "fixed.onnx.data").stat().st_nlink == 1  # onnx refuses hard-linked data files
    shutil.rmtree(external_model.parent)  # OUT must not depend on IN's folder
    onnx.load(out)
    np.testing.assert_array_equal(run(out), expected)


def test_round_trip_several_data_files_other_folder(tmp_path: Path) -> None:
    src = tmp_path / "in" / "model.onnx"
    src.parent.mkdir()
    onnx.save(make_model(), src, save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=256)
    model = pio.load_model(src)
    assert len(pio.external_data_files(model, src.parent)) == 2
    out = tmp_path / "out" / "fixed.onnx"
    out.parent.mkdir()
    pio.save_model(model, out, source_path=src)
    assert listing(out.parent) == ["fixed.onnx", "fixed.onnx.data"]
    np.testing.assert_array_equal(run(out), run(src))


@pytest.mark.parametrize("source", ["inline", "external"])
def test_save_as_external_data(tmp_path: Path, source: str, inline_model: Path) -> None:
    src = inline_model
    expected = run(inline_model)
    if source == "external":  # every tensor external, even Slice's starts: onnxruntime cannot load that
        src = tmp_path / "ext" / "model.onnx"
        src.parent.mkdir()
        onnx.save(onnx.load(inline_model), src, save_as_external_data=True, location="w.bin", size_threshold=0)
    model = pio.load_model(src)
    before = model.SerializeToString()
    out = tmp_path / "out" / "fixed.onnx"
    out.parent.mkdir()
    pio.save_model(model, out, source_path=src, save_as_external_data=True)
    assert model.SerializeToString() == before
    assert listing(out.parent) == ["fixed.onnx", "fixed.onnx.data"]
    saved = onnx.load(out, load_external_data=False)
    assert external_tensor_names(saved) == {"w1", "w2", "bt"}  # "c", "s0", "s1" are under the threshold
    np.testing.assert_array_equal(run(out), expected)


def test_save_as_external_data_in_place_rewrites_own_data_file(tmp_path: Path) -> None:
    src = tmp_path / "model.onnx"
    onnx.save(make_model(), src, save_as_external_data=True, location="model.onnx.data")
    expected = run(src)
    pio.save_model(pio.load_model(src), src, source_path=src, save_as_external_data=True, in_place=True)
    assert listing(tmp_path) == ["model.onnx", "model.onnx.data"]
    np.testing.assert_array_equal(run(src), expected)


def test_refuses_to_overwrite_input_data_file(tmp_path: Path) -> None:
    src = tmp_path / "a.onnx"
    onnx.save(make_model(), src, save_as_external_data=True, location="b.onnx.data")
    with pytest.raises(OutputError, match="overwrite the input model's external data"):
        pio.save_model(pio.load_model(src), tmp_path / "b.onnx", source_path=src, save_as_external_data=True)
    with pytest.raises(OutputError, match="external data file of the input"):
        pio.save_model(pio.load_model(src), tmp_path / "b.onnx.data", source_path=src)


def test_over_2gb_inline_is_saved_with_external_data(tmp_path: Path, inline_model: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model = pio.load_model(inline_model)
    monkeypatch.setattr(pio_save, "PROTOBUF_LIMIT", 2000)  # the model is ~4 KB: "too big" for this test
    out = tmp_path / "fixed.onnx"
    pio.save_model(model, out, source_path=inline_model)
    assert (tmp_path / "fixed.onnx.data").exists()
    assert {"w1", "w2"} <= external_tensor_names(onnx.load(out, load_external_data=False))
    np.testing.assert_array_equal(run(out), run(inline_model))


def test_before_commit_sees_a_loadable_temp_model(tmp_path: Path, external_model: Path) -> None:
    seen = []
    out = tmp_path / "fixed.onnx"

    def check(p: Path) -> None:
        assert p.name == out.name and p.parent != out.parent
        pio.check_model(onnx.load(p, load_external_data=False), p)
        seen.append(run(p))

    pio.save_model(pio.load_model(external_model), out, source_path=external_model, before_commit=check)
    np.testing.assert_array_equal(seen[0], run(out))


@pytest.mark.parametrize("kind", ["inline", "external", "save_as_external_data"])
def test_failed_before_commit_leaves_nothing(tmp_path: Path, inline_model: Path, kind: str) -> None:
    src = inline_model
    if kind == "external":
        src = tmp_path / "ext" / "model.onnx"
        src.parent.mkdir()
        onnx.save(make_model(), src, save_as_external_data=True, location="w.bin")
    model = pio.load_model(src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "fixed.onnx"

    def boom(_p: Path) -> None:
        raise RuntimeError("onnxruntime check failed")

    with pytest.raises(RuntimeError, match="check failed"):
        pio.save_model(model, out, source_path=src, before_commit=boom,
                       save_as_external_data=kind == "save_as_external_data")
    assert listing(out_dir) == []

    out.write_bytes(b"previous output")
    (out_dir / "fixed.onnx.data").write_bytes(b"previous data")
    with pytest.raises(RuntimeError):
        pio.save_model(model, out, source_path=src, before_commit=boom,
                       save_as_external_data=kind == "save_as_external_data")
    assert listing(out_dir) == ["fixed.onnx", "fixed.onnx.data"]
    assert out.read_bytes() == b"previous output"
    assert (out_dir / "fixed.onnx.data").read_bytes() == b"previous data"


def test_replaces_existing_output_keeping_its_mode(tmp_path: Path, inline_model: Path) -> None:
    out = tmp_path / "fixed.onnx"
    out.write_bytes(b"old")
    out.chmod(0o640)
    pio.save_model(pio.load_model(inline_model), out, source_path=inline_model)
    assert out.read_bytes() == inline_model.read_bytes()
    assert out.stat().st_mode & 0o777 == 0o640


def test_out_equal_to_in_is_refused_unless_in_place(tmp_path: Path, inline_model: Path) -> None:
    model = pio.load_model(inline_model)
    original = inline_model.read_bytes()
    alias = tmp_path / "alias.onnx"
    os.link(inline_model, alias)
    for out in (inline_model, inline_model.parent / ".." / "in" / "model.onnx", alias):
        with pytest.raises(OutputError, match="input model itself") as err:
            pio.save_model(model, out, source_path=inline_model)
        assert "\n" not in str(err.value) and err.value.exit_code == 6
    assert inline_model.read_bytes() == original
    model.producer_name = "patched"
    pio.save_model(model, inline_model, source_path=inline_model, in_place=True)
    assert onnx.load(inline_model).producer_name == "patched"
    assert listing(inline_model.parent) == ["model.onnx"]


def test_bad_output_locations(tmp_path: Path, inline_model: Path) -> None:
    model = pio.load_model(inline_model)
    a_file = tmp_path / "plain_file"
    a_file.write_bytes(b"x")
    for out, pattern in [
        (tmp_path / "missing_dir" / "m.onnx", "does not exist"),
        (a_file / "m.onnx", "not a folder"),
        (tmp_path, "is a directory"),
    ]:
        with pytest.raises(OutputError, match=pattern) as err:
            pio.save_model(model, out, source_path=inline_model)
        assert "\n" not in str(err.value) and str(out) in str(err.value)


def test_unwritable_folder(tmp_path: Path, inline_model: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod does not stop writes (the path-under-a-file case is tested above)")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="cannot write to folder"):
            pio.save_model(pio.load_model(inline_model), folder / "m.onnx", source_path=inline_model)
    finally:
        folder.chmod(0o700)


def test_write_failure_is_output_error_and_cleans_up(tmp_path: Path, inline_model: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(self, f, msg, path=()):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pio_wire.WireEmitter, "write", disk_full)
    with pytest.raises(OutputError, match="No space left") as err:
        pio.save_model(pio.load_model(inline_model), tmp_path / "m.onnx", source_path=inline_model)
    assert "\n" not in str(err.value)
    assert listing(tmp_path) == ["in"]


# ------------------------------------------------------------------------------------------ > 2 GiB


@pytest.mark.slow
def test_over_2gb_external_model(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if not slow_named(request.config):
        pytest.skip("writes 2.5 GB: only when -m names slow (`make test-all` does)")
    rows, cols, count = 800_000, 256, 3  # 3 x 819 MB = 2.46 GB of weights
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "merged").mkdir()
    try:
        t0 = time.perf_counter()
        src = write_big_model(tmp_path / "in", rows, cols, count)
        assert (src.parent / "weights.bin").stat().st_size > 2**31
        t1 = time.perf_counter()
        model = pio.load_model(src)
        assert pio.has_external_data(model)
        out = tmp_path / "out" / "fixed.onnx"
        pio.save_model(model, out, source_path=src)
        t2 = time.perf_counter()
        merged = tmp_path / "merged" / "fixed.onnx"
        pio.save_model(model, merged, source_path=src, save_as_external_data=True)
        t3 = time.perf_counter()
        rss_save = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        pio.check_model(onnx.load(merged, load_external_data=False), merged)

        idx = np.array([0, 1, rows // 2, rows - 1], np.int64)
        r = idx[:, None]
        expected = sum(((r * 7 + np.arange(cols) + i) % 1009).astype(np.float32) for i in range(count)) + 0.5
        for path in (src, out, merged):
            np.testing.assert_array_equal(run(path, idx, "idx"), expected)
        t4 = time.perf_counter()
        print(f"\n>2GB test: generate {t1 - t0:.1f}s, load+save (whole-file copy) {t2 - t1:.2f}s, "
              f"save_as_external_data (stream copy) {t3 - t2:.1f}s, ORT x3 {t4 - t3:.1f}s; "
              f"peak RSS through the saves {rss_save} MiB, overall "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB")
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_signal_landing_right_after_the_temporary_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """The CLI's SIGTERM handler raises where the signal lands; landing between the mkdir of OUT's temporary
    folder and the code that removes it left the folder behind (mkdtemp names it only once made)."""
    import os

    from onnxpoolfix.io.outfile import resolve_output, temp_folder

    class Landed(BaseException):
        pass

    real = os.mkdir

    def mkdir_then_signal(path, *args, **kwargs):
        real(path, *args, **kwargs)
        raise Landed

    monkeypatch.setattr(os, "mkdir", mkdir_then_signal)
    try:
        with temp_folder(resolve_output(tmp_path / "o.onnx")):
            raise AssertionError("not reached")
    except Landed:
        pass
    assert list(tmp_path.iterdir()) == []

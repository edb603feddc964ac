"""Cost constants measured on the machine (lowering/calibration.py, `onnxpoolfix calibrate`): used only
where --costs (API costs=) names the file (the default stays the built-in constants, deterministic), and the
report's `why` then says so. No timing is asserted, only that the measured constants are sane numbers."""
from __future__ import annotations

import json

from click.testing import CliRunner
from helpers import make_leftover

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.lowering import calibration
from onnxpoolfix.lowering import cost as C


def _node(model, costs=None):
    (node,) = onnxpoolfix.patch(model, check=False, costs=costs).report.nodes
    return node


def test_default_is_the_built_in_constants(monkeypatch, tmp_path):
    path = tmp_path / "costs.json"
    calibration.save(dict(calibration.BUILT_IN, POOL_RATE=C.POOL_RATE / 1000), path)
    monkeypatch.setenv("ONNXPOOLFIX_COSTS", str(path))  # (what once chose them: the environment no longer does)
    node = _node(make_leftover("avg", [1, 256, 33, 33], (8, 8)))
    assert node.lowering == "pool" and "costs" not in node.why
    assert all(getattr(C, k) == v for k, v in calibration.BUILT_IN.items())


def test_a_costs_file_is_used_and_named_then_dropped(tmp_path):
    path = tmp_path / "costs.json"
    # a machine whose pooling ops were 1000x slower: the planner must leave AveragePool for the MatMul
    calibration.save(dict(calibration.BUILT_IN, POOL_RATE=C.POOL_RATE / 1000), path)
    node = _node(make_leftover("avg", [1, 256, 33, 33], (8, 8)), costs=path)
    assert node.lowering != "pool" and f"costs calibrated in {path}" in node.why
    assert C.POOL_RATE == calibration.BUILT_IN["POOL_RATE"]  # installed for that planning only
    node = _node(make_leftover("avg", [1, 256, 33, 33], (8, 8)))
    assert node.lowering == "pool" and "costs" not in node.why


def test_an_unreadable_costs_file_is_a_usage_error(tmp_path):
    import pytest

    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"schema": 1, "constants": {"POOL_RATE": "fast"}}))
    for bad in (path, tmp_path / "missing.json"):
        with pytest.raises(onnxpoolfix.ArgumentError, match="costs="):
            _node(make_leftover("avg", [1, 256, 33, 33], (8, 8)), costs=bad)
        src = tmp_path / "m.onnx"
        import onnx
        onnx.save(make_leftover("avg", [1, 256, 33, 33], (8, 8)), src)
        r = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx"), "--costs", str(bad)])
        assert r.exit_code == 2 and f"--costs {bad}" in r.stderr and not (tmp_path / "o.onnx").exists(), r.output
    assert C.POOL_RATE == calibration.BUILT_IN["POOL_RATE"]


def test_calibrate_command_writes_a_file_the_planner_reads(tmp_path):
    path = tmp_path / "sub" / "costs.json"
    path.parent.mkdir()  # a folder named with --out must exist, as OUT's must
    result = CliRunner().invoke(main, ["calibrate", "--out", str(path), "--threads", "1"])
    assert result.exit_code == 0, result.output
    found = calibration.load(path)
    assert set(found) == set(calibration.MEASURED)
    assert all(0 < v < float("inf") for k, v in found.items() if k != "GATHER_BLOCK")
    assert f"--costs {path}" in result.output
    src = tmp_path / "m.onnx"
    import onnx
    onnx.save(make_leftover("max", [1, 8, 10, 10], (7, 7)), src)
    r = CliRunner().invoke(main, ["inspect", str(src), "--costs", str(path)])
    assert r.exit_code == 0 and "costs calibrated" in r.stdout, r.output


def test_calibrate_to_an_unwritable_file_is_an_output_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["calibrate", "--out", str(blocker / "costs.json"), "--threads", "1"])
    assert result.exit_code == 6 and "hint:" in result.output


def test_a_rate_of_zero_or_a_constant_not_finite_is_a_usage_error(tmp_path):
    """A rate divides a cost: {"BANDWIDTH": 0} crashed the planner (ZeroDivisionError, exit 1; found by
    review); Infinity/NaN (JSON takes them) planned with nonsense. A usage error naming the constant, nothing
    written. A time of 0 (GATHER_BLOCK, which calibrate may measure) stays valid."""
    import onnx
    import pytest

    src = tmp_path / "m.onnx"
    onnx.save(make_leftover("max", [1, 8, 10, 10], (7, 7)), src)
    for name, value in (("BANDWIDTH", 0), ("POOL_RATE", 0), ("MAC_RATE", float("inf")), ("NODE", float("nan"))):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"schema": 1, "constants": {name: value}}))
        with pytest.raises(onnxpoolfix.ArgumentError, match=name):
            _node(make_leftover("max", [1, 8, 10, 10], (7, 7)), costs=path)
        r = CliRunner().invoke(main, [str(src), str(tmp_path / "o.onnx"), "--costs", str(path)])
        assert r.exit_code == 2 and name in r.stderr and not (tmp_path / "o.onnx").exists(), r.output
    path = tmp_path / "zero_block.json"
    path.write_text(json.dumps({"schema": 1, "constants": {"GATHER_BLOCK": 0.0}}))
    assert _node(make_leftover("max", [1, 8, 10, 10], (7, 7)), costs=path).lowering


def test_calibrate_writes_into_a_device_and_refuses_what_patch_refuses(tmp_path):
    """calibrate wrote a temporary file beside --out and renamed it over it: --out /dev/null, as root, replaced
    the machine's /dev/null with a regular file (found by review). It writes as OUT is written now: into a
    character device, atomically for a file; '-' and a missing folder are refused as for OUT. (A private
    device node here, made where the test may: never the real /dev/null.)"""
    import os
    import stat

    import pytest

    dev = tmp_path / "null"
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here (not root)")
    calibration.save(dict(calibration.BUILT_IN), dev)
    assert stat.S_ISCHR(os.stat(dev).st_mode) and os.listdir(tmp_path) == ["null"]
    r = CliRunner().invoke(main, ["calibrate", "--out", "-"])
    assert r.exit_code == 2 and not (tmp_path / "-").exists()
    r = CliRunner().invoke(main, ["calibrate", "--out", str(tmp_path / "missing" / "c.json")])
    assert r.exit_code == 6 and not (tmp_path / "missing").exists(), r.output

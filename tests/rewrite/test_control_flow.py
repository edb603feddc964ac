"""Leftovers inside If branches and Loop bodies (issue 12, case 4): torch.jit.script'ed models with control
flow, exported with ONNX_FALLTHROUGH, as real users export them.

torch writes the bodies' outputs without types and the Loop's result without a shape: the tool must take
such a file as it is (never "malformed"), patch the leftovers inside the bodies, and the patched model must
match torch on EVERY branch (the tests run each one; the tool's own check runs each replaced subgraph
alone, which a sabotaged reference shows below).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from control_flow_models import chained_modules, export_scripted, if_modules, loop_modules
from helpers import assert_avg_close, assert_bits_equal, leftover_nodes, leftovers_in_if_branches, ort_run

import onnxpoolfix
from onnxpoolfix.cli import main
from onnxpoolfix.errors import CheckFailedError
from onnxpoolfix.graph import nodes_deep


def _no_leftover_anywhere(model):
    assert leftover_nodes(model) == []
    assert [n.op_type for n in nodes_deep(model.graph.node) if n.domain == "org.pytorch.aten"] == []
    assert all(o.domain != "org.pytorch.aten" for o in model.opset_import)
    onnx.checker.check_model(model, full_check=True)


def _compare(got, want, x, kind):
    if kind == "max":
        assert_bits_equal(got, want, "max")
    else:
        assert_avg_close(got, want, x, rel=2e-6)


IF_VARIANTS = ["avg3x3_vs_max3x3", "avg5x7_vs_max5x7", "max1d_vs_avg1d", "upsample_vs_avg"]


@pytest.mark.parametrize("name", IF_VARIANTS)
def test_leftovers_in_both_if_branches_patch_and_match_torch_on_each_branch(name, torch_mod):
    torch = torch_mod
    module, k_then, k_else, shape = if_modules(torch)[name]
    exported = export_scripted(torch, module, (torch.randn(*shape), True), ["x", "flag"])
    assert leftover_nodes(exported) == []  # all of them are in the branches
    assert any(n.domain == "org.pytorch.aten" for n in nodes_deep(exported.graph.node))
    result = onnxpoolfix.patch(exported)
    assert len(result.report.nodes) == 2 and result.report.check_passed
    assert all("inside a control-flow body" in n.why for n in result.report.nodes)
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(0)
    for flag, kind in ((True, k_then), (False, k_else)):
        for _ in range(3):
            x = rng.standard_normal(shape).astype(np.float32)
            got = ort_run(result.model, {"x": x, "flag": np.array(flag)})[0]
            with torch.no_grad():
                want = module(torch.from_numpy(x), flag).numpy()
            _compare(got, want, x, kind)


def test_leftover_in_a_loop_body_matches_torch_for_every_trip_count(torch_mod):
    torch = torch_mod
    module = loop_modules(torch)["loop"]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), 3), ["x", "n"])
    result = onnxpoolfix.patch(exported)
    assert [n.op for n in result.report.nodes] == ["adaptive_avg_pool2d"]
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 5):
        x = rng.standard_normal((1, 2, 9, 10)).astype(np.float32)
        got = ort_run(result.model, {"x": x, "n": np.array(n, dtype=np.int64)})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x), n).numpy()
        assert_avg_close(got, want, x * max(n, 1), rel=2e-6 * max(n, 1))


def test_if_inside_a_loop_body_with_a_leftover_in_each_branch(torch_mod):
    """Nested: Loop body -> If -> both branches pool; every path through them is run."""
    torch = torch_mod
    module = loop_modules(torch)["loop_if"]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 7, 8), 2), ["x", "n"])
    result = onnxpoolfix.patch(exported)
    assert sorted(n.op for n in result.report.nodes) == ["adaptive_avg_pool2d"] * 2 + ["adaptive_max_pool2d"]
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(2)
    for n in (1, 2, 3):
        x = rng.standard_normal((1, 2, 7, 8)).astype(np.float32)
        got = ort_run(result.model, {"x": x, "n": np.array(n, dtype=np.int64)})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x), n).numpy()
        assert_avg_close(got, want, 2 * (np.abs(x) + n), rel=4e-6)


def test_dynamic_hw_leftover_in_an_if_branch_is_exact_at_other_sizes(torch_mod):
    torch = torch_mod
    module = if_modules(torch)["dynamic"][0]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"],
                       dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    result = onnxpoolfix.patch(exported)
    assert [n.lowering for n in result.report.nodes] == ["dynamic", "dynamic"]
    assert all(len(n.checked_shapes) == 3 for n in result.report.nodes)  # uniform, non-uniform, upsampling
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(3)
    for shape in [(1, 2, 9, 10), (2, 2, 7, 13), (1, 2, 2, 3), (1, 2, 20, 11)]:
        for flag, kind in ((True, "avg"), (False, "max")):
            x = rng.standard_normal(shape).astype(np.float32)
            got = ort_run(result.model, {"x": x, "flag": np.array(flag)})[0]
            with torch.no_grad():
                want = module(torch.from_numpy(x), flag).numpy()
            _compare(got, want, x, kind)


def test_the_check_runs_the_branch_random_inputs_do_not_take(torch_mod, monkeypatch):
    """A wrong max reference must fail the check although the model's max pool is in a branch; and the
    avg branch stays as it was (the failure names the max node)."""
    torch = torch_mod
    module = if_modules(torch)["avg3x3_vs_max3x3"][0]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"])
    from onnxpoolfix import reference

    real = reference.adaptive_max_pool_values
    monkeypatch.setattr(reference, "adaptive_max_pool_values", lambda x, size: real(x, size) + 1)
    with pytest.raises(CheckFailedError, match="adaptive_max_pool2d") as err:
        onnxpoolfix.patch(exported)
    rows = err.value.report.nodes
    assert [r.op for r in rows] == ["adaptive_avg_pool2d", "adaptive_max_pool2d"]


def test_cli_takes_a_scripted_export_with_untyped_body_outputs(tmp_path, torch_mod):
    """torch's If/Loop outputs have no types: the input check must not call that malformed (exit 3)."""
    torch = torch_mod
    module = if_modules(torch)["avg3x3_vs_max3x3"][0]
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"])
    untyped = [o for n in exported.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH
               for o in a.g.output if o.type.WhichOneof("value") is None]
    assert untyped, "torch no longer writes untyped If outputs: this test needs a new premise"
    src, out = tmp_path / "if.onnx", tmp_path / "out.onnx"
    onnx.save(exported, src)
    r = CliRunner().invoke(main, [str(src), str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "inside If/Loop/Scan bodies" in r.output
    _no_leftover_anywhere(onnx.load(out))


def test_leftover_in_a_scan_body_with_an_outer_scope_size():
    """Scan (torch does not write it; other exporters do): the body pools each slice, unbatched, and reads
    the output size from the outer graph; the untyped body input gets its shape from the Scan."""
    from onnx import TensorProto, helper

    from onnxpoolfix import reference

    size = helper.make_node("Constant", [], ["size"], value=onnx.numpy_helper.from_array(np.array([3, 4], np.int64)))
    body = helper.make_graph(
        [helper.make_node("adaptive_max_pool2d", ["x_t", "size"], ["p_t", "i_t"], domain="org.pytorch.aten"),
         helper.make_node("Identity", ["p_t"], ["y_t"])],
        "body", [helper.make_tensor_value_info("x_t", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y_t", TensorProto.FLOAT, None)])
    graph = helper.make_graph([size, helper.make_node("Scan", ["xs"], ["ys"], body=body, num_scan_inputs=1)], "g",
                              [helper.make_tensor_value_info("xs", TensorProto.FLOAT, [5, 2, 9, 10])],
                              [helper.make_tensor_value_info("ys", TensorProto.FLOAT, [5, 2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("org.pytorch.aten", 1)], ir_version=8)
    result = onnxpoolfix.patch(model)
    assert [n.input_shape for n in result.report.nodes] == [[2, 9, 10]]
    _no_leftover_anywhere(result.model)
    assert [n.op_type for n in result.model.graph.node] == ["Scan"]  # the size Constant went with its reader
    x = np.random.default_rng(4).standard_normal((5, 2, 9, 10)).astype(np.float32)
    x[1, 0, :3, :3] = np.nan
    got = ort_run(result.model, {"xs": x})[0]
    want = np.stack([reference.adaptive_max_pool_values(x[t], (3, 4)) for t in range(5)])
    assert_bits_equal(got, want, "scan")


def test_leftovers_chained_across_an_if_both_ways(torch_mod):
    """A top-level leftover pooling an If's (untyped) result, and a branch pooling a top-level leftover's
    output: each order of dependency patches and matches torch on both branches."""
    torch = torch_mod
    rng = np.random.default_rng(5)
    for module in chained_modules(torch).values():
        exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"])
        result = onnxpoolfix.patch(exported)
        assert len(result.report.nodes) == 3
        _no_leftover_anywhere(result.model)
        for flag in (True, False):
            x = rng.standard_normal((1, 2, 9, 10)).astype(np.float32)
            got = ort_run(result.model, {"x": x, "flag": np.array(flag)})[0]
            with torch.no_grad():
                want = module(torch.from_numpy(x), flag).numpy()
            assert_avg_close(got, want, x, rel=4e-6)


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_max_indices_in_both_branches_bit_for_bit(torch_mod, target):
    torch = torch_mod
    F = torch.nn.functional

    class WithIndices(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y, i = F.adaptive_max_pool2d(x, (4, 3), return_indices=True)
            else:
                y, i = F.adaptive_max_pool2d(x * 2.0, (5, 7), return_indices=True)
                y = y[:, :, :4, :3]
                i = i[:, :, :4, :3]
            return y, i

    module = WithIndices()
    exported = export_scripted(torch, module, (torch.randn(1, 2, 9, 10), True), ["x", "flag"])
    result = onnxpoolfix.patch(exported, target=target)
    assert [n.indices for n in result.report.nodes] == ["computed", "computed"]
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(6)
    for flag in (True, False):
        x = rng.standard_normal((1, 2, 9, 10)).astype(np.float32)
        x[0, 1, 2:5, 3:6] = np.nan
        got_y, got_i = ort_run(result.model, {"x": x, "flag": np.array(flag)})
        with torch.no_grad():
            want_y, want_i = (w.numpy() for w in module(torch.from_numpy(x), flag))
        assert_bits_equal(got_y, want_y, f"values, flag={flag}")
        np.testing.assert_array_equal(got_i, want_i)


@pytest.mark.parametrize("body_pools_too", [False, True])
def test_a_pool_torch_hoists_out_of_a_loop_types_the_loop_result(tmp_path, torch_mod, body_pools_too):
    """torch's exporter moves a loop-invariant pool out of the Loop: the leftover is then top-level, the
    Loop's initial value and read in the body, and the Loop's result left untyped (``type {}``). The CLI
    must not call that malformed (exit 3), and the patched file must pass the ONNX checker itself. With
    ``body_pools_too``, the body holds a leftover of its own as well (not hoisted: it reads the counter)."""
    torch = torch_mod
    F = torch.nn.functional

    class HoistedPool(torch.nn.Module):
        def forward(self, x, n: int):
            acc = F.adaptive_avg_pool2d(x, [5, 7])
            for _ in range(n):
                acc = acc + F.adaptive_avg_pool2d(x, [5, 7])
            return acc

    class HoistedAndBodyPool(torch.nn.Module):
        def forward(self, x, n: int):
            acc = F.adaptive_avg_pool2d(x, [5, 7])
            for i in range(n):
                acc = acc + F.adaptive_avg_pool2d(x * float(i), [5, 7])
            return acc

    module = HoistedAndBodyPool() if body_pools_too else HoistedPool()
    exported = export_scripted(torch, module, (torch.randn(1, 2, 8, 9), 3), ["x", "n"])
    assert onnxpoolfix.frontends.bodies.has_nested_leftovers(exported) == body_pools_too
    assert exported.graph.output[0].type.WhichOneof("value") is None, "torch now types the Loop's result"
    src, out = tmp_path / "loop.onnx", tmp_path / "out.onnx"
    onnx.save(exported, src)
    r = CliRunner().invoke(main, [str(src), str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    patched = onnx.load(out)
    _no_leftover_anywhere(patched)
    x = np.random.default_rng(2).standard_normal((1, 2, 8, 9)).astype(np.float32)
    for n in (0, 1, 3):
        got = ort_run(patched, {"x": x, "n": np.array(n, dtype=np.int64)})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x), n).numpy()
        assert_avg_close(got, want, x * (n + 1), rel=2e-6 * (n + 1) ** 2)


def test_a_top_level_pool_read_inside_if_branches(tmp_path, torch_mod):
    """A top-level leftover whose output only the branches read: torch leaves the branches' outputs and the
    If's result untyped, as around leftovers in bodies (it was exit 3, 'malformed')."""
    torch = torch_mod
    F = torch.nn.functional

    class IfAfter(torch.nn.Module):
        def forward(self, x, flag: bool):
            y = F.adaptive_max_pool2d(x, [5, 7])
            if flag:
                z = y * 2.0
            else:
                z = y + 1.0
            return z

    module = IfAfter()
    exported = export_scripted(torch, module, (torch.randn(1, 2, 8, 9), True), ["x", "flag"])
    src, out = tmp_path / "if.onnx", tmp_path / "out.onnx"
    onnx.save(exported, src)
    r = CliRunner().invoke(main, [str(src), str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    patched = onnx.load(out)
    _no_leftover_anywhere(patched)
    x = np.random.default_rng(3).standard_normal((1, 2, 8, 9)).astype(np.float32)
    for flag in (True, False):
        got = ort_run(patched, {"x": x, "flag": np.array(flag)})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x), flag).numpy()
        assert_bits_equal(got, want, "max")


def test_a_branch_below_opset_9_in_an_ir3_file_is_valid(torch_mod):
    """A branch's new constants are Constant nodes (a body cannot take new inputs), and before opset 9 a Constant
    holds float types only: the window sums' int64 tables are float Constants cast back. onnx's full check and a
    torch on each branch judge (the top level of such a file goes to IR 4: tests/test_fixtures.py)."""
    from onnx import TensorProto

    model = leftovers_in_if_branches(opset=8, ir_version=3)
    result = onnxpoolfix.patch(model)
    _no_leftover_anywhere(result.model)
    onnx.checker.check_model(result.model, full_check=True)
    constants = [n for n in nodes_deep(result.model.graph.node) if n.op_type == "Constant"]
    types = {n.attribute[0].t.data_type for n in constants}
    assert TensorProto.DOUBLE in types and types <= {TensorProto.FLOAT, TensorProto.DOUBLE}  # (the tables: float64)
    x = np.random.default_rng(6).standard_normal((1, 2, 8, 9)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan  # the window sums keep it in its window
    for c in (True, False):
        got = ort_run(result.model, {"x": x, "c": np.array(c)})[0]
        want = torch_mod.nn.functional.adaptive_avg_pool2d(torch_mod.from_numpy(x), (5, 7)).numpy()
        assert_avg_close(got, want, x)


@pytest.mark.parametrize("pool", ["avg", "max"])
def test_a_size_computed_from_the_input_outside_the_branch(torch_mod, pool):
    """``h = x.shape[-1] // 2`` computed before an If, a branch pooling to (h, 3): the replacement reads a size
    tensor of the outer graph, which its check alone is fed (uniform, non-uniform, upsampling). OUT matches
    torch on both branches at sizes the test picks; a wrong reference fails the check of that node."""
    torch = torch_mod
    f = torch.nn.functional.adaptive_avg_pool2d if pool == "avg" else torch.nn.functional.adaptive_max_pool2d

    class Half(torch.nn.Module):
        def forward(self, x):
            h = x.shape[-1] // 2
            if h > 3:
                y = f(x, [h, 3])
            else:
                y = f(x, [3, 3])
            return y

    module = torch.jit.script(Half())
    exported = export_scripted(torch, module, (torch.randn(1, 3, 9, 10),), ["x"],
                               dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    result = onnxpoolfix.patch(exported)
    assert result.report.check_passed and all(len(n.checked_shapes) == 3 for n in result.report.nodes)
    _no_leftover_anywhere(result.model)
    rng = np.random.default_rng(5)
    for shape in [(1, 3, 9, 10), (2, 3, 7, 13), (1, 3, 4, 6), (1, 3, 20, 11), (1, 3, 5, 30)]:  # h > 3 and not
        x = rng.standard_normal(shape).astype(np.float32)
        got = ort_run(result.model, {"x": x})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        _compare(got, want, x, pool)


def test_the_check_of_a_fed_size_catches_a_wrong_reference(torch_mod, monkeypatch):
    torch = torch_mod

    class Half(torch.nn.Module):
        def forward(self, x):
            h = x.shape[-1] // 2
            if h > 3:
                y = torch.nn.functional.adaptive_avg_pool2d(x, [h, 3])
            else:
                y = torch.nn.functional.adaptive_avg_pool2d(x, [3, 3])
            return y

    exported = export_scripted(torch, torch.jit.script(Half()), (torch.randn(1, 3, 9, 10),), ["x"],
                               dynamic_axes={"x": {2: "H", 3: "W"}})
    from onnxpoolfix import reference

    real = reference.adaptive_avg_pool
    monkeypatch.setattr(reference, "adaptive_avg_pool", lambda x, size: real(x, size) * 1.01)
    with pytest.raises(CheckFailedError, match="adaptive_avg_pool2d"):
        onnxpoolfix.patch(exported)


def test_a_branch_returning_its_input_as_it_is(torch_mod):
    """torch declares such an If's result with the example's shape and no element type, which the ONNX
    checker rejects: the file is taken (its declarations completed from inference, as for untyped body
    outputs) and OUT, valid, matches torch on both branches."""
    torch = torch_mod

    class PoolOrNot(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = torch.nn.functional.adaptive_avg_pool2d(x, [5, 3])
            else:
                y = x
            return y

    module = torch.jit.script(PoolOrNot())
    exported = export_scripted(torch, module, (torch.randn(1, 3, 9, 10), True), ["x", "flag"])
    assert not exported.graph.output[0].type.tensor_type.elem_type  # what the test is about
    result = onnxpoolfix.patch(exported)
    _no_leftover_anywhere(result.model)
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 10)).astype(np.float32)
    for flag in (True, False):
        got = ort_run(result.model, {"x": x, "flag": np.array(flag)})[0]
        with torch.no_grad():
            want = module(torch.from_numpy(x), flag).numpy()
        _compare(got, want, x, "avg")


def test_a_pool_of_a_loop_result_growing_per_iteration_is_refused_without_useless_advice(torch_mod):
    """The pooled tensor doubles along H at each of a data-dependent number of iterations: onnx's inference
    cannot give it a shape, with the inputs bound or not. Refused (no file); once bound, the hint does not
    advise binding again."""
    torch = torch_mod
    from onnxpoolfix.errors import ShapeError

    class LoopGrow(torch.nn.Module):
        def forward(self, x):
            y = x
            for _ in range(int(x.shape[2]) % 3 + 1):
                y = torch.cat([y, y], 2)
            return torch.nn.functional.adaptive_avg_pool2d(y, [3, 5])

    exported = export_scripted(torch, LoopGrow(), (torch.randn(1, 3, 9, 7),), ["x"],
                               dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    with pytest.raises(ShapeError) as free:
        onnxpoolfix.patch(exported)
    assert "input_shapes" in free.value.hint  # symbolic inputs: binding them is the advice
    with pytest.raises(ShapeError) as bound:
        onnxpoolfix.patch(exported, input_shapes={"x": [1, 3, 9, 7]})
    assert "input_shapes" not in (bound.value.hint or "")


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_a_pooled_loop_carried_value_is_exact_on_every_pass(kind, torch_mod):
    """``y = pool(y, [6, 5]) - 0.5`` in a scripted loop, exported static at 10x13: torch declares the carried y
    with its first pass's shape (10x13); from the second pass on it is 6x5. The replacement used to be built
    for 10x13 alone and checked alone at that shape: exit 0, and OUT failed in onnxruntime at the one size it
    takes (found by review11). The carried value's dims are now read as unknown: the dynamic lowering."""
    torch = torch_mod
    F = torch.nn.functional

    class CarriedAvg(torch.nn.Module):
        def forward(self, x):
            y = x
            for _ in range(x.shape[3] // 5 + 1):  # 3 passes at W = 13
                y = F.adaptive_avg_pool2d(y, [6, 5]) - 0.5
            return y

    class CarriedMax(torch.nn.Module):
        def forward(self, x):
            y = x
            for _ in range(x.shape[3] // 5 + 1):
                y = F.adaptive_max_pool2d(y, [6, 5]) - 0.5
            return y

    Carried = CarriedAvg if kind == "avg" else CarriedMax
    module = Carried().eval()
    x = torch.randn(1, 4, 10, 13)
    exported = export_scripted(torch, module, (x,), ["x"])
    out = onnxpoolfix.patch(exported).model
    _no_leftover_anywhere(out)
    (got,) = ort_run(out, {"x": x.numpy()})
    _compare(got, module(x).numpy(), x.numpy(), kind)


def test_the_whole_model_is_run_where_a_body_replacement_alone_cannot_tell(torch_mod, monkeypatch):
    """Each body replacement is also checked alone, at its body's declared shapes, which a loop can contradict.
    With the carried values read as declared again (the fix above undone), the loop-carried pool is built for
    its first pass alone: the whole model, run once at its static input size, fails in onnxruntime, and the
    file is refused rather than written."""
    torch = torch_mod
    F = torch.nn.functional
    from onnxpoolfix.errors import CheckFailedError
    from onnxpoolfix.frontends import bodies as front_bodies
    from onnxpoolfix.rewrite import model as rewrite_model  # where the rewrite calls it

    class Carried(torch.nn.Module):
        def forward(self, x):
            y = x
            for _ in range(x.shape[3] // 5 + 1):
                y = F.adaptive_avg_pool2d(y, [6, 5]) - 0.5
            return y

    exported = export_scripted(torch, Carried().eval(), (torch.randn(1, 4, 10, 13),), ["x"])
    for where in (front_bodies, rewrite_model):
        monkeypatch.setattr(where, "relax_loop_carried", lambda model: None)
    with pytest.raises(CheckFailedError, match="running the patched model at its input sizes"):
        onnxpoolfix.patch(exported)

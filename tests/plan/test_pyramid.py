"""Pools of one tensor planned together (onnxpoolfix/pyramid.py) and exporter pools (--optimize-exporter-pools).

Every patched model is compared with torch; the structural claims (the input is read once, the exporter's
GlobalAveragePool becomes a ReduceMean, pools that are already the fastest form stay) are asserted on the
written graph.
"""
from __future__ import annotations

import io
import json
import warnings

import numpy as np
import onnx
import pytest
from helpers import assert_avg_close, assert_bits_equal, ort_run, pyramid_leftovers

import onnxpoolfix
from onnxpoolfix import windows as W
from onnxpoolfix.tensorrt import lint_tensorrt

torch = pytest.importorskip("torch")
nn = torch.nn
FALLTHROUGH = torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH


# ---- the window math ----------------------------------------------------------------------------------

def _two_stage(x: np.ndarray, n: int, fine: int, coarse: int, average: bool) -> np.ndarray:
    f = W.pooling_matrix(n, fine, dtype=np.float64) @ x if average else \
        np.array([x[s:e].max() for s, e in W.windows(n, fine)])
    if average:
        return W.pooling_matrix(fine, coarse, dtype=np.float64) @ f
    return np.array([f[s:e].max() for s, e in W.windows(fine, coarse)])


def _direct(x: np.ndarray, n: int, m: int, average: bool) -> np.ndarray:
    if average:
        return W.pooling_matrix(n, m, dtype=np.float64) @ x
    return np.array([x[s:e].max() for s, e in W.windows(n, m)])


def test_nests_is_sound_for_every_small_size():
    """Whenever nests() says so, pooling through the finer level equals pooling directly (float64)."""
    rng = np.random.default_rng(0)
    said_yes = {True: 0, False: 0}
    for n in range(1, 41):
        x = rng.standard_normal(n)
        for fine in range(1, n + 3):
            for coarse in range(1, fine + 1):
                for average in (True, False):
                    if W.nests(n, fine, coarse, average=average):
                        said_yes[average] += 1
                        got, want = _two_stage(x, n, fine, coarse, average), _direct(x, n, coarse, average)
                        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"{n}: {fine}->{coarse}")
    assert said_yes[True] > 500 and said_yes[False] > said_yes[True]  # max nests more often than averages


def test_nests_known_cases():
    assert all(W.nests(60, 6, c, average=True) for c in (1, 2, 3, 6))
    assert not W.nests(64, 6, 3, average=True)  # 64 -> 6 windows overlap: a mean of means double-counts
    assert W.nests(64, 6, 3, average=False)  # ... which max does not mind
    assert W.nests(64, 2, 1, average=True)
    assert not W.nests(10, 4, 2, average=True)  # 10 -> 4 lengths 3,3,3,3 overlap


# ---- PSP pyramids exported from torch -----------------------------------------------------------------

class Pyramid(nn.Module):
    def __init__(self, kind: str, sizes, dim: int = 2):
        super().__init__()
        cls = getattr(nn, f"Adaptive{'Avg' if kind == 'avg' else 'Max'}Pool{dim}d")
        self.pools = nn.ModuleList([cls(s) for s in sizes])

    def forward(self, x):
        return tuple(p(x) for p in self.pools)


def _export(module, x, opset=17) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, operator_export_type=FALLTHROUGH, opset_version=opset,
                          input_names=["x"])
    return onnx.load_from_string(f.getvalue())


def _readers(model: onnx.ModelProto, name: str) -> list[str]:
    return [n.op_type for n in model.graph.node if name in n.input]


def _compare(module, x, model, kind):
    want = [t.numpy() for t in module(x)]
    got = ort_run(model, {"x": x.numpy()})
    for g, w in zip(got, want):
        if kind == "avg":
            assert_avg_close(g, w, x.numpy())
        else:
            assert_bits_equal(g, w)


CASES = [  # kind, input shape, sizes, dim
    ("avg", (2, 8, 60, 60), (1, 2, 3, 6), 2),
    ("avg", (1, 8, 64, 64), (1, 2, 3, 6), 2),
    ("avg", (2, 4, 33, 17), (1, 2, 3, 6, (5, 7)), 2),
    ("avg", (2, 4, 50), (1, 5, 7, 10), 1),
    ("avg", (1, 3, 12, 13, 14), (1, 2, 3), 3),
    ("avg", (1, 8, 9, 9), (7, 3, 2), 2),
    ("max", (2, 8, 64, 64), (1, 2, 3, 6), 2),
    ("max", (1, 4, 31, 29), (2, 3, 5, 7), 2),
    ("max", (2, 4, 30, 30), (2, 3, 5, 6, 10, 15, (7, 4)), 2),
]


@pytest.mark.parametrize("kind,shape,sizes,dim", CASES, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("optimize", [False, True], ids=["default", "optimize-exporter-pools"])
@pytest.mark.parametrize("grouping", ["planned", "forced"])
def test_pyramid_matches_torch(kind, shape, sizes, dim, optimize, grouping, monkeypatch):
    """'forced': every group the math allows is used, whatever the cost model says (small inputs here)."""
    if grouping == "forced":
        monkeypatch.setattr("onnxpoolfix.plan.pyramid.GROUP_GAIN", float("inf"))
    torch.manual_seed(0)
    module = Pyramid(kind, sizes, dim).eval()
    x = torch.randn(*shape)
    result = onnxpoolfix.patch(_export(module, x), optimize_exporter_pools=optimize)
    assert result.report.check_passed or result.report.status == "nothing-to-patch"
    assert not any(n.domain == "org.pytorch.aten" for n in result.model.graph.node)
    _compare(module, x, result.model, kind)
    onnx.checker.check_model(result.model)


def test_psp_60_reads_its_input_once_with_optimize():
    """All four pools are the exporter's: with the flag the 6x6 level reads x, the others read the 6x6."""
    module = Pyramid("avg", (1, 2, 3, 6)).eval()
    x = torch.randn(1, 16, 60, 60)
    model = _export(module, x)
    assert onnxpoolfix.patch(model).report.status == "nothing-to-patch"
    result = onnxpoolfix.patch(model, optimize_exporter_pools=True)
    assert len(_readers(result.model, "x")) == 1, _readers(result.model, "x")
    assert {n.lowering for n in result.report.nodes} == {"pyramid"}
    assert {n.encoding for n in result.report.nodes} == {"standard"}
    finest = next(n for n in result.report.nodes if n.output_shape[2:] == [6, 6])
    coarser = [n for n in result.report.nodes if n is not finest]
    assert all("from the 6x6 level" in n.why or "from the 2x2 level" in n.why or "from the 3x3 level" in n.why
               for n in coarser), [n.why for n in coarser]
    _compare(module, x, result.model, "avg")


def test_psp_64_shares_one_matmul():
    """64 -> 3 and 64 -> 6 are leftovers with overlapping windows: one MatMul along W serves every level."""
    module = Pyramid("avg", (1, 2, 3, 6)).eval()
    x = torch.randn(1, 16, 64, 64)
    model = _export(module, x)
    result = onnxpoolfix.patch(model, optimize_exporter_pools=True)
    ops = [n.op_type for n in result.model.graph.node]
    assert _readers(result.model, "x") == ["MatMul"]
    assert ops.count("MatMul") >= 1 and "GlobalAveragePool" not in ops and "AveragePool" not in ops
    shared = [t for t in result.model.graph.initializer if t.name.endswith("pool_matrices_t_indicator")]
    assert len(shared) == 1 and list(shared[0].dims) == [64, 16]  # 1 + 2 + 3 + 6 columns, padded to 16
    _compare(module, x, result.model, "avg")
    # without the flag the two leftovers still share their MatMul; the exporter's two nodes stay
    default = onnxpoolfix.patch(model)
    assert sorted(_readers(default.model, "x")) == ["AveragePool", "GlobalAveragePool", "MatMul"]
    _compare(module, x, default.model, "avg")


def test_max_pyramid_nests_through_the_finer_level():
    module = Pyramid("max", (3, 6)).eval()
    x = torch.randn(2, 4, 64, 64)
    x[0, 0, 5, 7] = float("nan")
    x[1, 2, :30, :30] = float("-inf")
    result = onnxpoolfix.patch(_export(module, x))
    three = next(n for n in result.report.nodes if n.output_shape[2:] == [3, 3])
    assert three.lowering == "pyramid" and "from the 6x6 level" in three.why
    _compare(module, x, result.model, "max")


def test_forced_strategy_plans_each_node_alone():
    module = Pyramid("avg", (3, 6)).eval()
    x = torch.randn(1, 4, 64, 64)
    result = onnxpoolfix.patch(_export(module, x), strategy="matmul")
    assert {n.lowering for n in result.report.nodes} == {"matmul"}
    _compare(module, x, result.model, "avg")


def _two_leftovers(dtype, sizes=((6, 6), (3, 3)), shape=(1, 128, 64, 64)) -> onnx.ModelProto:
    return pyramid_leftovers(dtype, shape, sizes)


def test_half_precision_averages_are_not_grouped():
    """Two stages would round twice in float16: each node keeps its own plan (the check still passes)."""
    result = onnxpoolfix.patch(_two_leftovers(onnx.TensorProto.FLOAT16))
    assert result.report.check_passed
    assert "pyramid" not in {n.lowering for n in result.report.nodes}
    result = onnxpoolfix.patch(_two_leftovers(onnx.TensorProto.FLOAT))
    assert {n.lowering for n in result.report.nodes} == {"pyramid"}


def test_tensorrt_target_pyramid_passes_the_lint():
    module = Pyramid("avg", (1, 2, 3, 6)).eval()
    x = torch.randn(1, 8, 64, 64)
    result = onnxpoolfix.patch(_export(module, x), target="tensorrt", optimize_exporter_pools=True)
    assert "pyramid" in {n.lowering for n in result.report.nodes}
    assert lint_tensorrt(result.model) == []
    _compare(module, x, result.model, "avg")


# ---- exporter pools on their own ----------------------------------------------------------------------

def test_global_average_pool_becomes_reduce_mean_only_when_asked():
    module = nn.AdaptiveAvgPool2d(1).eval()
    x = torch.randn(2, 32, 7, 7)
    model = _export(module, x)
    assert [n.op_type for n in model.graph.node] == ["GlobalAveragePool"]
    assert onnxpoolfix.patch(model).report.status == "nothing-to-patch"
    result = onnxpoolfix.patch(model, optimize_exporter_pools=True)
    assert [n.op_type for n in result.model.graph.node] == ["ReduceMean"]
    node = result.report.nodes[0]
    assert (node.op, node.encoding, node.lowering) == ("GlobalAveragePool", "standard", "global")
    assert_avg_close(ort_run(result.model, {"x": x.numpy()})[0], module(x).numpy(), x.numpy())


def test_global_average_pool_on_dynamic_sizes():
    """The classic dynamic classifier head: GlobalAveragePool over symbolic H/W -> ReduceMean, checked at
    several sizes."""
    module = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1)).eval()
    x = torch.randn(1, 3, 20, 20)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, operator_export_type=FALLTHROUGH, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    result = onnxpoolfix.patch(onnx.load_from_string(f.getvalue()), optimize_exporter_pools=True)
    assert "ReduceMean" in [n.op_type for n in result.model.graph.node]
    assert len(result.report.nodes[0].checked_shapes) >= 2
    for shape in [(1, 3, 9, 31), (2, 3, 40, 17)]:
        xi = torch.randn(*shape)
        assert_avg_close(ort_run(result.model, {"x": xi.numpy()})[0], module(xi).detach().numpy(), xi.numpy(),
                         rel=1e-5)


@pytest.mark.parametrize("pool,n,adopted", [
    (lambda: nn.AvgPool2d(3, stride=2), 7, True),  # 7 -> 3: windows (0,3),(2,5),(4,7) are adaptive ones
    (lambda: nn.AvgPool2d(5, stride=4), 33, True),  # 33 -> 8
    (lambda: nn.AvgPool2d(2), 7, False),  # drops the last row: not adaptive 7 -> 3
    (lambda: nn.AvgPool2d(3, stride=1), 8, False),  # 8 -> 6 stride 1: windows of 3, adaptive 8 -> 6 has 2s
    (lambda: nn.AvgPool2d(2, padding=1), 8, False),  # padded
    (lambda: nn.MaxPool2d(2), 8, False),  # max pools stay: their exact form would add the NaN guard
])
def test_which_exporter_pools_qualify(pool, n, adopted):
    module = nn.Sequential(pool(), nn.Flatten()).eval()
    x = torch.randn(1, 4, n, n)
    model = _export(module, x)
    from onnxpoolfix.frontends.exporter_pools import find_exporter_pools
    from onnxpoolfix.graph.shapes import infer

    found = find_exporter_pools(model, infer(model), opset=17, target="onnxruntime", read=set())
    assert bool(found) == adopted
    result = onnxpoolfix.patch(model, optimize_exporter_pools=True)
    got = ort_run(result.model, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_an_average_pool_already_fastest_is_kept_and_said_so():
    module = nn.AdaptiveAvgPool2d(8).eval()  # 32 -> 8 = AveragePool k4 s4: the planner keeps that
    x = torch.randn(1, 16, 32, 32)
    model = _export(module, x)
    result = onnxpoolfix.patch(model, optimize_exporter_pools=True)
    assert result.report.status == "nothing-to-patch"
    assert [n.data for n in result.report.notes if n.code == "exporter-pools-kept"] == [{"count": 1}]
    assert [n.op_type for n in result.model.graph.node] == ["AveragePool"]


def test_cli_flag_and_json_report(tmp_path):
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    module = Pyramid("avg", (1, 2, 3, 6)).eval()
    src, dst, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(_export(module, torch.randn(1, 8, 60, 60)), src)
    r = CliRunner().invoke(main, [str(src), str(dst), "--optimize-exporter-pools", "--report", str(rep)])
    assert r.exit_code == 0, r.output
    data = json.loads(rep.read_text())
    assert data["totals"]["by_lowering"] == {"pyramid": 4}
    assert {n["encoding"] for n in data["nodes"]} == {"standard"}
    assert "pyramid" in r.output
    r = CliRunner().invoke(main, [str(src), str(tmp_path / "plain.onnx")])
    assert r.exit_code == 0 and "nothing to patch" in r.output


def test_inspect_shows_the_pyramid_and_the_exporter_pools():
    from pathlib import Path

    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    fixture = str(Path(__file__).resolve().parents[2] / "fixtures" / "pyramid_pooling.onnx")
    r = CliRunner().invoke(main, ["inspect", fixture])
    assert r.exit_code == 0, r.output
    assert "2 leftover adaptive pooling nodes\n" in r.output and "exporter pool" not in r.output
    r = CliRunner().invoke(main, ["inspect", fixture, "--optimize-exporter-pools", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert sorted(n["encoding"] for n in data["nodes"]) == ["aten-op", "aten-op", "standard", "standard"]
    assert any("planned together" in note["text"] for note in data["notes"])


def test_export_passes_optimize_exporter_pools(tmp_path):
    module = Pyramid("avg", (1, 2, 3, 6)).eval()
    x = torch.randn(1, 8, 60, 60)
    plain = onnxpoolfix.export(module, (x,), str(tmp_path / "plain.onnx"), dynamo=False, input_names=["x"])
    assert plain.status == "nothing-to-patch"
    fast = onnxpoolfix.export(module, (x,), str(tmp_path / "fast.onnx"), dynamo=False, input_names=["x"],
                              optimize_exporter_pools=True)
    assert {n.lowering for n in fast.nodes} == {"pyramid"} and fast.check_passed
    _compare(module, x, onnx.load(str(tmp_path / "fast.onnx")), "avg")


def test_random_pyramids_match_torch(monkeypatch):
    """40 seeded random groups (1D/2D/3D, avg/max, None sizes, upsampling, NaN for max, opsets 11-18),
    grouping forced wherever the math allows; every output our nodes write is compared with torch (the
    exporter's own MaxPool is not torch's max on NaN, so its outputs are skipped for max)."""
    import random

    monkeypatch.setattr("onnxpoolfix.plan.pyramid.GROUP_GAIN", float("inf"))
    rng = random.Random(7)
    grouped = 0
    for _ in range(40):
        d = rng.choice([1, 2, 2, 3])
        kind = rng.choice(["avg", "max"])
        spatial = [rng.randint(1, 24) for _ in range(d)]
        shape = [rng.randint(1, 2), rng.randint(1, 4)] + spatial
        sizes = []
        for _ in range(rng.randint(2, 4)):
            size = tuple(rng.choice([None, rng.randint(1, 8), n, max(1, n // 2), max(1, n // 3)]) for n in spatial)
            sizes.append(size if any(s is not None for s in size) else (1,) * d)
        module = Pyramid(kind, [s if d > 1 else s[0] for s in sizes], d).eval()
        x = torch.randn(*shape)
        if kind == "max" and rng.random() < 0.3:
            x.view(-1)[rng.randrange(x.numel())] = float("nan")
        model = _export(module, x, opset=rng.choice([11, 13, 17, 18]))
        for optimize in (False, True):
            result = onnxpoolfix.patch(model, optimize_exporter_pools=optimize)
            if result.report.status == "nothing-to-patch":
                continue
            grouped += "pyramid" in {n.lowering for n in result.report.nodes}
            producer = {o: n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node) for o in n.output}
            ours = {n.name for n in result.report.nodes}
            got = ort_run(result.model, {"x": x.numpy()})
            for g, w, out in zip(got, [t.numpy() for t in module(x)], model.graph.output):
                if kind == "avg":
                    assert_avg_close(g, w, x.numpy())
                elif producer.get(out.name) in ours:
                    assert_bits_equal(g, w)
    assert grouped >= 20


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_patching_a_patched_model_again_finds_nothing(target):
    """With the flag, the pooling ops onnxpoolfix wrote are not adopted again (their doc_string marks them):
    patch(patch(m)) == patch(m) for every fixture and a few hundred random leftovers. A leftover's own
    AveragePool (7 -> 1 of AdaptiveAvgPool3d((1, 7, 7)) on 7x13x18, once 'mixed' emitted it) used to be
    replaced by a second run."""
    import random
    from pathlib import Path

    from helpers import make_leftover

    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    models = {f.name: onnx.load(f) for f in sorted(fixtures.glob("*.onnx"))}
    rng = random.Random(0)
    for i in range(150):
        k = rng.choice([1, 2, 3])
        ins = [rng.choice([1, 2, 3, 5, 7, 9, 12, 13, 16, 24, 30, 33]) for _ in range(k)]
        outs = [rng.choice([1, 1, 2, 3, 4, 5, 6, 7, 8, n]) for n in ins]
        kind = rng.choice(["avg", "max"])
        models[f"random {kind} {ins}->{outs}"] = make_leftover(kind, [rng.choice([1, 2]), rng.choice([3, 8, 64])] + ins, outs)
    # 'mixed' emits an AveragePool for its uniform axes that, planned alone, another lowering would edge out
    for shape, outs in [([1, 3, 5, 2, 24], [3, 4, 4]), ([2, 8, 5, 3, 13], [1, 6, 6]), ([1, 64, 1, 9, 24], [3, 1, 6]),
                        ([1, 8, 24, 12, 9], [7, 4, 7]), ([1, 8, 7, 13, 18], [1, 7, 7]), ([1, 8, 9, 13], [1, 7])]:
        models[f"mixed {shape}->{outs}"] = make_leftover("avg", shape, outs)
    patched = 0
    for name, m in models.items():
        try:
            once = onnxpoolfix.patch(m, check=False, optimize_exporter_pools=True, target=target)
        except onnxpoolfix.PoolFixError:
            continue  # refused (e.g. symbolic sizes with an old opset): nothing written to patch again
        patched += bool(once.report.nodes)
        twice = onnxpoolfix.patch(once.model, check=False, optimize_exporter_pools=True, target=target)
        assert not twice.report.nodes, (name, [(n.name, n.lowering, n.why) for n in twice.report.nodes])
        assert all(n.doc_string.startswith("onnxpoolfix: ") for n in once.model.graph.node
                   if n.name.startswith(tuple(r.name for r in once.report.nodes)))
    assert patched > 150


def test_mixed_takes_a_reduce_for_axes_pooled_to_one_where_cheaper():
    from helpers import make_leftover

    from onnxpoolfix.frontends.leftovers import find_pool_nodes
    from onnxpoolfix.graph.shapes import model_opset, resolve_specs
    from onnxpoolfix.lowering import BY_NAME

    m = make_leftover("avg", [1, 8, 7, 13, 18], (1, 7, 7))
    spec = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target="onnxruntime")[0]
    ops = [op for s in BY_NAME["mixed"].steps(spec) for op in s.ops]
    assert "ReduceMean" in ops and "AveragePool" not in ops, ops
    result = onnxpoolfix.patch(m)  # and it is exact
    assert result.report.check_passed and result.report.nodes[0].lowering == "mixed"

"""Round trip against torch: build the module in torch, export it with the TorchScript exporter and
ONNX_FALLTHROUGH (the leftover aten node), patch with onnxpoolfix, run in onnxruntime, compare with torch.

Seeded, randomized cases over {avg, max} x {1D, 2D, 3D}, sizes 1..48 per axis (3D smaller), upsampling,
``None`` output sizes, batch/channel > 1, both encodings (aten-op; ATen-attr in org.pytorch.aten and in the
default domain), max with the indices as a graph output, opsets 11/13/17/18/21 and float32/16/64 + bfloat16.

- Cases whose every pooled axis divides (the exporter would lower them itself) and a share of the others
  are exported with dynamic pooled axes, which keeps the leftover; they are patched with ``input_shapes``.
- ``check=False``: the lowering is tested against torch, not against our own reference. A subset also
  runs the built-in check (``check=True``), and a subset forces EVERY applicable lowering by name.
- Average: relative 1e-6 of max|x| (float32), 1e-13 (float64), 2^-10 (float16), 2^-7 (bfloat16).
  Max: bit for bit, values and indices.

The first ``N_FAST`` of ``N_MIX`` cases run in CI (they reach every lowering, dtype, opset and encoding:
test_case_mix and test_fast_cases_cover_every_lowering say so); ``-m slow`` adds the rest of them and
``N_SLOW`` more.
"""
from __future__ import annotations

import io
import random
import warnings

import numpy as np
import onnx
import pytest
from helpers import (
    ATEN,
    ROUNDTRIP_COUNTS,
    assert_avg_close,
    assert_bits_equal,
    leftover_nodes,
    make_leftover,
    to_aten_attr,
)

from onnxpoolfix import patch
from onnxpoolfix import windows as W
from onnxpoolfix.frontends.leftovers import find_pool_nodes
from onnxpoolfix.graph.shapes import apply_input_shapes, model_opset, resolve_specs
from onnxpoolfix.lowering import BY_NAME
from onnxpoolfix.plan.planner import candidates, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

N_MIX = 520
N_FAST = 300
N_SLOW = 2000
OPSETS = (11, 13, 17, 17, 17, 18, 21)
FORCE_EVERY = 3  # every 3rd case: every applicable lowering, by name
CHECK_EVERY = 7  # every 7th case: also the built-in onnxruntime check

_DT = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16"}


def _axis(rng: random.Random, hi: int, allow_none: bool) -> tuple[int, int | None]:
    """(n, m) for one axis; m None = torch's None (keep the input length)."""
    r = rng.random()
    if r < 0.08 and allow_none:
        n = rng.randint(1, hi)
        return n, None
    if r < 0.16:  # integer upsample
        q = rng.randint(2, 4)
        m = rng.randint(1, hi // q)
        return m, m * q
    if r < 0.26:  # divisible down
        m = rng.randint(1, max(1, hi // 2))
        return m * rng.randint(1, hi // m), m
    if r < 0.31:
        return rng.randint(1, hi), 1
    if r < 0.36:
        n = rng.randint(1, hi)
        return n, n
    if r < 0.48:  # uniform but not divisible (7->3, 5->4, ...)
        for _ in range(50):
            n = rng.randint(3, hi)
            m = rng.randint(2, n - 1)
            if n % m and W.uniform_windows(n, m):
                return n, m
    return rng.randint(1, hi), rng.randint(1, hi)  # anything, including non-integer upsampling


def make_cases(n_cases: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for i in range(n_cases):
        kind = rng.choice(("avg", "max"))
        rank = rng.choice((1, 2, 2, 3))
        hi = {1: 48, 2: 48, 3: 12}[rank]
        axes = [_axis(rng, hi, rank > 1) for _ in range(rank)]  # torch refuses None in 1D
        while all(m == 1 for _, m in axes):  # the exporter always lowers an all-ones size to Global*Pool
            axes[-1] = _axis(rng, hi, rank > 1)
        lead = [rng.randint(1, 3), rng.randint(1, 4)]
        if rank == 3:
            lead = [rng.randint(1, 2), rng.randint(1, 3)]
        d = rng.random()
        dtype = "f32" if d < 0.72 else "f16" if d < 0.84 else "f64" if d < 0.95 else "bf16"
        e = rng.random()
        encoding = "aten-op" if e < 0.7 else "ATen-attr" if e < 0.87 else "ATen-attr-default"
        divisible = all(m is None or n % m == 0 for n, m in axes)
        dynamic = divisible or rng.random() < 0.15
        indices = kind == "max" and rng.random() < 0.4
        data = "randn"
        if kind == "max":
            data = rng.choice(("randn", "randn", "ties", "specials"))
        elif rng.random() < 0.1:
            data = "ties"
        cases.append(dict(i=i, kind=kind, rank=rank, shape=tuple(lead) + tuple(n for n, _ in axes),
                          size=tuple(m for _, m in axes), dtype=dtype,
                          opset=rng.choice([o for o in OPSETS if dtype != "bf16" or o >= 13]),
                          encoding=encoding, dynamic=dynamic, indices=indices, data=data,
                          force=i % FORCE_EVERY == 0, check=i % CHECK_EVERY == 3, seed=seed * 100003 + i))
    return cases


def case_id(c: dict) -> str:
    shape = "x".join(map(str, c["shape"]))
    size = "x".join("N" if m is None else str(m) for m in c["size"])
    flags = ("-dyn" if c["dynamic"] else "") + ("-idx" if c["indices"] else "") + \
            ("" if c["data"] == "randn" else f"-{c['data']}")
    return f"{c['i']}-{c['kind']}{c['rank']}d-{shape}-to-{size}-{c['encoding']}-o{c['opset']}-{c['dtype']}{flags}"


def _input(c: dict) -> "torch.Tensor":
    g = np.random.default_rng(c["seed"])
    x = g.standard_normal(c["shape"])
    if c["data"] == "ties":
        x = np.round(x * 2) / 2 + 0.0  # many equal values per window (no -0.0): first maximum matters
    elif c["data"] == "specials":
        x = np.round(x * 4) / 4
        r = g.random(c["shape"])
        x[r < 0.04] = np.nan
        x[(r >= 0.04) & (r < 0.08)] = -np.inf
        x[(r >= 0.08) & (r < 0.10)] = np.inf
        x[(r >= 0.10) & (r < 0.14)] = -0.0
    return torch.from_numpy(x).to(getattr(torch, _DT[c["dtype"]]))


class _Pool(torch.nn.Module):
    def __init__(self, kind, rank, size, indices):
        super().__init__()
        cls = getattr(torch.nn, f"Adaptive{'Avg' if kind == 'avg' else 'Max'}Pool{rank}d")
        size = size[0] if rank == 1 else size
        self.pool = cls(size, return_indices=True) if kind == "max" else cls(size)
        self.indices = indices
        self.kind = kind

    def forward(self, x):
        if self.kind == "avg":
            return self.pool(x)
        v, i = self.pool(x)
        return (v, i) if self.indices else v


def _export(c: dict, module, x) -> onnx.ModelProto:
    outs = ["y", "y_indices"] if c["indices"] else ["y"]
    dyn = None
    if c["dynamic"]:
        r = len(c["shape"])
        dyn = {"x": {a: f"d{a}" for a in range(r - c["rank"], r)}}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                          opset_version=c["opset"], input_names=["x"], output_names=outs, dynamic_axes=dyn)
    model = onnx.load_from_string(f.getvalue())
    assert model_opset(model) == c["opset"]
    if c["encoding"] == "ATen-attr":
        to_aten_attr(model, ATEN)
    elif c["encoding"] == "ATen-attr-default":
        to_aten_attr(model, "")
    return model


def _feed(x) -> tuple[dict, np.ndarray]:
    import onnxruntime as ort

    if x.dtype == torch.bfloat16:
        bits = x.view(torch.int16).numpy().view(np.uint16)
        return {"x": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)}, \
            x.float().numpy()
    return {"x": ort.OrtValue.ortvalue_from_numpy(x.numpy())}, x.numpy()


def _run(model, x) -> list[np.ndarray]:
    import onnxruntime as ort

    feed, _ = _feed(x)
    if x.dtype == torch.bfloat16:  # numpy has no bfloat16: read the outputs through an exact Cast
        m = onnx.ModelProto()
        m.CopyFrom(model)
        outs = list(m.graph.output)
        del m.graph.output[:]
        for o in outs:
            if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
                m.graph.node.append(onnx.helper.make_node("Cast", [o.name], [o.name + "_f32"], to=1))
                m.graph.output.append(onnx.helper.make_tensor_value_info(o.name + "_f32", 1, None))
            else:
                m.graph.output.append(o)
        model = m
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [r.numpy() for r in sess.run_with_ort_values(None, feed)]


def _compare(c: dict, got: list[np.ndarray], want, x_np: np.ndarray, what: str) -> None:
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, torch has {len(want)}"
    if c["dtype"] == "bf16":
        w0 = want[0].float().numpy()
    else:
        w0 = want[0].numpy()
    if c["kind"] == "avg":
        rel = 2.0 ** -7 if c["dtype"] == "bf16" else None
        xr = x_np if c["dtype"] != "bf16" else x_np.astype(np.float32)
        try:
            assert_avg_close(got[0], w0, xr if rel is None else xr, rel=rel)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None
        return
    v = got[0]
    if "argmax" not in what and np.any((v == 0) & (np.signbit(v) != np.signbit(w0))):
        # onnxruntime's MaxPool keeps the LAST of equal values, torch the first: of 0.0 and -0.0 in one
        # window either may come out. Equal as numbers; only the argmax lowering orders ties as torch.
        ROUNDTRIP_COUNTS["signed_zero_differs"] += 1
        v, w0 = v + v.dtype.type(0), w0 + w0.dtype.type(0)
    try:
        assert_bits_equal(v, w0, "max values")
        if c["indices"]:
            assert_bits_equal(got[1], want[1].numpy(), "max indices")
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


# lowerings planned only for another target (window_sum: portable): forced with that target
# (window_sum is the onnxruntime target's below opset 9 only, which these cases do not reach: its portable run)
OTHER_TARGET = {name: sorted(lw.targets - {"onnxruntime"})[0] for name, lw in BY_NAME.items()
                if lw.targets is not None and lw.targets - {"onnxruntime"}}


def _applicable(model: onnx.ModelProto, input_shapes, target: str = "onnxruntime") -> list[str]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if input_shapes:
        apply_input_shapes(m, input_shapes)
    specs = resolve_specs(m, find_pool_nodes(m.graph), opset=model_opset(m), target=target)
    assert len(specs) == 1
    return [cand.name for cand in candidates(specs[0]) if cand.reason is None]


def run_case(c: dict) -> None:
    x = _input(c)
    module = _Pool(c["kind"], c["rank"], c["size"], c["indices"]).eval()
    with torch.no_grad():
        want = module(x)
        if c["indices"] and x.dtype == torch.bfloat16:
            # torch 2.9's bfloat16 CPU kernel can return an index that is not its window's maximum (a 1 x 22
            # window whose 1.5 is at 17: index 18, holding 1.0; torch 2.13 says 17). Every bfloat16 is a
            # float32 exactly, so the same windows in float32 give torch's first maximum of the same values.
            want = (want[0], module(x.float())[1])
    model = _export(c, module, x)
    assert len(leftover_nodes(model)) == 1, "the exporter lowered the node itself: the case tests nothing"
    shapes = {"x": list(c["shape"])} if c["dynamic"] else None
    _, x_np = _feed(x)

    res = patch(model, check=False, input_shapes=shapes)
    assert not leftover_nodes(res.model)
    assert [n.lowering for n in res.report.nodes] != []
    auto = res.report.nodes[0].lowering
    if c["indices"]:
        assert auto == "argmax"
    _compare(c, _run(res.model, x), want, x_np, f"auto ({auto})")
    ROUNDTRIP_COUNTS["cases"] += 1
    ROUNDTRIP_COUNTS[f"auto:{auto}"] += 1

    if c["check"]:
        checked = patch(model, check=True, input_shapes=shapes, seed=c["seed"])
        assert checked.report.check_passed
        ROUNDTRIP_COUNTS["builtin_check"] += 1

    if c["force"]:
        names = _applicable(model, shapes)
        assert auto in names
        for name in names:
            if name == auto:
                continue
            forced = patch(model, check=False, strategy=name, input_shapes=shapes)
            assert forced.report.nodes[0].lowering == name
            _compare(c, _run(forced.model, x), want, x_np, f"forced {name}")
            ROUNDTRIP_COUNTS[f"forced:{name}"] += 1
        for name, target in OTHER_TARGET.items():
            if name not in _applicable(model, shapes, target):
                continue
            forced = patch(model, check=False, strategy=name, input_shapes=shapes, target=target)
            assert forced.report.nodes[0].lowering == name
            _compare(c, _run(forced.model, x), want, x_np, f"forced {name} ({target})")
            ROUNDTRIP_COUNTS[f"forced:{name}"] += 1


MIX = make_cases(N_MIX, seed=20240613)
# an axis cut into more windows than window_slices takes (64): the portable target's window sums, forced
WIDE = [dict(i=N_MIX + j, kind="avg", rank=len(size), shape=shape, size=size, dtype="f32", opset=17,
             encoding="aten-op", dynamic=False, indices=False, data="randn", force=True, check=False, seed=j)
        for j, (shape, size) in enumerate([((2, 3, 70, 11), (65, 4)), ((1, 2, 60), (66,))])]
FAST = MIX[:N_FAST] + WIDE
SLOW = MIX[N_FAST:] + make_cases(N_SLOW, seed=7)


@pytest.mark.parametrize("c", FAST, ids=case_id)
def test_roundtrip(c):
    run_case(c)
    ROUNDTRIP_COUNTS["fast_cases"] += 1  # (the slow cases count in "cases" too)


@pytest.mark.slow
@pytest.mark.parametrize("c", SLOW, ids=case_id)
def test_roundtrip_extended(c):
    run_case(c)


def test_case_mix():
    """The generated mix covers what the suite promises (and says how many cases it runs)."""
    cs = MIX[:N_FAST]
    assert len(cs) >= 300
    assert {(c["kind"], c["rank"]) for c in cs} == {(k, r) for k in ("avg", "max") for r in (1, 2, 3)}
    assert {c["encoding"] for c in cs} == {"aten-op", "ATen-attr", "ATen-attr-default"}
    assert {c["opset"] for c in cs} == {11, 13, 17, 18, 21}
    assert {c["dtype"] for c in cs} == {"f32", "f16", "f64", "bf16"}
    assert sum(c["indices"] for c in cs) >= 50
    assert any(m is None for c in cs for m in c["size"])
    assert sum(any(m is not None and m > n for n, m in zip(c["shape"][-c["rank"]:], c["size"])) for c in cs) >= 50
    assert sum(c["shape"][0] > 1 for c in cs) >= 100 and sum(c["shape"][1] > 1 for c in cs) >= 100
    assert max(max(c["shape"][2:]) for c in cs) == 48
    print(f"\nround-trip cases: {len(cs)} fast, {len(SLOW)} slow")


_TP = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16, "f64": onnx.TensorProto.DOUBLE,
       "bf16": onnx.TensorProto.BFLOAT16}


def _lowerings_run_by(c: dict) -> set[str]:
    """The lowerings run_case(c) compares with torch: the planner's pick, and with c["force"] every applicable
    one. Read off the leftover torch exports for c (the same node, built directly: no export, no run)."""
    n_in = c["shape"][-c["rank"]:]
    size = tuple(n if m is None else m for n, m in zip(n_in, c["size"]))
    model = make_leftover(c["kind"], c["shape"], size, dtype=_TP[c["dtype"]], opset=c["opset"],
                          indices="output" if c["indices"] else "none")
    (spec,) = resolve_specs(model, find_pool_nodes(model.graph), opset=c["opset"], target="onnxruntime")
    names = {plan(spec).lowering.name}
    if c["force"]:
        names |= {cand.name for cand in candidates(spec) if cand.reason is None}
        for name, target in OTHER_TARGET.items():
            (other,) = resolve_specs(model, find_pool_nodes(model.graph), opset=c["opset"], target=target)
            names |= {cand.name for cand in candidates(other) if cand.reason is None and cand.name == name}
    return names


def test_fast_cases_cover_every_lowering():
    """The whole fast parametrization (whatever -k/-x selects) exercises every static lowering against torch;
    test_zz_counts can only judge a session that ran all of it."""
    covered = set().union(*(_lowerings_run_by(c) for c in FAST))
    missing = {name for name, lw in BY_NAME.items() if not lw.dynamic} - covered  # static shapes here
    assert not missing, f"no fast round-trip case runs these lowerings against torch: {sorted(missing)}"


def test_zz_counts():
    """Runs last in this module: how many cases ran, and that every lowering was exercised against torch."""
    if ROUNDTRIP_COUNTS["cases"] == 0:
        pytest.skip("the round-trip cases were not run in this session")
    print(f"\nround trip: {dict(ROUNDTRIP_COUNTS)}")
    if ROUNDTRIP_COUNTS["fast_cases"] < len(FAST):
        pytest.skip(f"only {ROUNDTRIP_COUNTS['fast_cases']} of the {len(FAST)} fast round-trip cases ran (-k/-x/a failure): "
                    "cannot judge which lowerings ran; test_fast_cases_cover_every_lowering judges the full set")
    exercised = {k.split(":", 1)[1] for k in ROUNDTRIP_COUNTS if ":" in k}
    missing = {name for name, lw in BY_NAME.items() if not lw.dynamic} - exercised  # static shapes here
    assert not missing, f"lowerings never run against torch: {sorted(missing)}"

"""PyTorch's own OpInfo samples for adaptive pooling, run through export -> patch -> onnxruntime -> compare.

Each sample of ``nn.functional.adaptive_{avg,max}_pool{1,2,3}d`` (``op_db``'s ``sample_inputs``) is wrapped
in a module calling the functional op with the sample's arguments, exported with the TorchScript exporter
(ONNX_FALLTHROUGH) either at its shape or with every input dim dynamic, patched with onnxpoolfix's default
options, run in onnxruntime at the sample's shape (and, dynamic, at a second shape), and compared with torch.

:func:`run_sample` returns an outcome: "ok", "refused" (UnsupportedNodeError), "unrunnable" (onnxruntime
cannot load or run the patched model), "wrong", "no_intent" (torch's exporter lowered the pool of an unbatched
input itself and the graph does not say what it should have pooled; see README), "export_fails" (torch's
exporter refuses: no model to patch), "invalid" (the API raised the InvalidModelError the CLI exits 3 with:
torch's own pools of an unbatched input that onnxruntime cannot run), or "skipped" (empty input: no window).
Used by tests/test_opinfo.py; run this file directly for the counts.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from helpers import ort_session

OPS = [f"nn.functional.adaptive_{kind}_pool{k}d" for kind in ("avg", "max") for k in (1, 2, 3)]
AREA = ("nn.functional.interpolate", "area")  # F.interpolate(mode="area"): adaptive average pooling


@dataclass
class Outcome:
    op: str
    dtype: str
    mode: str  # "static" | "dynamic"
    shape: tuple
    args: str
    status: str
    detail: str = ""

    def __str__(self):
        return f"{self.status:10s} {self.op} {self.dtype} {self.mode} {self.shape} {self.args} {self.detail}"


def samples(torch, dtypes=("float32", "float64", "float16")):
    """(op name, dtype name, SampleInput) for every OpInfo sample of the adaptive pooling ops."""
    from torch.testing._internal.common_methods_invocations import op_db

    for op in (o for o in op_db if o.name in OPS or (o.name, o.variant_test_name) == AREA):
        for dt in dtypes:
            for s in op.sample_inputs("cpu", getattr(torch, dt), requires_grad=False):
                yield op, dt, s


def _module(torch, op, sample):
    fn, args, kwargs = op.op, sample.args, sample.kwargs

    class Sample(torch.nn.Module):
        def forward(self, x):
            return fn(x, *args, **kwargs)

    module = Sample().eval()
    module.is_max = "max" in op.name
    return module


def _export(torch, module, x, dynamic: bool) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            outs = module(x)
        names = ["y", "indices"] if isinstance(outs, tuple) else ["y"]
        axes = {"x": {a: f"d{a}" for a in range(x.ndim)}} if dynamic else None
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=17, input_names=["x"], output_names=names,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH, dynamic_axes=axes)
    return onnx.load_from_string(f.getvalue())


def _compare(torch, module, sess, x) -> str | None:
    """None when onnxruntime's outputs equal torch's (max: bit for bit with indices; avg: rounding)."""
    with torch.no_grad():
        want = module(x)
    want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
    got = sess.run(None, {"x": x.numpy()})
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i} shape {g.shape}, torch {w.shape}"
        if g.dtype != w.dtype:
            return f"output {i} dtype {g.dtype}, torch {w.dtype}"
        if np.issubdtype(w.dtype, np.integer) or module.is_max:
            if not np.array_equal(g, w, equal_nan=True):
                return f"output {i} differs at {int((g != w).sum())} positions"
        else:
            rel = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-12}[w.dtype]
            scale = float(np.abs(x.numpy().astype(np.float64)).max()) if x.numel() else 1.0
            err = float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) if w.size else 0.0
            if err > rel * max(scale, 1.0):
                return f"output {i} error {err:.3g}"
    return None


def _other_shape(shape: tuple) -> tuple:
    """A second run shape for dynamic exports: every dim changed (the first +1, the others +3)."""
    return tuple(d + (1 if i == 0 else 3) for i, d in enumerate(shape))


def run_sample(torch, op, dtype: str, sample, mode: str) -> Outcome:
    out, intentless = _run(torch, op, dtype, sample, mode)
    if out.status == "wrong" and intentless:  # a file that runs: valid ONNX over the wrong axes
        out.status, out.detail = "no_intent", f"{intentless}: {out.detail}"
    return out


def _run(torch, op, dtype: str, sample, mode: str) -> tuple[Outcome, str | None]:
    import onnxpoolfix
    from onnxpoolfix.errors import InvalidModelError, UnsupportedNodeError

    x = sample.input
    name = op.name.split(".")[-1] + (f"_{op.variant_test_name}" if op.variant_test_name else "")
    args = repr(sample.args) + (repr({k: v for k, v in sample.kwargs.items() if v is not None})
                                if sample.kwargs else "")
    out = Outcome(name, dtype, mode, tuple(x.shape), args, "ok")
    if x.numel() == 0:
        out.status, out.detail = "skipped", "empty input"
        return out, None
    module = _module(torch, op, sample)
    try:
        exported = _export(torch, module, x, mode == "dynamic")
    except Exception as e:  # noqa: BLE001 - torch's exporter itself refuses
        out.status, out.detail = "export_fails", " ".join(str(e).split())[:150]
        return out, None
    intentless = _intent_not_in_graph(exported, x.ndim, op.name)
    try:
        result = onnxpoolfix.patch(exported)
    except UnsupportedNodeError as e:
        out.status, out.detail = "refused", str(e)[:200]
        return out, intentless
    except InvalidModelError as e:  # what the CLI exits 3 with: an error raised, not a file returned
        out.status, out.detail = "invalid", f"{e} (hint: {e.hint})"[:300]
        return out, intentless
    out.detail = ",".join(n.lowering for n in result.report.nodes) or result.report.check_note
    try:
        sess = ort_session(result.model, log_level=4)
    except Exception as e:  # noqa: BLE001
        out.status, out.detail = "unrunnable", " ".join(str(e).split())[:200]
        return out, intentless
    shapes = [x] + ([torch.randn(*_other_shape(tuple(x.shape))).to(x.dtype)] if mode == "dynamic" else [])
    for xi in shapes:
        try:
            diff = _compare(torch, module, sess, xi)
        except Exception as e:  # noqa: BLE001
            out.status, out.detail = "unrunnable", f"at {tuple(xi.shape)}: " + " ".join(str(e).split())[:200]
            break
        if diff:
            out.status, out.detail = "wrong", f"at {tuple(xi.shape)}: {diff} ({out.detail})"
            break
    return out, intentless


POOL_OPS = ("AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool")


def _intent_not_in_graph(model: onnx.ModelProto, ndim: int, op_name: str) -> str | None:
    """Why torch's exporter left no record of what it should have pooled, or None.

    Only for unbatched inputs (rank = pooling rank + 1) the exporter lowered itself: it took sizes[2:] as
    the spatial sizes, so its pool is over the wrong axes (valid ONNX, wrong result) or, on a (C, L) input,
    an AveragePool with an empty kernel (the output size is in no attribute). The one form whose intent IS
    in the graph, a global pool of a (C, L) input, is not excused: onnxpoolfix repairs it.
    """
    if not op_name.startswith("nn.functional.adaptive_"):
        return None
    k = int(op_name[-2])
    if ndim != k + 1:
        return None
    pools = [n for n in model.graph.node if n.op_type in POOL_OPS]
    if not pools or (ndim == 2 and all(n.op_type.startswith("Global") for n in pools)):
        return None
    return f"unbatched input, exporter wrote {'+'.join(n.op_type for n in pools)}"


def main() -> None:
    from collections import Counter

    import torch

    counts: Counter = Counter()
    for op, dt, s in samples(torch):
        for mode in ("static", "dynamic"):
            o = run_sample(torch, op, dt, s, mode)
            counts[(mode, o.status)] += 1
            if o.status not in ("ok", "skipped"):
                print(o)
    for k, v in sorted(counts.items()):
        print(k, v)


if __name__ == "__main__":
    main()

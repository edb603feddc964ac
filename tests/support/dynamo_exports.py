"""Real dynamo exports with symbolic H/W, and their error against torch at other sizes (the dynamo front-end
tests: the file as exported, then patched, run at sizes it was not traced at)."""
from __future__ import annotations

import numpy as np
import onnx


def export_symbolic_hw(module, hw, *, low: int = 2, high: int = 1024) -> onnx.ModelProto:
    """``module`` (put in eval mode) exported by the dynamo exporter from a seeded ``1x3xHxW`` input at ``hw``,
    H and W symbolic in ``[low, high]``; the exporter's warnings and log lines silenced."""
    import torch
    from export_cache import dynamo_export

    torch.manual_seed(0)
    module.eval()
    dims = {"x": {2: torch.export.Dim("H", min=low, max=high), 3: torch.export.Dim("W", min=low, max=high)}}
    return dynamo_export(module, (torch.randn(1, 3, *hw),), dynamic_shapes=dims, input_names=["x"])


def _pinned() -> str | None:
    import re
    from pathlib import Path

    found = re.search(r"^torch==(\S+)", (Path(__file__).parents[2] / "constraints.txt").read_text(), re.M)
    return found.group(1) if found else None


def pinned_torch(torch) -> bool:
    """The running torch is the project's pinned one (constraints.txt), whose exports the fixtures record."""
    pinned = _pinned()
    return pinned is None or torch.__version__.startswith(pinned)


def older_torch(torch) -> bool:
    """The running torch is 2.9, whose exports of these tests' modules differ (docs/dynamo-files.md). With the skips
    lifted, 2.10.0 and 2.11.0 (review78) and 2.12.1 (20 of 20) gave the pinned torch's outcomes, or failed to
    export (skip_where_another_torch_cannot_export)."""
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 10)


def skip_where_another_torch_cannot_export(torch, error: Exception) -> None:
    """Skip the test where a torch other than the project's pinned one (constraints.txt) cannot export its module
    (torch 2.9 to 2.12 export no adaptive max pooling, nor a 3D average pool); with the pinned torch such an
    error fails the test."""
    import pytest

    names = {c.__name__ for c in type(error).__mro__}
    if not pinned_torch(torch) and names & {"ConversionError", "DispatchError", "TorchExportError"}:
        pytest.skip(f"torch {torch.__version__}'s dynamo exporter cannot export this module: "
                    f"{str(error).strip().splitlines()[0][:160]}")


def errors_vs_torch(module, model: onnx.ModelProto, sizes, *, seed: int, relative: bool = False) -> dict:
    """hw -> max |OUT - torch| over every output on seeded ``1x3xHxW`` inputs (inf where onnxruntime fails or
    a shape differs); ``relative``: each output's over max(1, max |torch|) (float32's rounding of outputs that
    sum a few hundred values)."""
    import onnxruntime as ort
    import torch

    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    out = {}
    for hw in sizes:
        x = rng.standard_normal((1, 3, *hw)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x))
        want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
        try:
            got = sess.run(None, {"x": x})
        except Exception:  # noqa: BLE001 - the unpatched export crashing is one of the outcomes measured
            out[hw] = float("inf")
            continue
        out[hw] = max(float(np.abs(g - w).max()) / (max(1.0, float(np.abs(w).max())) if relative else 1.0)
                      if g.shape == w.shape else float("inf") for g, w in zip(got, want))
    return out


def export_live(module, example, path, dims: dict) -> onnx.ModelProto:
    """``module`` exported now by the dynamo exporter (no cache: the tests/torch_export way) from ``example``
    with input ``x`` and ``dims`` ({axis: Dim}) symbolic, its progress prints silenced; the file as loaded."""
    import contextlib
    import io

    import torch

    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(module, (example,), str(path), dynamo=True, input_names=["x"], dynamic_shapes=(dims,))
    return onnx.load(str(path))


def assert_matches_torch(model: onnx.ModelProto, module, shapes, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """``model`` in onnxruntime equals ``module`` on random inputs ``x`` of each of ``shapes``."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(sess.run(None, {"x": x.numpy()})[0], want, rtol=rtol, atol=atol)


def export_dynamic_hw(module, hw) -> onnx.ModelProto:
    """``module`` (put in eval mode) exported by the dynamo exporter from a seeded ``1x3xHxW`` input at ``hw``, H and
    W ``Dim.DYNAMIC`` (a named Dim lets torch specialize H to 13 for ``x.shape[2] // 8``: the file is then right, at
    its one H)."""
    import torch
    from export_cache import dynamo_export

    torch.manual_seed(0)
    dims = {"x": {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    return dynamo_export(module.eval(), (torch.randn(1, 3, *hw),), dynamic_shapes=dims, input_names=["x"])


def assert_cli_refuses(model: onnx.ModelProto, tmp_path, flag_sets) -> None:
    """``onnxpoolfix IN OUT`` with each of ``flag_sets`` exits 4, writes nothing, and names onnxpoolfix.export."""
    from click.testing import CliRunner

    from onnxpoolfix.cli import main

    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    for flags in flag_sets:
        r = CliRunner().invoke(main, [str(src), str(out), *flags])
        assert r.exit_code == 4 and not out.exists() and "onnxpoolfix.export" in r.stderr, r.output


def seeded(module):
    """``module`` with weights from a seeded generator: one built at collection, after any number of others, gets
    the same weights on every run (the export's key reads them)."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return module


def ranged_model(ranges: str, *dims) -> onnx.ModelProto:
    """A bare model holding torch's range_constraints text ``ranges`` and inputs ``in0``, ``in1``, ... of ``dims``
    (ints static, strings symbolic): what the range readers (frontends/dynamo/ranges.py) see."""
    from onnxpoolfix.frontends.dynamo.ranges import RANGE_KEY

    model = onnx.ModelProto()
    model.metadata_props.add(key=RANGE_KEY, value=ranges)
    for i, shape in enumerate(dims):
        vi = model.graph.input.add()
        vi.name = f"in{i}"
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        for d in shape:
            if isinstance(d, int):
                vi.type.tensor_type.shape.dim.add().dim_value = d
            else:
                vi.type.tensor_type.shape.dim.add().dim_param = d
    return model

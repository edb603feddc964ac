"""onnxpoolfix.export keeps to the dims as the caller declared them (issue 22, items 2 and 3).

* Dim expressions (``2*h`` tying W to H, ``32*h`` for a stride-32 network, sums, a symbol shared between
  inputs): the check and the comparison with torch run only at sizes the declaration allows, and a
  mismatch's hint says what to change, never "export through onnxpoolfix.export" to a caller who did.
* A dim declared dynamic that torch specialised is an error naming it (a warning with
  ``allow_specialized_dims=True``).

Each export is compared with torch here too, at sizes the test picks, in onnxruntime.
"""
from __future__ import annotations

import logging
import re
import types
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxpoolfix

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from dynamo_exports import skip_where_another_torch_cannot_export  # noqa: E402 - after torch is known present

nn = torch.nn
F = torch.nn.functional
pytestmark = pytest.mark.torch


def _ort(path: Path, feed: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)


def _assert_matches(path: Path, module, shapes) -> None:
    names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    for shape in shapes:
        xs = [torch.randn(*s) for s in (shape if isinstance(shape[0], tuple) else (shape,))]
        got = _ort(path, {n: x.numpy() for n, x in zip(names, xs)})
        with torch.no_grad():
            want = module(*xs)
        np.testing.assert_allclose(got[0], want.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"at {shape}")


def _compared(report) -> list[dict[str, tuple[int, ...]]]:
    """The input sizes the comparison with torch ran at, from the report's note."""
    text = report.check_note.split("matched torch at")[1].split("): ", 1)[1]
    return [{name: tuple(map(int, dims.split("x"))) for name, dims in (p.split(":") for p in run.split())}
            for run in text.split("; ")]


class HalvesAdded(nn.Module):
    """Needs W = 2H: the two halves of W are added; the exporter, told W = 2*h, slices at H."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        y = self.conv(x)
        half = y.shape[3] // 2
        return self.pool(y[..., :half] + y[..., half:])


class CropTo32(nn.Module):
    """A stride-32 network's crop to multiples of 32: with 32*h declared, the exporter drops the crop."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x):
        x = x[:, :, : x.shape[2] // 32 * 32, : x.shape[3] // 32 * 32]
        return self.pool(self.conv(x))


class TwoInputs(nn.Module):
    """y's H is x's H + 1 (a sum), and both share the symbol."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, x, y):
        return self.pool(x) + self.pool(y[:, :, 1:])


def test_w_tied_to_h_keeps_w_twice_h(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = HalvesAdded().eval()
    h = torch.export.Dim("h", min=4, max=64)
    out = tmp_path / "tied.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 10, 20),), out, dynamic_shapes={"x": {2: h, 3: 2 * h}})
    runs = _compared(report)
    assert len(runs) >= 4 and all(s["x"][3] == 2 * s["x"][2] for s in runs), runs
    assert len({s["x"] for s in runs}) == len(runs)
    _assert_matches(out, m, [(1, 3, 10, 20), (1, 3, 13, 26), (1, 3, 33, 66), (1, 3, 4, 8)])


def test_stride_32_keeps_multiples_of_32(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = CropTo32().eval()
    h, w = torch.export.Dim("h", min=1, max=16), torch.export.Dim("w", min=1, max=16)
    out = tmp_path / "s32.onnx"
    try:  # torch 2.11's exporter fails on this module inside its own conv (a guard on a data-dependent size)
        report = onnxpoolfix.export(m, (torch.randn(1, 3, 64, 96),), out,
                                    dynamic_shapes={"x": {2: 32 * h, 3: 32 * w}})
    except Exception as e:  # noqa: BLE001 - the helper skips torch's own export failures, re-raised otherwise
        skip_where_another_torch_cannot_export(torch, e)
        raise
    runs = _compared(report)
    assert len(runs) >= 4 and all(d % 32 == 0 for s in runs for d in s["x"][2:]), runs
    _assert_matches(out, m, [(1, 3, 64, 96), (1, 3, 32, 32), (1, 3, 288, 160), (1, 3, 512, 64)])


def test_a_sum_and_a_symbol_shared_between_inputs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = TwoInputs().eval()
    h, w = torch.export.Dim("h", min=4, max=64), torch.export.Dim("w", min=4, max=64)
    out = tmp_path / "two.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 10, 9), torch.randn(1, 3, 11, 9)), out,
                                dynamic_shapes={"x": {2: h, 3: w}, "y": {2: h + 1, 3: w}})
    runs = _compared(report)
    assert len(runs) >= 4 and all(s["y"][2] == s["x"][2] + 1 and s["y"][3] == s["x"][3] for s in runs), runs
    _assert_matches(out, m, [((1, 3, 10, 9), (1, 3, 11, 9)), ((1, 3, 21, 5), (1, 3, 22, 5))])


class SwappedAxes(nn.Module):
    """x: [N, 3, H, W] beside y: [N, 3, W, H], y pooled transposed: the two inputs share H and W on swapped axes."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((4, 5))

    def forward(self, x, y):
        return self.pool(x) + self.pool(y.transpose(2, 3))


_SWAPPED_SIZES = [((1, 3, 10, 13), (1, 3, 13, 10)), ((2, 3, 8, 7), (2, 3, 7, 8)), ((1, 3, 20, 5), (1, 3, 5, 20)),
                  ((3, 3, 1, 1), (3, 3, 1, 1))]


def test_a_symbol_shared_on_swapped_axes_stays_tied(tmp_path: Path) -> None:
    """The check ran x at HxW beside y at HxW (its axes matched by position, not by name): onnxruntime, which
    plans memory on the declared tie, failed, and a right export was refused."""
    torch.manual_seed(0)
    m = SwappedAxes().eval()
    n, h, w = (torch.export.Dim(s, min=1, max=64) for s in ("n", "h", "w"))
    out = tmp_path / "swapped.onnx"
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 10, 13), torch.randn(1, 3, 13, 10)), out,
                                input_names=["x", "y"],
                                dynamic_shapes={"x": {0: n, 2: h, 3: w}, "y": {0: n, 2: w, 3: h}})
    runs = _compared(report)
    assert len(runs) >= 4 and all(s["y"] == (s["x"][0], 3, s["x"][3], s["x"][2]) for s in runs), runs
    _assert_matches(out, m, _SWAPPED_SIZES)


def test_a_torchscript_file_sharing_names_on_swapped_axes_is_patched(tmp_path: Path) -> None:
    """The same through the TorchScript exporter's leftovers (dynamic_axes naming H and W on swapped axes)."""
    torch.manual_seed(0)
    m = SwappedAxes().eval()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    torch.onnx.export(m, (torch.randn(1, 3, 10, 13), torch.randn(1, 3, 13, 10)), str(src), dynamo=False,
                      input_names=["x", "y"], opset_version=17,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH,
                      dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}, "y": {0: "N", 2: "W", 3: "H"}})
    result = onnxpoolfix.patch(onnx.load(str(src)))
    assert result.report.check_passed
    onnx.save(result.model, str(out))
    _assert_matches(out, m, _SWAPPED_SIZES)


def test_a_mismatch_hint_says_what_to_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint of a mismatch with torch points at the declaration (what the caller can change), never
    at onnxpoolfix.export, which is what the caller just ran."""
    from onnxpoolfix.torch_export.sizes import TorchRunner

    real_run = TorchRunner.run

    def off_away_from_the_example(self, tensors, recorder=None):
        got = real_run(self, tensors, recorder)
        if got is None or tuple(tensors[0].shape) == (1, 3, 8, 9):
            return got
        return got[0], [t + 0.01 for t in got[1]], got[2]

    monkeypatch.setattr(TorchRunner, "run", off_away_from_the_example)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d((5, 7))).eval()
    H = torch.export.Dim("H", min=4, max=64)
    with pytest.raises(onnxpoolfix.TorchMismatchError) as info:
        onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), tmp_path / "m.onnx", dynamic_shapes={"input": {2: H}})
    hint = info.value.hint
    assert "onnxpoolfix.export" not in hint and "dynamo=True" not in hint, hint
    assert "dynamic_shapes" in hint and re.search(r"2\*h|32\*h", hint) and "min/max" in hint, hint


class _PinnedH(nn.Module):
    """AdaptiveMaxPool2d((None, 3)) plus a bias of the traced H: the broadcast pins H to the example's 22.
    (The pool alone no longer does: onnxpoolfix.export keeps its SymInt size, issue 23.)"""

    def __init__(self):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 4, 3), nn.AdaptiveMaxPool2d((None, 3))
        self.bias = nn.Parameter(torch.randn(1, 4, 20, 1))

    def forward(self, input):  # (named as nn.Sequential names it: the tests' dynamic_shapes say "input")
        return self.pool(self.conv(input)) + self.bias


def _none_h_pool() -> nn.Module:
    return _PinnedH().eval()


def test_a_dim_declared_dynamic_that_torch_specialised_is_an_error(tmp_path: Path) -> None:
    """A bias of the traced H: torch pins H to the example's 22 (torch.export refuses the spec;
    torch.onnx.export retries with the fix, silently). Named, with torch's reason; nothing written."""
    torch.manual_seed(0)
    out = tmp_path / "m.onnx"
    H, W = torch.export.Dim("H", min=4, max=64), torch.export.Dim("W", min=4, max=64)
    with pytest.raises(onnxpoolfix.ShapeError) as info:
        onnxpoolfix.export(_none_h_pool(), (torch.randn(1, 3, 22, 20),), out, dynamic_shapes={"input": {2: H, 3: W}})
    message = str(info.value)
    assert "dim 2 of input 'input'" in message and "(H)" in message and "specialised it to 22" in message, message
    assert "torch: You marked H as dynamic" in message, message
    assert "allow_specialized_dims=True" in info.value.hint
    assert not out.exists() and not list(tmp_path.iterdir())


def test_allowed_specialisation_is_a_warning_and_exact_at_the_pinned_size(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    m = _none_h_pool()
    H, W = torch.export.Dim("H", min=4, max=64), torch.export.Dim("W", min=4, max=64)
    out = tmp_path / "m.onnx"
    with caplog.at_level(logging.WARNING, logger="onnxpoolfix"):
        report = onnxpoolfix.export(m, (torch.randn(1, 3, 22, 20),), out, dynamic_shapes={"input": {2: H, 3: W}},
                                    allow_specialized_dims=True)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("dim 2 of input 'input'" in w and "specialised it to 22" in w for w in warned), warned
    assert "specialised it to 22" in report.check_note
    dims = [d.dim_param or d.dim_value for d in onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim]
    assert dims[:3] == [1, 3, 22] and isinstance(dims[3], str), dims
    _assert_matches(out, m, [(1, 3, 22, 20), (1, 3, 22, 7), (1, 3, 22, 41)])


def test_dims_that_stay_dynamic_are_not_flagged(tmp_path: Path) -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((5, 7))).eval()
    H, W = torch.export.Dim("H", min=4, max=64), torch.export.Dim("W", min=4, max=64)
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 12, 11),), tmp_path / "m.onnx",
                                dynamic_shapes={"input": {0: torch.export.Dim.DYNAMIC, 2: H, 3: W}})
    assert "specialised" not in report.check_note and report.nodes[0].lowering == "dynamic"


class _BranchOnH(nn.Module):
    """A branch on H: torch.export guards H < 64 and narrows the declared range to it (torch.onnx.export retries
    with the narrower range, silently): its file computes the h < 64 branch at every size."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((5, 7))

    def forward(self, input):
        y = self.pool(input)
        if input.shape[2] < 64:
            return y * 2
        return y


def test_a_range_torch_narrowed_where_the_module_runs_is_an_error(tmp_path: Path) -> None:
    """The file would be wrong at H = 100, where torch runs: named with both ranges, nothing written."""
    m, out = _BranchOnH().eval(), tmp_path / "m.onnx"
    H, W = torch.export.Dim("H", min=2, max=4096), torch.export.Dim("W", min=2, max=4096)
    with pytest.raises(onnxpoolfix.ShapeError) as info:
        onnxpoolfix.export(m, (torch.randn(1, 3, 40, 45),), out, dynamic_shapes={"input": {2: H, 3: W}})
    message = str(info.value)
    assert "dim 2 of input 'input'" in message and "[2, 4096]" in message and "narrowed it to [2, 63]" in message
    assert "allow_specialized_dims=True" in info.value.hint and "min=" in info.value.hint
    assert not out.exists()
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 40, 45),), out, dynamic_shapes={"input": {2: H, 3: W}},
                                allow_specialized_dims=True)
    assert "narrowed it to [2, 63]" in report.check_note
    _assert_matches(out, m, [(1, 3, 40, 45), (1, 3, 63, 20)])


def test_a_range_narrowed_to_where_torch_runs_is_no_error(tmp_path: Path) -> None:
    """A 5x5 convolution: torch narrows H and W from 2 to 5, below which torch itself fails: nothing lost."""
    m = nn.Sequential(nn.Conv2d(3, 4, 5), nn.AdaptiveAvgPool2d((5, 7))).eval()
    H, W = torch.export.Dim("H", min=2, max=4096), torch.export.Dim("W", min=2, max=4096)
    report = onnxpoolfix.export(m, (torch.randn(1, 3, 40, 45),), tmp_path / "m.onnx",
                                dynamic_shapes={"input": {2: H, 3: W}})
    assert "narrowed" not in report.check_note and report.nodes[0].lowering == "dynamic"


class _OtherBranchFailsAtOddH(nn.Module):
    """torch narrows H to [2, 64]; past it the module runs only at even H (found by a review: trying torch one
    past the moved end alone, at 65, where it fails, took the narrowing for what the module can take, and the
    file computed the H <= 64 branch at 66 and 90)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((3, 5))

    def forward(self, x):
        if x.shape[2] <= 64:
            return self.pool(x)
        b, c, h, w = x.shape
        return self.pool(x.reshape(b, c, h // 2, 2, w).mean(3)) * 2.0


def test_a_narrowed_range_is_tried_past_one_size_beyond_it(tmp_path: Path) -> None:
    from onnxpoolfix.torch_export.outside import outside_sizes
    from onnxpoolfix.torch_export.specialised import Specialised

    m, out = _OtherBranchFailsAtOddH().eval(), tmp_path / "m.onnx"
    assert m(torch.randn(1, 2, 66, 17)).shape == (1, 2, 3, 5)  # the premise: torch runs past 65
    H, W = torch.export.Dim("H", min=2, max=512), torch.export.Dim("W", min=2, max=512)
    with pytest.raises(onnxpoolfix.ShapeError, match=r"narrowed it to \[2, 64\]"):
        onnxpoolfix.export(m, (torch.randn(1, 2, 20, 17),), out, dynamic_shapes={"x": {2: H, 3: W}})
    assert not out.exists()
    tried = outside_sizes(Specialised("x", 2, "H", None, ranges=((2, 512), (2, 64))))
    assert tried[:4] == [65, 66, 67, 68] and 512 in tried and all(64 < v <= 512 for v in tried)
    assert outside_sizes(Specialised("x", 2, "H", None, ranges=((2, None), (9, None)))) == [8, 7, 6, 5, 2]


@pytest.mark.parametrize("dim", ["DYNAMIC", "AUTO"])
def test_a_dim_declared_unbounded_that_torch_narrowed_is_an_error(tmp_path: Path, dim: str) -> None:
    """Dim.DYNAMIC and Dim.AUTO declare every size: a narrowing torch makes of them without a word (found by a
    review: not looked at, the file computed the H < 64 branch at 65 and 90)."""
    m, out = _BranchOnH().eval(), tmp_path / "m.onnx"
    d = getattr(torch.export.Dim, dim)
    with pytest.raises(onnxpoolfix.ShapeError, match=rf"\(Dim.{dim}\) but torch narrowed it to \[0, 63\]"):
        onnxpoolfix.export(m, (torch.randn(1, 3, 40, 45),), out, dynamic_shapes={"input": {2: d, 3: d}})
    assert not out.exists()


class _BranchOnHOfOne(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((3, 5))

    def forward(self, x):
        if x.shape[2] == 1:
            return self.pool(x) * 3.0
        return self.pool(x)


def test_a_dim_declared_from_one_is_compared_with_torch_at_one(tmp_path: Path) -> None:
    """torch traces a dynamic H as other than 1 (the branch on H == 1 decided at the example), the file takes
    H = 1 as declared: the comparison with torch runs there too (found by a review: the file was 0.67 off at
    1x21, exported with no error)."""
    m, out = _BranchOnHOfOne().eval(), tmp_path / "m.onnx"
    H, W = torch.export.Dim("H", min=1, max=512), torch.export.Dim("W", min=1, max=512)
    with pytest.raises(onnxpoolfix.TorchMismatchError, match=r"at x:1x2x1x17"):
        onnxpoolfix.export(m, (torch.randn(1, 2, 20, 17),), out, dynamic_shapes=({2: H, 3: W},))
    assert not out.exists()
    m2 = nn.AdaptiveAvgPool2d((3, 5)).eval()  # no branch on 1: exact there, and compared there
    report = onnxpoolfix.export(m2, (torch.randn(1, 2, 20, 17),), out, dynamic_shapes=({2: H, 3: W},))
    assert "1x17" in report.check_note or "x:1x2x1" in report.check_note, report.check_note
    _assert_matches(out, m2, [(1, 2, 1, 17), (1, 2, 20, 1), (1, 2, 1, 1)])


def test_an_export_hint_names_what_export_takes(tmp_path: Path) -> None:
    """Symbolic pooled axes at opset 9 (the TorchScript path keeps it): export takes no input_shapes=;
    the hint says to export those dims static, or at a newer opset."""
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((5, 7))).eval()
    with pytest.raises(onnxpoolfix.UnsupportedNodeError) as info:
        onnxpoolfix.export(m, (torch.randn(1, 3, 8, 9),), tmp_path / "m.onnx", dynamo=False, opset_version=9,
                           input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    hint = info.value.hint
    assert "input_shapes" not in hint and "--input-shape" not in hint, hint
    assert "dynamic_axes" in hint and "opset_version=11" in hint, hint


class _MadeEven(nn.Module):
    """``W // 2 * 2`` traced at an even W: torch 2.9's exporter holds W as ``2*s`` (even sizes only) and drops
    the runtime assert, so its file has no crop and accepts odd W, where the module crops."""

    def forward(self, x):
        return F.adaptive_avg_pool2d(x[:, :, :, : x.shape[3] // 2 * 2], (3, 5))


class _PairsAlongW(nn.Module):
    """Runs at even W only (a reshape into pairs)."""

    def forward(self, x):
        b, c, h, w = x.shape
        return F.adaptive_avg_pool2d(x.reshape(b, c, h, w // 2, 2).mean(-1), (3, 5))


def test_an_export_is_exact_at_odd_widths_or_refused(tmp_path: Path) -> None:
    """Whatever the running torch makes of ``W // 2 * 2`` (2.13 and 2.14 keep W free; 2.9 holds it as 2*s and
    its file computes no crop: exit 0 and 0.24 off at 9x7 before), the export is exact at odd widths or refused
    naming the form."""
    m, out = _MadeEven().eval(), tmp_path / "m.onnx"
    dims = {"x": {2: torch.export.Dim("H", min=2, max=1024), 3: torch.export.Dim("W", min=2, max=1024)}}
    try:
        onnxpoolfix.export(m, (torch.randn(1, 3, 17, 12),), out, dynamic_shapes=dims)
    except onnxpoolfix.TorchMismatchError as e:  # 2.9: compared with torch at odd widths, where it crops
        assert re.search(r"at x:1x3x\d+x\d*[13579]:", str(e)) and not out.exists()
        return
    _assert_matches(out, m, [(1, 3, 17, 12), (1, 3, 9, 7), (1, 3, 40, 31), (1, 3, 20, 13)])


@pytest.mark.parametrize("module,compared", [(_MadeEven, True), (_PairsAlongW, False)])
def test_a_plain_dim_torch_holds_as_2s_is_compared_off_the_form_or_refused(module, compared) -> None:
    """The program is made here with W declared ``2 * Dim`` (what torch 2.9 does on its own with a plain Dim), the
    caller's declaration a plain Dim: found as a form. Where torch runs at odd widths the file is compared with
    it there (the dim a symbol of its own: review17, torch 2.9's squeezenet holds 8*s and is exact at every size);
    where it runs at none of those tried, refused (review16: a module running only at W % 7 == 0 as well)."""
    from onnxpoolfix.torch_export.declared import declared_dims, specialised_dims
    from onnxpoolfix.torch_export.outside import compare_forms_instead, runs_outside

    m, x = module().eval(), torch.randn(1, 3, 17, 12)
    H = torch.export.Dim("H", min=2, max=1024)
    ep = torch.export.export(m, (x,), dynamic_shapes={"x": {2: H, 3: 2 * torch.export.Dim("_W", max=512)}})
    program = types.SimpleNamespace(exported_program=ep)  # as torch.onnx.export's ONNXProgram holds it
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [onnx.helper.make_tensor_value_info(
        "x", onnx.TensorProto.FLOAT, [1, 3, "H", "W"])], []))
    caller = {"dynamic_shapes": {"x": {2: H, 3: torch.export.Dim("W", min=2, max=1024)}}}
    found = specialised_dims(torch, m, (x,), {}, program, model, caller)
    assert [(f.axis, f.form.startswith("2*")) for f in found] == [(3, True)]
    declared = declared_dims(torch, program)
    rest, apart, outside = compare_forms_instead(torch, m, (x,), {}, model.graph.input, declared, found)
    if compared:
        assert rest == [] and outside[found[0].symbol] and all(v % 2 for v in outside[found[0].symbol])
        assert apart.size((0, 3), {found[0].symbol: 13}) == 13  # W apart from 2*s: the comparison feeds 13
    else:
        assert rest == found and outside == {} and apart is declared
        assert runs_outside(torch, m, (x,), {}, model.graph.input, declared, found[0])  # so refused


def test_a_form_on_the_probe_of_a_torchscript_export_is_compared_at_other_sizes_not_refused() -> None:
    """A TorchScript file's dims are the tracer's (``W // 2 * 2`` is a Shape/Div/Mul there): a ``2*s`` that
    torch.export's probe holds is no refusal; the file is compared with torch at odd widths instead."""
    from onnxpoolfix.torch_export.outside import compared_instead
    from onnxpoolfix.torch_export.specialised import Specialised

    inputs = [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "H", "W"])]
    form = Specialised("x", 3, "'W'", None, ranges=((0, None), (12, 12)), form="2*s24", symbol="x[3]")
    rest, outside = compared_instead([form], inputs)
    assert rest == [] and outside["W"] and all(v % 2 == 1 for v in outside["W"])
    rest, outside = compared_instead([form], inputs, verify=False)
    assert rest == [form] and outside == {}


def test_one_dim_shared_by_two_inputs_is_taken_off_its_form_in_both() -> None:
    """review16 F4: x and y declared with one Dim W that torch holds as 2*s24. Given a symbol of its own in x alone,
    ``x + y`` failed at every odd size and the form passed; both move together."""
    import sympy

    from onnxpoolfix.torch_export.declared import DeclaredDims, apart_form

    s, h = sympy.Symbol("s24"), sympy.Symbol("s53")
    declared = DeclaredDims(exprs={(0, 2): h, (0, 3): 2 * s, (1, 2): h, (1, 3): 2 * s}, example={"s24": 6, "s53": 13},
                            ranges={"s24": (1, 512), "s53": (2, 1024)})
    apart = apart_form(declared, "2*s24", "x[3]", (2, 1024))
    assert [apart.size(k, {"x[3]": 13}) for k in ((0, 3), (1, 3))] == [13, 13]
    assert apart.example["x[3]"] == 12 and apart.ranges["x[3]"] == (2, 1024) and declared.size((0, 3), {}) == 12

"""An adaptive pool whose output size is computed from the input inside a helper (a function, a method of the
module that is no submodule, a lambda), exported by the dynamo exporter with symbolic H/W at a size where that
size is 1 (review45): torch writes a global ReduceMean/ReduceMax whose stack trace keeps only the caller's line
(``return pool_w(x)``), which shows no adaptive call. It was "nothing to patch", exit 0, with OUT pooling to 1 at
every size (a decomposed region whose size 1 torch fixed on a symbolic axis, ``(t.shape[2] // 8, 5)`` at 13, was
replaced as a pool to 1); now refused (exit 4, the export as the remedy), as a frozen AveragePool on such a line is,
also where the helper is handed the module's own size (it may compute any size from it). Means the line shows
(``x.mean((2, 3), keepdim=True)``, a pooling module's) or a classifier after them fixes (timm's
``adaptive_catavgmax_pool2d(x, self.output_size)`` before a Linear) stay as written, exact."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional

import onnx
from dynamo_exports import assert_cli_refuses, errors_vs_torch, export_dynamic_hw, seeded

from onnxpoolfix.cli import main


def pool_w(t):
    return F.adaptive_avg_pool2d(t, (1, t.shape[3] // 4))


def down(t, f):
    return F.interpolate(t, scale_factor=f, mode="area")


class HelperFn(nn.Module):
    def forward(self, x):
        return pool_w(x)


class HelperMethod(nn.Module):
    def _pool(self, t):
        return F.adaptive_max_pool2d(t, (1, t.shape[3] // 4))

    def forward(self, x):
        return self._pool(x)


def pool_h(t):
    return F.adaptive_avg_pool2d(t, (t.shape[2] // 8, 5))


class HelperRows(nn.Module):
    """A decomposed region, not a global reduce: torch declares its H output static 1 (H // 8 at 13)."""

    def forward(self, x):
        return pool_h(x)


class HelperArea(nn.Module):
    def forward(self, x):
        return down(x, 0.25)


def avgmax(t, output_size):  # timm's adaptive_avgmax_pool2d
    return 0.5 * (F.adaptive_avg_pool2d(t, output_size) + F.adaptive_max_pool2d(t, output_size))


class HandedItsSize(nn.Module):
    """timm's AdaptiveAvgMaxPool2d: the helper is handed the module's own size."""

    def __init__(self):
        super().__init__()
        self.output_size = 1

    def forward(self, x):
        return avgmax(x, self.output_size)


def catavgmax(t, output_size):  # timm's adaptive_catavgmax_pool2d
    return torch.cat((F.adaptive_avg_pool2d(t, output_size), F.adaptive_max_pool2d(t, output_size)), 1)


class CatAvgMaxHead(nn.Module):
    """timm's SelectAdaptivePool2d(pool_type='catavgmax', flatten=True) and a classifier."""

    def __init__(self):
        super().__init__()
        self.output_size = 1
        self.flatten = nn.Flatten(1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        x = catavgmax(x, self.output_size)
        return self.fc(self.flatten(x))


class SeenMeans(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return x * torch.sigmoid(x.mean((2, 3), keepdim=True)) + self.pool(x)


SIZES = [(16, 23), (33, 41), (20, 13), (9, 100)]


@pytest.mark.parametrize("module,traced", [(HelperFn(), (16, 7)), (HelperMethod(), (16, 7)), (HelperArea(), (6, 7)),
                                           (HelperRows(), (13, 23)), (HandedItsSize(), (13, 9))],
                         ids=["function", "method", "area", "rows", "handed"])
def test_a_global_reduce_on_a_line_that_hides_the_pool_is_refused(module, traced, tmp_path):
    model = export_dynamic_hw(module, traced)
    if not isinstance(module, HandedItsSize):  # (its helper pools to 1 at every size, which the file cannot show)
        assert max(errors_vs_torch(module, model, SIZES, seed=0).values()) > 1e-3  # the file as exported
    assert_cli_refuses(model, tmp_path, ([], ["--traced-shape", f"x:1,3,{traced[0]},{traced[1]}"]))


@pytest.mark.parametrize("module", [SeenMeans(), seeded(CatAvgMaxHead())], ids=["seen", "timm_head"])
def test_means_the_line_shows_or_a_classifier_fixes_stay_as_written(module, tmp_path):
    model = export_dynamic_hw(module, (13, 9))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,13,9"])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), [(13, 9), *SIZES], seed=1)
    assert max(errors.values()) < 1e-5, errors


class AvgMaxHead(nn.Module):
    """timm's SelectAdaptivePool2d(pool_type='avgmax', flatten=True) and a classifier (resnet18(global_pool='avgmax'))."""

    def __init__(self):
        super().__init__()
        self.output_size = 1
        self.flatten = nn.Flatten(1)
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(self.flatten(avgmax(x, self.output_size)))


class PerPositionView(nn.Module):
    """A hidden pool's result viewed per position, ``view(-1, C)``: torch writes the same Reshape to [-1, C] as an
    nn.Flatten's under a symbolic batch, and here the rows follow the input (2 per sample at W = 8)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(pool_w(x).view(-1, 3))


def _export_dynamic_batch(module, hw):
    from export_cache import dynamo_export

    torch.manual_seed(0)
    dims = {"x": {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    return dynamo_export(module.eval(), (torch.randn(2, 3, *hw),), dynamic_shapes=dims, input_names=["x"])


@pytest.mark.parametrize("module", [seeded(AvgMaxHead()), seeded(CatAvgMaxHead())], ids=["avgmax", "catavgmax"])
def test_a_timm_head_under_a_symbolic_batch_stays_as_written(module, tmp_path):
    """review62: with the batch symbolic too, torch writes nn.Flatten(1) as a Reshape to [-1, C], which was not read
    as a flatten that keeps the batch: the head was refused (exit 4), though torch's file is exact at every size."""
    model = _export_dynamic_batch(module, (13, 9))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:2,3,13,9"])
    assert r.exit_code == 0, r.output
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch, hw in [(2, (13, 9)), (1, (16, 23)), (3, (33, 41)), (3, (20, 13)), (1, (9, 100))]:
        x = rng.standard_normal((batch, 3, *hw)).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-5, (batch, hw)


def test_a_per_position_view_of_a_hidden_pool_stays_refused(tmp_path):
    module = PerPositionView()
    model = _export_dynamic_batch(module, (16, 7))
    assert_cli_refuses(model, tmp_path, ([], ["--traced-shape", "x:2,3,16,7"]))

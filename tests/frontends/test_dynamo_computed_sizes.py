"""A pool whose source line computes its output size from the input (`(1, x.shape[3] // 4)`, an area resize by
scale_factor), exported by the dynamo exporter with symbolic H/W at a size where that size is 1 (review44 F1,
F2): torch writes a global ReduceMean/ReduceMax, or a region whose result it declares static, both right only
where the size is 1 again. Exit 0 ("nothing to patch", or a pool to 1 written by onnxpoolfix) was wrong at other
sizes; now refused (exit 4, the export as the remedy). The same lines traced where the size is above 1, and
sizes that are fixed (a literal 1, the module's own), stay patched or as written, exact against torch."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional

import onnx
from dynamo_exports import assert_cli_refuses, errors_vs_torch, export_dynamic_hw, export_symbolic_hw

from onnxpoolfix.cli import main


class Steps(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (1, x.shape[3] // 4)).squeeze(2)


class MaxSteps(nn.Module):
    def forward(self, x):
        return F.adaptive_max_pool2d(x, (1, x.shape[3] // 4))


class StepIndices(nn.Module):
    """The indices alone: torch writes an ArgMax of a view, no ReduceMax (review46 F1)."""

    def forward(self, x):
        return F.adaptive_max_pool2d(x, (1, x.shape[3] // 4), return_indices=True)[1]


class GlobalIndices(nn.Module):
    """The indices alone of a literal 1 and of the module's own 1: right at every size as written."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(1, return_indices=True)

    def forward(self, x):
        return F.adaptive_max_pool2d(x, 1, return_indices=True)[1] + self.pool(x)[1]


class Quarter(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=0.25, mode="area")


class Rows(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x.shape[2] // 8, 5))


class Global(nn.Module):
    """Sizes fixed whatever the input: a literal 1, and the module's own."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return F.adaptive_max_pool2d(x, 1) + self.pool(x)


class NoneRowsModule(nn.Module):
    """A map a quarter as high (one row at H = 7), then a pool whose first axis is torch's None."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, x):
        f = F.avg_pool2d(x, (4, 1))
        return self.pool(f)


class NoneRowsIndices(nn.Module):
    """The indices alone of a (None, 1) module's max pool of a map one row high where traced: an ArgMax (review46 F1)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d((None, 1), return_indices=True)

    def forward(self, x):
        f = F.avg_pool2d(x, (4, 1))
        return self.pool(f)[1]


class NoneOneWritten(nn.Module):
    def forward(self, x):
        f = F.avg_pool2d(x, (4, 1))
        return F.adaptive_avg_pool2d(f, (None, 1))


SIZES = [(16, 23), (33, 41), (20, 13), (9, 100)]


@pytest.mark.parametrize("module,traced", [(Steps(), (16, 7)), (MaxSteps(), (16, 7)), (StepIndices(), (16, 7)),
                                           (Quarter(), (6, 7)), (Rows(), (13, 23))],
                         ids=["steps", "max_steps", "step_indices", "quarter", "rows"])
def test_a_computed_size_of_1_at_the_traced_size_is_refused(module, traced, tmp_path):
    model = export_dynamic_hw(module, traced)
    assert max(errors_vs_torch(module, model, SIZES, seed=0).values()) > 1e-3  # the file as exported
    assert_cli_refuses(model, tmp_path, ([], ["--traced-shape", f"x:1,3,{traced[0]},{traced[1]}"]))


@pytest.mark.parametrize("module,traced", [(Steps(), (37, 23)), (Global(), (13, 9)), (GlobalIndices(), (13, 9))],
                         ids=["steps", "global", "global_indices"])
def test_the_same_lines_where_the_size_is_read_stay_exact(module, traced, tmp_path):
    model = export_symbolic_hw(module, traced)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", f"x:1,3,{traced[0]},{traced[1]}"])
    assert r.exit_code == 0, r.output
    errors = errors_vs_torch(module, onnx.load(out), [traced, *SIZES], seed=1)
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("module,without", [(NoneRowsModule(nn.AdaptiveAvgPool2d((None, 5))), True),
                                            (NoneRowsModule(nn.AdaptiveAvgPool2d((None, 1))), False),
                                            (NoneRowsIndices(), False), (NoneOneWritten(), True)],
                         ids=["module_none_5", "module_none_1", "module_none_1_indices", "line"])
def test_torchs_none_on_an_axis_1_long_where_traced_is_refused(module, without, tmp_path):
    """review44 F2b, F3: (None, 5) and (None, 1) of a map one row high at the traced size (7x23): torch wrote a region
    proven only where that axis is 1 long (replaced as a pool to 1, exit 0), or a global ReduceMean ("nothing to
    patch"), both one row at every height. Refused: with the traced size, which says the axis was 1 long (an
    adaptive module's size is nowhere in the file), and without it where the region or the line says so."""
    model = export_dynamic_hw(module, (7, 23))
    assert max(errors_vs_torch(module, model, SIZES, seed=0).values()) > 1e-3  # the file as exported
    assert_cli_refuses(model, tmp_path, ([], ["--traced-shape", "x:1,3,7,23"]) if without else
                       (["--traced-shape", "x:1,3,7,23"],))


class Doubled(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (x.shape[2] * 2, 5))


def test_a_computed_upsampling_refusal_says_what_it_lacks(tmp_path):
    """review45: `(x.shape[2] * 2, 5)` traced at 13x29 is right only where W's unroll holds its windows; the refusal
    said "without metadata one size is not enough" of a file with its metadata, proven at dozens of sizes."""
    model = export_dynamic_hw(Doubled(), (13, 29))
    assert max(errors_vs_torch(Doubled(), model, SIZES, seed=0).values()) > 1e-3  # the file as exported
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, [str(src), str(out), "--traced-shape", "x:1,3,13,29"])
    assert r.exit_code == 4 and not out.exists(), r.output
    assert "without metadata" not in r.stderr and "must be right at every size" in r.stderr, r.stderr

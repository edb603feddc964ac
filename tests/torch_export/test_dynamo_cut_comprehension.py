"""A comprehension whose first line ends inside its iterable (review88). The exporter keeps the first line of a
call's frame only, ``outs = [F.adaptive_avg_pool2d(x, s) for s in (``; completed to parse (``(`` closed as ``()``,
a bare ``for s in`` given ``None``), the made-up iterable read as literals, so ``s`` was a size fixed when the
module was built: with ``--traced-shape`` each frozen AveragePool was read as its traced output size, exit 0, and
OUT pooled to that size at every input while the next line computes it from the input (torch 2.13 and 2.14.1:
(1, 102) at every size, torch (1, 15) at 7x9). Such a comprehension is refused (its sizes are on the next line), or
OUT equals torch at other sizes."""
from __future__ import annotations

from pathlib import Path

import pytest
from dynamo_exports import assert_matches_torch, export_live

import onnxpoolfix
from onnxpoolfix.errors import UnsupportedNodeError

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.torch


class OpenParen(nn.Module):  # both pools frozen at 15x45 (5 and 3 divide 15 and 45)
    def forward(self, x):
        outs = [F.adaptive_avg_pool2d(x, s) for s in (
            x.shape[2] // 3, x.shape[2] // 5)]
        return torch.cat([o.flatten(1) for o in outs], 1)


class OpenBracket(nn.Module):  # frozen at 15x21: (5, 7)
    def forward(self, x):
        outs = [F.adaptive_avg_pool2d(x, (s, 7)) for s in [
            x.shape[2] // 3]]
        return outs[0]


class BareIn(nn.Module):  # ``for s in`` ends the line (inside the call's brackets, so no backslash)
    def forward(self, x):
        return torch.cat([F.adaptive_avg_pool2d(x, s).flatten(1) for s in
                          (x.shape[2] // 3, x.shape[2] // 5)], 1)


class BranchBesideOpenComprehension(nn.Module):
    """review88 F2: two frozen pools on line 1 (Python 3.11 gives the comprehension's pool the line it opens on)
    and two calls shown, one of which does not run: the count passed, and with the traced size the hidden pool
    (H // 3) was read as the shown 5-call (exit 0, OUT (1, 150) at every size, torch (1, 87) at 7x9)."""

    def __init__(self):
        super().__init__()
        self.flag = True

    def forward(self, x):
        outs = [F.adaptive_avg_pool2d(x, 5) if self.flag else F.adaptive_avg_pool2d(x, 7)] + [
            F.adaptive_avg_pool2d(x * 2, s) for s in (x.shape[2] // 3,)]
        return torch.cat([o.flatten(1) for o in outs], 1)


OTHER = [(7, 9), (23, 17), (30, 41), (9, 26), (12, 12), (45, 63)]


@pytest.mark.parametrize("module, hw", [(OpenParen, (15, 45)), (OpenBracket, (15, 21)), (BareIn, (15, 45)),
                                         (BranchBesideOpenComprehension, (15, 45))])
def test_cut_comprehension_is_refused_or_exact(tmp_path: Path, module, hw):
    m = module().eval()
    dims = {2: torch.export.Dim("H", min=2, max=256), 3: torch.export.Dim("W", min=2, max=256)}
    model = export_live(m, torch.randn(1, 3, *hw), tmp_path / "in.onnx", dims)
    assert any(n.op_type == "AveragePool" for n in model.graph.node)  # the premise: frozen at the traced size
    for traced in (None, {"x": [1, 3, *hw]}):
        try:
            out = onnxpoolfix.patch(model, traced_shapes=traced).model
        except UnsupportedNodeError:
            continue
        assert_matches_torch(out, m, [(1, 3, *s) for s in [hw, *OTHER]], rtol=1e-5, atol=1e-5)

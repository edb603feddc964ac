"""The recorded dynamo exports (tests/support/export_cache.py) are read only where the export would be the same:
the key must change with anything the exporter reads, and stay where nothing changed."""
from __future__ import annotations

import pytest
from export_cache import export_key

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")


class Pool(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)
        self.pool = torch.nn.AdaptiveAvgPool2d(size)
        self.scale = 1.0

    def forward(self, x):
        return self.pool(self.conv(x)) * self.scale


def _pool(size=(5, 7), seed=0):
    torch.manual_seed(seed)
    return Pool(size)


def _key(module=None, x=None, **kwargs):
    module = module or _pool()
    return export_key(module, (x if x is not None else torch.ones(1, 3, 9, 11),), kwargs)


def _closure_module(size):
    class Local(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.adaptive_avg_pool2d(x, size)
    return Local()


def test_same_export_same_key():
    assert _key() == _key() is not None
    assert _key(_closure_module((2, 3))) == _key(_closure_module((2, 3)))


def test_anything_the_exporter_reads_changes_the_key():
    base = _key()
    h = torch.export.Dim("H", min=2, max=64)
    changed = [
        _key(_pool((5, 6))),                                  # a submodule's setting
        _key(x=torch.ones(1, 3, 9, 12)),                      # the example's shape
        _key(x=torch.ones(1, 3, 9, 11, dtype=torch.float64)),  # its dtype
        _key(x=torch.zeros(1, 3, 9, 11)),                     # its values
        _key(dynamic_shapes={"x": {2: h}}),                   # the dims
        _key(dynamic_shapes={"x": {2: torch.export.Dim("H", min=4, max=64)}}),
        _key(dynamic_shapes={"x": {2: 2 * h}}),
        _key(optimize=False),                                 # a keyword
    ]
    m = _pool()
    m.scale = 2.0                                             # a plain attribute forward reads
    changed.append(_key(m))
    changed.append(_key(_pool(seed=1)))                       # the weights
    changed.append(_key(_pool().eval()))                      # the mode
    assert len({base, *changed}) == len(changed) + 1
    assert _key(_closure_module((2, 4))) != _key(_closure_module((2, 3)))  # what forward closes over

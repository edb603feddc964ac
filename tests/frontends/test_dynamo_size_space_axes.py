"""The proof's size search (SizeSpace.bindings) over a pooled tensor with an axis no single symbol sizes: a static
length is one length at every binding (the OCR line's fixed height, test_dynamo_one_symbolic_axis.py); a length
of several symbols (``h*w``, a flattened map) is none the search can bind, so no size is tried there (read at
h = w = 1 it would be tried at a length of 1, where many functions look the same)."""
from __future__ import annotations

from onnxpoolfix.frontends.dynamo.search import SizeSpace


def test_a_static_axis_keeps_its_length_at_every_binding():
    space = SizeSpace([1, 4, 17, "w"], {}, (3, 5))
    envs = list(space.bindings())
    assert envs and all(set(env) == {"w"} for env in envs)
    shapes = [space.at(env)[0] for env in envs]
    assert all(s[2] == 17 for s in shapes)
    assert len({s[3] for s in shapes}) == len(shapes) > 1


def test_an_axis_of_several_symbols_is_never_bound():
    assert list(SizeSpace([1, 4, "h", "h*w"], {}, (3, 7)).bindings()) == []

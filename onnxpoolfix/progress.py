"""Where a run is, as data: each long step of the pipeline opens a :class:`Phase` (a code and its detail), and
whoever listens (the command line's progress line on a terminal) hears it begin and end. Nothing listens by
default: the library never prints, and a phase costs one context-variable read."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    code: str  # the phases, in the order a run meets them: load, find, search, check, compare, save
    detail: str = ""  # the size a check runs at, the region a search proves, the file being written


#: ``listener(phase, started)``: ``started`` True when the phase begins, False when it ends (however it ends)
Listener = Callable[[Phase, bool], None]

_listener: ContextVar[Listener | None] = ContextVar("onnxpoolfix_progress", default=None)


@contextmanager
def phase(code: str, detail: str = "") -> Iterator[None]:
    """Announce ``code`` to the listener, if any, for the duration of the block."""
    listener = _listener.get()
    if listener is None:
        yield
        return
    p = Phase(code, detail)
    listener(p, True)
    try:
        yield
    finally:
        listener(p, False)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the phases run inside the block to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def each(code: str, items, detail: Callable[[object], str] = str):
    """``items``, each iteration of the consumer's loop inside its own ``code`` phase (``detail(item)``)."""
    for item in items:
        with phase(code, detail(item)):
            yield item


def shapes_detail(shapes) -> str:
    """``x:1,3,64,64 y:...`` of a ``{input name: dims}`` mapping ('' for none: the model's own sizes)."""
    return " ".join(f"{name}:{','.join(map(str, dims))}" for name, dims in (shapes or {}).items())

"""The progress line: on a terminal, a line on stderr for each phase of a run (:mod:`onnxpoolfix.progress`)
still going after ``delay`` seconds (load, find, the dynamo proof search, the check at each size, save); none
for the quick ones, none in ``-q``, none where stderr is not a terminal (a pipe, a log, CI). Only what is
shown depends on the clock; what the run does and decides never does."""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..progress import Phase, listening

#: seconds a phase runs before its line is shown
DELAY = 1.0

#: what each phase is called on the line (``{}``: its detail)
WORDS = {"load": "loading {}", "find": "finding the pooling to replace", "search": "proving {} dynamo region(s)",
         "check": "checking in onnxruntime at {}", "compare": "comparing OUT with the original file at {}",
         "save": "writing {}"}


class ProgressLine:
    """A :data:`~onnxpoolfix.progress.Listener` that prints the innermost running phase once it has lasted
    ``delay`` seconds. Use as a context manager: leaving it cancels what has not printed yet."""

    def __init__(self, stream, delay: float = DELAY):
        self.stream, self.delay = stream, delay
        self.running: list[Phase] = []
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def __call__(self, phase: Phase, started: bool) -> None:
        with self.lock:
            self._cancel()
            if started:
                self.running.append(phase)
            elif phase in self.running:
                self.running.remove(phase)
            if started and self.delay <= 0:
                self._write(phase)
            elif self.running:
                self.timer = threading.Timer(self.delay, self._show, args=(self.running[-1],))
                self.timer.daemon = True
                self.timer.start()

    def _show(self, phase: Phase) -> None:
        with self.lock:
            if self.running and self.running[-1] is phase:
                self._write(phase)

    def _write(self, phase: Phase) -> None:
        words = WORDS.get(phase.code, phase.code).format(phase.detail or "the model's own sizes").strip()
        self.stream.write(f"onnxpoolfix: {words} ...\n")
        self.stream.flush()

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self._cancel()
            self.running.clear()


def progress_line(quiet: bool, stream=None) -> ProgressLine | None:
    """The progress line for this run, or None: ``-q``, or stderr not a terminal."""
    stream = stream if stream is not None else sys.stderr
    return None if quiet or not is_terminal(stream) else ProgressLine(stream, DELAY)


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextmanager
def shown(quiet: bool, stream=None) -> Iterator[None]:
    """Run the block with the progress line listening, where there is one (:func:`progress_line`)."""
    line = progress_line(quiet, stream)
    if line is None:
        yield
        return
    with line, listening(line):
        yield

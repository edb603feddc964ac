"""Why a lowering does not apply, as a structured record that still reads as its one-line message.

``Lowering.check`` returns one (or None): ``inspect`` prints it and the tests compare it as the string it
is; code that acts on it reads ``code`` and ``data`` (e.g. ``code="opset"``, ``data={"opset": 13}`` for
"needs opset 13") instead of parsing the message. A leaf module.
"""
from __future__ import annotations

from typing import Any

#: codes a reason may carry (OTHER: nothing for code to act on)
OPSET = "opset"  # data: {"opset": the smallest opset that would do}
OTHER = "other"


class Reason(str):
    """A reason message (``str``) with a machine-readable ``code`` and ``data``."""

    code: str
    data: dict[str, Any]

    def __new__(cls, message: str, code: str = OTHER, **data: Any) -> "Reason":
        self = super().__new__(cls, message)
        self.code, self.data = code, dict(data)
        return self

    def with_text(self, message: str) -> "Reason":  # the same record, its text rendered (onnxpoolfix.words)
        return type(self)(message, self.code, **self.data)

    def __reduce__(self):  # pickles (and copies) keep the class (report.Note's too), code and data
        return (_rebuild, (str(self), self.code, self.data, type(self)))


def _rebuild(message: str, code: str, data: dict[str, Any], cls: type | None = None) -> Reason:
    return (cls or Reason)(message, code, **data)


def needs_opset(opset: int, message: str) -> Reason:
    """"needs opset N" as a reason carrying N."""
    return Reason(message, OPSET, opset=opset)


def opset_needed(reason: str | None) -> int | None:
    """The opset a reason says would do, or None."""
    if isinstance(reason, Reason) and reason.code == OPSET:
        return int(reason.data["opset"])
    return None

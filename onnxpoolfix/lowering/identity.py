"""Every pooled axis keeps its length (n == m): each window is one element, the op is a copy."""
from __future__ import annotations

from .base import Lowering, axis_windows
from .steps import IdentityStep


class IdentityLowering(Lowering):
    name = "identity"
    summary = "Identity: every output size equals the input size"

    def _check(self, spec):
        changed = [a.describe() for a in axis_windows(spec) if not a.keep]
        return f"axis {changed[0]} changes length" if changed else None

    def steps(self, spec):  # no casts around a copy
        return [IdentityStep()]

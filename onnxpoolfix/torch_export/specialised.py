"""A dim the caller declared dynamic that torch's export holds otherwise (static, over a narrower range, one
dim with another, or only at sizes of one form such as ``2*s``), and what to tell the caller."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Specialised:
    """A dim the caller declared dynamic that the export made static, or whose declared range it narrowed."""

    input: str  # the file's input name
    axis: int
    declared: str  # how it was declared: the Dim's name, Dim.DYNAMIC, a name string
    value: int | None  # the size torch pinned it to (None: narrowed, not pinned)
    reason: str = ""  # torch's own words, where it gives them
    ranges: tuple = ()  # narrowed: (the declared (min, max), the exported (min, max)); max None: unbounded
    symbol: str = ""  # narrowed: torch's symbol for the dim
    same_as: str = ""  # unified: the dim declared apart from this one that torch made the same symbol
    unchecked: str = ""  # narrowed on torch.export's probe of a TorchScript export: why the file was not compared
    # with torch at the sizes left out (the file is the tracer's and need not keep to the probe's range)
    #: torch's expression for a dim declared as a Dim of its own (``2*s24``: even sizes only), which the file does not
    #: keep to (torch 2.9's exporter writes ``W`` and drops the program's runtime assert)
    form: str = ""

    def describe(self) -> str:
        torch_says = f" (torch: {self.reason})" if self.reason else ""
        if self.form:
            return (f"dim {self.axis} of input '{self.input}' was declared dynamic ({self.declared}) but torch holds "
                    f"it as {self.form}: the exported file accepts every size there and follows the module only at "
                    f"sizes of that form (at the others it may crash or compute another branch){torch_says}")
        if self.same_as:
            return (f"dim {self.axis} of input '{self.input}' ({self.declared}) was declared apart from "
                    f"{self.same_as} but torch made them one dim: the exported file follows the module only where "
                    f"they are equal (elsewhere, it may crash or compute another branch){torch_says}")
        if self.value is None:
            (lo, hi), (lo2, hi2) = self.ranges
            lo2 = max(lo2, min(lo, 2))  # torch's range starts at 0 where its guard says 2
            if self.unchecked:
                return (f"dim {self.axis} of input '{self.input}' was declared dynamic over {span(lo, hi)} "
                        f"({self.declared}) but torch.export, probing the module, narrowed it to {span(lo2, hi2)}; "
                        f"the TorchScript file need not keep to that range, but {self.unchecked}, so it is not known "
                        f"to follow the module outside it (it may crash or compute another branch){torch_says}")
            return (f"dim {self.axis} of input '{self.input}' was declared dynamic over {span(lo, hi)} "
                    f"({self.declared}) but torch narrowed it to {span(lo2, hi2)}: the exported file follows the "
                    f"module only there (outside it, it may crash or compute another branch){torch_says}")
        return (f"dim {self.axis} of input '{self.input}' was declared dynamic ({self.declared}) but torch "
                f"specialised it to {self.value}: the exported file accepts only {self.value} there{torch_says}")


def span(lo: int, hi: int | None) -> str:
    return f"[{lo}, {hi if hi is not None else 'inf'}]"


SPECIALISED_HINT = ("make the module keep that dim symbolic (torch's reason says where it pins it), or declare "
                    "it static (leave it out of dynamic_shapes, or Dim.AUTO to let torch decide); "
                    "allow_specialized_dims=True exports it static anyway, with a warning")


NARROWED_HINT = ("declare the range torch holds (torch.export.Dim(..., min=, max=)) if the module is meant only for "
                 "it, or change the module so that torch keeps the whole range (torch's reason names the guard); "
                 "allow_specialized_dims=True exports it anyway, with a warning")


UNIFIED_HINT = ("declare them as one dim (the same Dim or name) if the module is meant only for equal sizes, or "
                "change the module so that torch keeps them apart (torch's reason names the guard); "
                "allow_specialized_dims=True exports it anyway, with a warning")

FORM_HINT = ("declare the dim as torch holds it if the module is meant only for those sizes (a derived Dim: W = "
             "2 * Dim('_W') for 2*s; the file names it 2*_W, and onnxruntime does not enforce it), or change the "
             "module so that torch keeps every size (a size such as W // 2 * 2 makes torch assume the example's "
             "form); allow_specialized_dims=True exports it anyway, with a warning")

#: dynamic_axes has no ranges nor shared dims to declare
DYNAMIC_AXES_HINT = ("export with dynamo=True and declare in dynamic_shapes what torch holds (a Dim's min/max, one Dim "
                     "for equal dims), or leave the dim out of dynamic_axes; allow_specialized_dims=True exports it "
                     "anyway, with a warning")


def hint_for(found: list[Specialised], dynamic_axes: bool = False) -> str:
    if dynamic_axes:
        return DYNAMIC_AXES_HINT
    first = found[0]
    return (UNIFIED_HINT if first.same_as else FORM_HINT if first.form else NARROWED_HINT if first.value is None
            else SPECIALISED_HINT)

"""What every front end takes and returns, and what the planner may do with what it finds: the seam
between "find pooling in a graph" and "plan it".

A front end is a :class:`FrontEnd`: a function ``(model, options, found) -> FrontEndResult`` that reads the
model (``found`` is what the front ends before it produced) and returns spec records
(:class:`~onnxpoolfix.spec.PoolSpec`) plus notes for the report, and what the planner may do with each
node it found: lower it, keep it as it is (``FrontEnd.optional``, ``FrontEnd.keeps``), repair it
(``FrontEndResult.repairs``: left, with a warning, where no lowering applies), leave a suspect
(``FrontEndResult.suspects``). The planner names no front end; it reads only these fields (each says what it
allows; ARCHITECTURE.md, "Adding a front end", has them all in one place).

A front end raises :class:`~onnxpoolfix.errors.PoolFixError` for a model it cannot read; the planner records
that as the model's blocker. A new front end is its own module and one entry in ``FRONTENDS``
(:mod:`onnxpoolfix.frontends`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Callable

import onnx

from ..lowering.calibration import BUILT_IN_COSTS, CostModel
from ..spec import PoolSpec

REPAIRED = "repaired: "  # the why of a node in FrontEndResult.repairs starts with this, then what was wrong


@dataclass(frozen=True)
class PlanOptions:
    """The arguments of ``patch``/``inspect`` that planning depends on."""

    strategy: str = "auto"
    target: str = "onnxruntime"
    input_shapes: Mapping[str, Sequence[int]] | None = None
    # the size the file was exported at (``--traced-shape``): only for the dynamo front end's proofs and frozen
    # AveragePools; binds nothing in OUT
    traced_shapes: Mapping[str, Sequence[int]] | None = None
    keep_input_shapes: bool = False
    optimize_exporter_pools: bool = False
    seed: int = 0  # of the random inputs a front end proves a region on (the dynamo front end)
    # the folder of the model's external data (its file's folder): a dynamo region whose window tables are
    # external (torch writes them to the .data file) is run alone against it, never against the working folder
    model_dir: str | None = None
    # how the planner ranks the exact lowerings (--costs, --tune): installed for plan_model's run
    cost_model: CostModel = BUILT_IN_COSTS
    # every adaptive pool of the file was kept as a node by onnxpoolfix.export's own translation table: nothing
    # was decomposed or frozen, so the dynamo front end has nothing to find (a genuine F.avg_pool2d on a source
    # line that also calls adaptive_avg_pool2d is not a frozen one to refuse)
    kept_by_table: bool = False


@dataclass(frozen=True)
class Region:
    """The nodes a spec stands for beyond the one that writes its output (a decomposition the dynamo
    exporter wrote): once the output is rewritten, those of them nothing reads any more go
    (:func:`onnxpoolfix.rewrite.regions.drop_dead_region_nodes`). ``result`` is the spec's output."""

    result: str
    pooled: str
    outputs: frozenset[str]  # the output names of every node of the region (size-only ancestors included)
    reads: frozenset[str]  # the tensors those nodes read (initializers among them go once nothing reads them)
    evidence: str  # "metadata: torch.nn.modules.pooling.AdaptiveAvgPool2d", "stack trace: ...", "structure"
    output_size: tuple[int, ...]
    proven_at: tuple[int, ...]  # the pooled tensor's shape where the region equalled the reference
    nodes: int  # data nodes of the region (what the notes count)
    # a frozen pool whose output size was read at the given traced size alone (nothing in the graph confirms it):
    # OUT rests on the user's word for it (the result line says so, the JSON marks the node)
    rests_on_traced: bool = False


#: what would decide a suspect (its ``remedy``): the export call's input size (--traced-shape); nothing in the
#: file (export through onnxpoolfix.export); the metadata a tool stripped (patch the file the exporter wrote)
TRACED, EXPORT, STRIPPED = "traced-shape", "export", "stripped"


@dataclass(frozen=True)
class Suspect:
    """Something that looked like adaptive pooling and is left as it is, with why."""

    result: str  # the tensor it writes
    evidence: str
    why: str
    frozen: bool = False  # under symbolic sizes, right only at some sizes (frozen at the traced size): OUT would be too
    right_at: str = ""  # where it is right as it is (what a partial fix's report says)
    remedy: str = TRACED  # what would decide it: TRACED, EXPORT or STRIPPED


@dataclass
class FrontEndResult:
    specs: list[PoolSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # onnxpoolfix.report.WarningNote for a warning
    # node index -> what is wrong with it: nodes that cannot run as written (.exporter_repair). Planned like
    # the front end's others, but never kept as they are nor grouped; their why starts with REPAIRED + this
    repairs: dict[int, str] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)  # per spec that replaces more than its own node
    suspects: list[Suspect] = field(default_factory=list)


def never_kept(spec: PoolSpec, lowering: str) -> bool:
    """The default of :attr:`FrontEnd.keeps`: every planned node is replaced."""
    return False


@dataclass(frozen=True)
class FrontEnd:
    """One way of finding pooling (``find``), and what the planner may do with what it finds (module doc)."""

    name: str
    find: Callable[[onnx.ModelProto, PlanOptions, Sequence[PoolSpec]], FrontEndResult]
    optional: bool = False  # True: a node with no exact lowering stays as it is; False: the patch fails
    # (spec, the planned lowering's name) -> True where that lowering is the node itself: kept as it is
    keeps: Callable[[PoolSpec, str], bool] = never_kept


def reach(start: Iterable, step: Callable[[object], Iterable], most: int | None = None) -> set:
    """``start`` and all that ``step`` (an item -> the items it leads to) leads to from it, depth first; once
    ``most`` are found, no more is followed (a bound on a corrupt graph)."""
    seen, todo = set(start), list(start)
    while todo and (most is None or len(seen) < most):
        for y in step(todo.pop()):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return seen

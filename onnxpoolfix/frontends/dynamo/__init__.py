"""The dynamo front end: adaptive pooling that ``torch.onnx.export(..., dynamo=True)`` wrote as torch's
decomposition (or as a pooling op frozen at the traced size), found, proven and handed to the planner as
:class:`~onnxpoolfix.spec.PoolSpec` records, like a leftover node. docs/dynamo-files.md is the guide.

A region's life, module by module:

1. :mod:`.metadata` reads what a node's metadata says about the torch call that wrote it (the module class,
   the source line and its calls). Two readings stay with their users: :mod:`.merges` reads ``fx_node``
   (which program value a node stands for), :mod:`.frozen_readings` ``class_hierarchy`` and ``fx_node`` of a
   flatten.
2. :mod:`.dataflow` cuts candidate regions out of the graph: from the Div by the window lengths (or the
   ReduceMean of equal windows) back to the one tensor every data path passes through, with the window
   tables and the size arithmetic they read (:class:`~.dataflow.Candidate`, a frozen record: what was
   found never changes).
3. :mod:`.search` chooses the sizes a region is tried at (the branch classes of torch's decomposition, per
   axis, bounded by a count of tries, never by time); :mod:`.probe` finds a large traced size's classes.
4. :mod:`.proof` runs a candidate alone in onnxruntime at one size and compares it with the reference
   (:mod:`onnxpoolfix.reference`) exactly as the check compares a replacement; :mod:`.proof_search` runs it
   at the sizes :mod:`.search` chooses and keeps it only where it proves out. What it learns is the
   candidate's :class:`~.proof.Proof` (sizes tried, proven at, why not), returned beside it.
5. :mod:`.frozen` (with :mod:`.frozen_readings` and :mod:`.frozen_indices`) treats the exporter's pooling
   ops frozen at the traced size: every reading the evidence allows, narrowed by the traced size; two
   readings that differ at some size are a refusal, not a guess.
6. :mod:`.front_end` ties them together (:func:`~.front_end.dynamo_specs`): proven regions become specs and
   ``regions`` to delete, the rest ``suspects`` with why (the report and ``inspect`` list them).

Glossary: *region* - the nodes of one decomposed pool; *candidate* - a region not yet proven; *suspect* - a
region or frozen op left as it is, with its reason; *traced size* - the input size the export ran at;
*branch class* - which of torch's Python branches a pooled axis took (m divides n, upsampling, ...).
"""
from __future__ import annotations

from .front_end import dynamo_specs, frozen_error, partial_lines

__all__ = ["dynamo_specs", "frozen_error", "partial_lines"]

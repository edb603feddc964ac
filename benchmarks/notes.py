"""The analysis written under the tables of benchmarks/RESULTS.md (edit it with each measured run)."""

NOTES = """## Notes (analysis of the run that produced this file; numbers move on a shared machine)

- **Planner**: the chosen lowering was the fastest forced one (within 15%) in every single-lowering case
  but one flagged MISS in the 2026-12-01 run: max [8,256,64,64] -> 5x7, where the two max lowerings swap
  places between runs (forced: pool_gather 14.8 ms vs window_gather 15.9 ms here; 12.5 vs 12.0 ms in the
  run before); psp_64's group plan (`pyramid`: the four pools of one input planned together) took 0.2-0.3x the time
  of the fastest lowering forced on each node (psp_60 has no leftover to force: the exporter lowered all four).
- **vs torch**: faster on every static case. The one that was at par, 1D [16,256,1000] -> 30 (0.90x in
  some runs with the block-diagonal MatMul), now takes `block_pool` (10 periods of 100 -> 3, k34 s33:
  one AveragePool on the input reshaped into periods) and is 1.17-1.18x faster than torch over runs.
- **vs dynamo**: >= 4x wherever it emits a decomposition; within 10% (or faster) where it emits plain
  ops: psp_60 (four pooling ops: our nested pyramid is 2.2-2.5x faster) and the 1x1 global pool (ReduceMean
  both; the exporter's GlobalAveragePool, 77-80 us in the `default` column, is what `--optimize-exporter-pools`
  replaces). It cannot export max or 3D pooling, and 1024->7 would unroll 148x148 window terms (not
  attempted). Its dynamic export is WRONG away from the traced size (dyn_avg_64to5x7: max error 0.15).
- **vs the read-once floor (>= 4 MB)**: met in earlier runs; in the 2026-12-01 run (taken while CI and
  other jobs shared the two cores) psp_64 (6.1x) and max_64to5x7 (10.7x) missed it because the floor itself
  measured 1.1 ms where earlier runs measured 3.4 ms for the same 32 MB read. A back-to-back A/B of the
  code before and after that day's restructuring (`bench.py --cases psp_64,max_64to5x7,avg_64to5x7`,
  twice each, alternating) gave the same times for ours: psp_64 712-873 us before vs 509-874 us after,
  max_64to5x7 6986-7874 vs 6693-7082 us, avg_64to5x7 2827-4051 vs 2021-2192 us: no per-node regression.
  Max pooling over large planes stays 6-10x above the floor (DESIGN.md: 2-13x for both max forms). psp_60 1.7-1.8x (6x6 pooled from the input by
  AveragePool k10, the 3x3, 2x2, 1x1 from the 6x6); psp_64 2.9-3.4x (the windows of 64 -> 6 overlap, so no
  nesting for averages: one stacked MatMul over the input with the 1+2+3+6 columns padded to 16, a
  [12, 64] MatMul per plane, a Slice per level); before the pyramid planning they were 4.2x and 9.9x.
- **dynamic vs static at the same size** (target: at most max(2x static, static + 50 us), max with
  indices included): met in this run for every row: avg 64x64 -> 5x7 1.02-1.14x, avg 10x10 -> 7x7
  1.3-1.6x, the tiny 1x64x4x5 -> 6x6 2.6x but 12 us above static (the fixed cost of deriving the windows
  from Shape), max with indices 1.03-1.36x (the static `argmax` construction with runtime window tables),
  and max 33x33 -> 8x8 without indices 1.88-1.94x, BORDERLINE (its static form is one MaxPool k5 s4; the
  dynamic one moves the pooled axes in front, gathers the runtime window table per axis and reduces it;
  it was 2.0-2.5x before that). A MaxPool(kmin, stride 1) + two-Gather form, as the static `pool_gather`,
  would need kmin at graph time: an If on the runtime window lengths (onnxruntime target only) is the way
  left open. Max with indices got 14x faster in static and dynamic form alike (33 -> 8: 16 -> 1.2-1.8 ms):
  no Gather along the last axis, windows reduced along a middle axis. Still slower than torch's own
  kernel with indices (10x10 -> 7x7: 925 us vs 307 us; 33 -> 8: 1230 vs 451 us): the exact first-maximum
  construction (a window Gather, ReduceMax, a NaN-aware choice) is the price of bit-exact indices.
- **What made these fast**: (1) max pooling's NaN/-inf-exact path runs only when a ReduceSum over the
  input is not finite (an If; it used to run always: 8-13x slower); (2) a window Gather on the last axis
  first moves that axis to the front (onnxruntime's last-axis Gather copies element by element, 10x
  slower); (3) with gcd(n, m) = g > 1 the windows repeat per period: a block-diagonal MatMul, or one
  pooling op where the period is uniform (`block_pool`); (4) onnxruntime's pooling ops are slow out of
  cache (~1.6 ns per input element above ~16 MB), so there a MatMul beats a strided AveragePool; (5) MLAS
  runs a GEMM with a ragged column count slowly ([1,512,64,64] @ [64, N]: N=16 501 us, N=12 623 us, N=9
  893 us), so the pyramid's stacked matrix is zero-padded to 16 columns.
"""


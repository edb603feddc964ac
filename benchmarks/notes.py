"""The analysis written under the tables of benchmarks/RESULTS.md (edit it with each measured run)."""

NOTES = """## Notes (analysis of the run that produced this file; numbers move on a shared machine)

- **Load**: the 2026-12-01 afternoon runs (issue 24) were taken while five sessions shared the two cores (load
  average 4-5). Under that load torch's 2-thread kernels stall far more than onnxruntime's (avg 10x10 -> 7x7:
  torch 0.3 ms in one run, 8.0 ms in the next; max+indices 10x10 -> 7x7 0.6-10 ms): the torch columns and
  every "ours <= torch" verdict of these runs say little. The A/B figures below compare our own graphs,
  interleaved in one process, which the load slows alike.
- **Max with indices (argmax)**: its NaN-aware choice (IsNaN, Where, Cast, two ReduceMax, ...) now sits in
  the else-branch of an If on "the windows' sum is finite"; finite windows take one ArgMax. A/B against the
  code before (same process, interleaved, 15 rounds): 1x512x10x10 -> 7x7 1784 -> 889 us and 1249 -> 684 us
  (two runs), 1x256x33x33 -> 8x8 2749 -> 1585 and 2163 -> 1174 us, 8x256x64x64 -> 5x7 81 -> 34 ms and
  258 -> 131 ms: 1.8-2.4x faster; the dynamic lowering shares it (dyn_maxidx rows 0.99-1.37x their static
  form). Still 35-70x the read-once floor; whether it now beats torch's kernel on a quiet machine (the issue
  measured torch at ~0.3 ms for 10x10 -> 7x7, ours then ~1 ms) could not be measured here. What ArgMax
  costs: onnxruntime's ArgMax over the window axis is ~2 ns per element (789 us of 1.5 ms for 33 -> 8).
  Tried and NOT kept: (a) onnxruntime's MaxPool with its Indices output: 10-25x slower than MaxPool without
  it (1x256x33x33 k5 s4: 908 vs 91 us; 8x256x64x64 k1x9 s1: 286 vs 42 ms); (b) one pass per axis carrying
  value and position (Gather of each window column, Greater, two Where): 1.3-8x slower, onnxruntime's Where
  runs ~5 ns per element on one thread; (c) first maximum as ReduceMax + Equal + Cast + Mul by descending
  weights + ReduceMax instead of ArgMax: 0.86-0.94x on the small cases, 1.33x on the 32 MB one; (d) TopK
  (k 1, ties to the lower index by the spec, same indices on tie data): 3.5-6x slower than ArgMax.
- **Averages (issue 24, large input)**: avg_64to5x7's H pass (after W, on [8,256,64,7]) was one GEMM per
  plane packing x on every call (~1.3 ms in the onnxruntime profile); the dynamic lowering already took the
  flattened tail against kron(P^T, I_7) (one GEMM, ~0.6 ms), which is why it ran faster than the static one.
  The static MatMul now does the same where the later dims are static and small (t <= 16; the cost model
  picks it per axis). The zero-padding of 5/7-column last-axis passes to 8 (+ Slice) is gone: re-measured
  1.03-1.27x slower padded and 1.14-1.69x with the Slice (the Slice alone ~1 ms on 32 MB). A/B in one process
  (25 rounds): avg_64to5x7 3971 -> 2473 us, 2.59x -> 1.60x the floor (the dynamic lowering 2467 us, 1.66x).
- **Max, large input (issue 24)**: max_64to5x7 now takes `pool_cover`: H 64 -> 5 on the grid k13 s13
  (ceil_mode) inside its windows, W k10 s9 in the same MaxPool, plus rows 12, 25, 38, 51 (the ones the grid
  misses) gathered, pooled along W and Max'ed in. A/B in one process (old window_gather vs new, NaN guard
  included): 15.8 -> 13.2 ms (40 rounds, 9.0x -> 7.5x the floor) and 17.8 -> 15.5 ms (25 rounds, 5.1x ->
  4.6x); without the guard 0.62-0.67x. Target 2.5x NOT met: in the onnxruntime profile every MaxPool over
  the 32 MB input is preceded by the NCHWc reorder of it (~2x a ReduceSum over the input by itself; MLAS's
  plain NCHW pooling, channels reshaped to 1, is as slow), and the NaN guard's ReduceSum is another 1x.
  Tried and not kept: (a) ReduceMax over aligned blocks of 4 rows (~1.3x a ReduceSum) + the windows' edge
  rows gathered + the W MaxPool on both + a part table: 6.9 vs 5.5 ms inside the If (the small Gathers,
  Concat and the second NCHWc reorder eat the gain); (b) the H window Gather first (37 MB written): 1.4x
  slower; (c) the guard's ReduceSum over a middle axis first: 0.99-1.08x (no gain).
- **Planner on this machine**: with the built-in constants the choice was within 15% of the fastest forced
  lowering in 19 of the 22 rows that have a choice in the table run; the misses (avg_64to5x7 matmul vs
  kronecker, avg_128to3 matmul vs kronecker, avg1d_1000to30 block_pool vs matmul, 1.35-1.41x) are pairs whose
  order flips between runs under this load (avg_64to5x7's matmul and kronecker: 16.7 vs 15.5 ms, 18.7 vs
  28.7 ms, 17.4 vs 11.1 ms in three runs). `onnxpoolfix calibrate` measured here (2 threads, fastest-call
  probes, three runs): NODE 0.36x the built-in, BANDWIDTH 1.6-2.2x, MAC_RATE 2.0-2.1x, POOL_RATE 1.4-1.6x,
  GATHER_RATE 1.5-1.7x, GATHER_BLOCK 0.87x: close to a uniform 1.5-2x, so the choices barely move with
  calibrated costs (the first calibrated run picked argmax for max 64 -> 5x7 without indices: its estimate
  ignored windows out of cache, now charged 4x). A run with `ONNXPOOLFIX_TUNE=1` (the candidates timed at
  patch time, onnxruntime's default threads): 9 of 11 static single-node cases within 15%, kronecker for
  avg_64to5x7 and avg_128to3 (the fastest forced there); misses avg1d_1000to30 (block_pool, 1.55x matmul)
  and avg3d_17to4 (pool, 1.53x matmul), pairs within 5-10% of each other in the tuner's own few rounds;
  with `ONNXPOOLFIX_TUNE_THREADS=2` (the bench's threads) the tuner picked matmul for avg1d 3 times of 3.
  Target "within 15% in every case": NOT met on this machine under this load by either.
- **Dynamic rows**: dyn_max_33to8 (max without indices, not changed here) was 1.9x in the morning run and
  2.4-2.6x in these: its static form is one MaxPool k5 s4 and the dynamic one gathers runtime window tables
  (BORDERLINE before, MISSED under this load).
- **Dynamic max without indices (issue 24)**: from 2^16 input elements on (an If on Size) the pooled axes
  are gathered in place, only the last moved to the front after the others (the whole-input Transpose cost
  more); the window tables take 12 + g nodes for g axes sharing them, 11 for one (13 + g, 13). A/B (one process,
  interleaved, 21 rounds): 1x256x33x33 -> 8x8 322 -> 287 and 330 -> 284 us (static 143 us: 2.25x -> 2.0x
  under load; target NOT met: the in-place Gather + ReduceMax of H alone costs more than the static
  MaxPool), 2x256x64x64 -> 5x7 3156 -> 1788 us (static 1855), 1x512x10x10 -> 7x7 103 -> 100 us,
  1x64x4x5 -> 6x6 24.4 -> 26.5 us (the If). Not kept: [kmax, m] tables, C/H swapped first, MaxPool 2x2 s1 +
  half tables (1.3-2.6x slower); MaxRoiPool (float bins: wrong windows); ScatterND max (opset 18 only,
  0.95x at 33x33 before its runtime indices).
- **What made these fast**: (1) max pooling's NaN/-inf-exact path runs only when a ReduceSum over the
  input is not finite (an If; it used to run always: 8-13x slower), and since issue 24 the same for max with
  indices; (2) a window Gather on the last axis first moves that axis to the front (onnxruntime's last-axis
  Gather copies element by element, 10x slower); (3) with gcd(n, m) = g > 1 the windows repeat per period: a
  block-diagonal MatMul, or one pooling op where the period is uniform (`block_pool`); (4) onnxruntime's
  pooling ops are slow out of cache (~1.6 ns per input element above ~16 MB), so there a MatMul beats a
  strided AveragePool; (5) MLAS runs a GEMM with a ragged column count slowly ([1,512,64,64] @ [64, N]: N=16
  501 us, N=12 623 us, N=9 893 us), so the pyramid's stacked matrix is zero-padded to 16 columns.
"""

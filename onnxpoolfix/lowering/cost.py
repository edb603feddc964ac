"""The cost model: estimated onnxruntime CPU seconds for each emitted op, in one place.

Fitted by hand to benchmarks/bench.py on 2 shared cores (onnxruntime 1.32, fp32; benchmarks/RESULTS.md has
the measurements and the planner's estimates side by side). What it captures, and what each constant was
fitted to:

- MatMul: multiply-adds at ``MAC_RATE``, slowed in proportion when the GEMM's output has fewer than
  ``NARROW_N`` columns (MLAS computes 16-wide column strips: 128x128 -> 3 (N=9) ran at ~10 G MAC/s,
  9x9 -> 7x7 Kronecker (N=49) and 64x64 -> 5x7 Kronecker (N=35) at ~19 G MAC/s);
  plus ``GEMM_CALL`` per GEMM issued: ``x @ P^T`` (constant on the right) is one big GEMM, ``P @ x``
  (constant on the left) one GEMM per leading plane (9x9 -> 7x7 on 2048 planes: ~0.3 us each);
  plus ``PACK_ELEM`` per element of ``x`` when ``x`` is the right operand (``P @ x``): MLAS packs the
  non-constant B matrix on every call (1x3x1024x1024 -> 7 along H: 7.0 ms, the same MACs along W: 2.0 ms,
  i.e. ~1.5 ns per element out of cache; 1.0 ns is used so cache-resident 3D cases are not overcharged);
- Gather: ``GATHER_RATE`` elements copied per second plus ``GATHER_BLOCK`` per contiguous block copied
  (a Gather on the LAST axis copies element by element: 8x256x64x64 along W 86 ms, along H 7.7 ms);
- AveragePool/MaxPool: window-element reads at ``POOL_RATE`` (1-2 spatial axes; 33x33 -> 8x8 k5 s4 on 256
  channels ~100 us) or ``POOL_RATE_3D`` (3 spatial axes: 17^3 -> 4^3 k5 s4 on 64 channels ~600 us);
- ... and out of cache, onnxruntime's pooling ops cost ``POOL_OUT_OF_CACHE`` per input element whatever
  the kernel (8x256x64x64, 32 MB: AveragePool k1x10 s1x9 13 ms, k10x10 s9x9 17 ms, k2x2 s2x2 19 ms, while a
  MatMul along W takes 6 ms and a ReduceSum 3 ms), so above ``CACHE_BYTES`` a MatMul beats a pool
  (below it pools stay fast: 1x512x60x60, 7 MB, AveragePool k10 554 us vs separable MatMul 779 us);
  most of that is onnxruntime's blocked-layout reorder around the pool: a kernel along ONE axis run over
  single-channel planes (lowering/plane_pool.py) pays ``POOL_PLANES_SHARE`` of it (measured 0.44-0.57);
- argmax (max pooling with indices, lowering/argmax.py): ``ARGMAX_PASSES`` passes over the gathered
  windows at ``BANDWIDTH`` plus its Gathers. Its windows are laid out ``[output positions, kall, leading
  dims]``, so ArgMax and the reductions run over a middle axis, vectorized over the leading dims: there is
  no per-row cost any more (the old last-axis layout paid ~0.3 us per row, and the estimate of 1x512x10x10
  -> 7x7 was 18 ms for 1 ms measured). Fitted to 8 shapes, median of 30 runs, 2 threads, two runs on the
  shared machine: 1x512x10x10 -> 7x7 0.9-1.1 ms (est. 1.6), 8x256x16x16 -> 5x5 4.2-7.9 ms (5.7),
  1x256x64x64 -> 6x6 6.1-10.9 ms (9.3), 4x32x20^3 -> 3x4x5 5.9-12.1 ms (9.6), 1x64x100 -> 7 40 us (74):
  estimate / measured 0.7-2.1 (cache-resident windows run faster than ``BANDWIDTH``, which this ignores);
- the first maximum over every window at once (lowering/first_max_windows.py): ``FIRST_MAX_WINDOWS_PASSES``
  passes over its gathered windows (Equal, Cast, Mul, two ReduceMax, their reads and writes) plus the
  Gather; fitted so that it and the separable construction's estimate order 14 shapes as measured in one
  process (1x512x10x10 -> 7x7 0.71x, 1x512x14x14 -> 6x6 0.49x, 1x256x33x33 -> 8x8 1.07x, 8x64x31x40 ->
  6x9 1.27x the separable's time): every choice right or within 10% of the faster;
- everything else is memory traffic: bytes read and written at ``BANDWIDTH`` (a ReduceSum over 32 MB ran
  at 7.5-10 GB/s; small tensors stay in cache and run faster, which this ignores);
- a pooling kernel longer than ``POOL_LONG_KERNEL`` along one axis slows in proportion to its length
  (1x3x1024x1024, AveragePool k147x1 s146x1: 6.6 ms, 0.48 G reads/s; k2x1 on 1x2048x9x9: 4.3 G reads/s);
- reductions (ReduceMean over one axis): streamed at ``BANDWIDTH`` where the elements after the axis are many
  (1x3x1024x1024 over H: 180 us), but element by element, ``REDUCE_NARROW_READ`` each, where 2 to
  ``REDUCE_NARROW_INNER - 1`` follow it (1x2048x9x9 over H: 352 us for 166k elements; over W, the last axis,
  each window is contiguous: 58 us) and where nothing precedes it (N = C = 1: 1x1x1024x1024 -> 7 along H,
  the ReduceMeans 3.0 ms, 0.24 ms at 3 channels; profiled, review67);
- the window Slices (lowering/window_slices.py), fitted so that their estimates and the MatMuls' order about 50
  shapes as measured side by side (review67; 1-D, 2-D, 3-D, 1 to 2048 channels, batch 1 to 4: every switch
  to the Slices measured 0.25x-0.95x the MatMul, every MatMul kept 1.07x-8x faster than the Slices, one
  near tie kept, [1,32,300] -> 7 at 0.93x; benchmarks/RESULTS.md): a Slice copies its window (read and
  write at ``BANDWIDTH``), its ReduceMean reads it back from cache (uncharged; at ``BANDWIDTH`` where one copy is
  over half of ``CACHE_BYTES``: large inputs, 10 shapes measured 0.31x-0.86x as MatMuls) and pays
  ``REDUCE_OUT`` per output (1x64x17^3 -> 4^3: the ReduceMeans 336 us of 492 us for 96k outputs), and each run
  of Slice + AveragePool pays ``POOL_RUN_PLANE`` per plane, N x C (onnxruntime's blocked-layout reorders around the
  pool: 158 us of 338 us at 1x512x17x13 -> 5x7, 6 runs);
- every node costs ``NODE`` of fixed overhead.
"""
from __future__ import annotations

MAC_RATE = 20e9  # multiply-adds per second (fp32 GEMM, 2 threads, output >= NARROW_N columns)
NARROW_N = 16  # GEMMs with fewer output columns run at MAC_RATE * N / NARROW_N
GEMM_CALL = 0.3e-6  # seconds per GEMM issued in a batched MatMul
PACK_ELEM = 1.0e-9  # seconds per element of a non-constant right-hand MatMul operand (packing)
BANDWIDTH = 10e9  # bytes per second for streaming ops (read + write)
POOL_RATE = 4e9  # window-element reads per second in AveragePool/MaxPool over 1 or 2 spatial axes
POOL_RATE_3D = 0.8e9  # the same over 3 spatial axes
POOL_OUT_OF_CACHE = 1.6e-9  # seconds per input element of a pooling op whose input exceeds CACHE_BYTES
CACHE_BYTES = 16 << 20  # where pooling ops fall off (measured between 7 MB and 32 MB)
POOL_PLANES_SHARE = 0.5  # the share of POOL_OUT_OF_CACHE a one-axis pool over single-channel planes pays
GATHER_RATE = 1.5e9  # elements per second copied by Gather
GATHER_BLOCK = 8e-9  # seconds per contiguous block a Gather copies (block = the dims after the axis)
ARGMAX_PASSES = 14  # passes over the gathered windows in the argmax construction (IsNaN, Where, ReduceMax, ...)
ARGMAX_PASSES_LAZY = 5  # the same on the finite path of its If-guarded form (ReduceSum, ArgMax, GatherElements)
FIRST_MAX_WINDOWS_PASSES = 8  # passes over the windows in first_max_windows.py (Equal, Cast, Mul, ReduceMax x2)
ARGMAX_OUT_OF_CACHE = 4  # their slowdown when the windows exceed CACHE_BYTES (8x256x64x64 -> 5x7: 34-131 ms)
POOL_LONG_KERNEL = 16  # AveragePool kernels longer than this along one axis read POOL_RATE * 16 / length
REDUCE_NARROW_INNER = 16  # a reduction over an axis followed by fewer elements than this runs element by element
REDUCE_NARROW_READ = 2e-9  # seconds per element read there (1x2048x9x9, ReduceMean over H: 352 us; over W 58 us)
REDUCE_OUT = 4e-9  # seconds per output of a ReduceMean over a window Slice
POOL_RUN_PLANE = 40e-9  # seconds per plane (N x C) of each run of a window Slice + AveragePool
NODE = 2e-6  # fixed per-node overhead

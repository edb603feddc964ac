"""The cost model: estimated onnxruntime CPU seconds for each emitted op, in one place.

Fitted to measurements on 2 cores in onnxruntime (see benchmarks/RESULTS.md). What it captures:

- a MatMul costs its multiply-adds at ``MAC_RATE`` plus ``GEMM_CALL`` per GEMM it issues: a MatMul whose
  right operand is a 2D constant runs as one big GEMM, one whose left operand is the constant runs one
  GEMM per leading "plane" (that is what makes the Kronecker form win on small planes);
- everything else is memory traffic: bytes read and written at ``BANDWIDTH``;
- pooling ops read each window element (``POOL_RATE`` reads per second);
- every node costs ``NODE`` of fixed overhead.
"""
from __future__ import annotations

MAC_RATE = 60e9  # multiply-adds per second (fp32 GEMM, 2 threads)
GEMM_CALL = 0.3e-6  # seconds per GEMM issued in a batched MatMul
BANDWIDTH = 6e9  # bytes per second for streaming ops (read + write)
POOL_RATE = 1.5e9  # window-element reads per second in AveragePool/MaxPool
GATHER_RATE = 1.0e9  # elements per second copied by Gather
NODE = 2e-6  # fixed per-node overhead

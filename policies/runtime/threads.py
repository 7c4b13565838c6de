"""Intra-op threads of each inference backend on the robot's computer, chosen here and nowhere else.

One thread each: the graph's nodes share the cores (two on the robot's computer and on the CI host), and a
second intra-op thread only takes a core from another node's callback. Measured on the 2-core host: two ONNX
Runtime threads cut the encoder alone from 10.9 to 8.2 ms, but in the graph over 5 minutes gave p99 32.7 ms
and 11 missed cycles, no better than one (docs/benchmarks.md); the opd node's head and predictor take ~1 ms
on one thread. Idle ONNX Runtime workers sleep instead of spinning (`onnxruntime_backend`) for the same
reason. A node's `inference_threads` parameter (0: this table) overrides it for its own runtime.
"""

from __future__ import annotations

# backend -> intra-op threads on the graph (TensorRT runs on the GPU: it has no such setting)
INTRA_OP_THREADS = {"onnxruntime": 1, "torch": 1}


def intra_op_threads(backend: str, given: int = 0) -> int | None:
    """The intra-op threads `backend` runs with: `given` when set (> 0), else this module's choice;
    None for a backend without such a setting."""
    return given or INTRA_OP_THREADS.get(backend)

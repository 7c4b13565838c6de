"""Pick a backend by name and open one graph of an artifact with it."""

from __future__ import annotations

from pathlib import Path

from policies.artifact import Artifact
from policies.runtime.base import ModelRunner

BACKENDS = ("torch", "onnxruntime", "tensorrt")
DEFAULT_PRECISION = {"torch": "fp32", "onnxruntime": "fp32", "tensorrt": "fp16"}


def load_model(
    artifact: Artifact | str | Path,
    name: str,
    backend: str = "onnxruntime",
    precision: str | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
    device: str = "auto",
) -> ModelRunner:
    """Open graph `name` (encoder | policy | predictor) of a verified artifact on `backend`, on `device`:
    cpu, cuda:N, or auto (ONNX Runtime's CUDA provider where installed, as a robot's nodes want; the torch
    reference on the CPU). TensorRT runs on the current CUDA device.

    Raises ValueError for an unknown backend or precision, ArtifactError for a corrupt artifact and
    BackendUnavailable when the backend cannot run here.
    """
    art = artifact if isinstance(artifact, Artifact) else Artifact.load(artifact)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    precision = precision or DEFAULT_PRECISION[backend]
    if backend == "torch":
        if precision != "fp32":
            raise ValueError(f"torch backend runs fp32 only, got precision {precision!r}")
        from policies.runtime.torch_backend import TorchRunner

        return TorchRunner(art, name, threads=threads, device=device)
    if backend == "onnxruntime":
        from policies.runtime.onnxruntime_backend import OnnxRuntimeRunner

        return OnnxRuntimeRunner(art, name, precision=precision, threads=threads, device=device)
    from policies.runtime.tensorrt_backend import TensorRTRunner

    return TensorRTRunner(art, name, precision=precision, cache_dir=cache_dir)

"""TensorRT backend: an engine built from the artifact's ONNX graph, cached on disk.

The cache file name holds everything that makes an engine invalid when it changes: the ONNX file's
SHA-256, the TensorRT version, the GPU's compute capability and the precision. Engines are written to a
temporary file and renamed, so a crash mid-build never leaves a truncated engine that a later start would
load. Targets TensorRT 10.x (the `tensorrt` extra pins it: TensorRT 11 removed the FP16 builder flag).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from policies.artifact import Artifact
from policies.files import write_atomic
from policies.runtime.base import BackendUnavailable
from policies.tensorrt_compat import tensorrt_problems

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agent" / "tensorrt"
MAX_BATCH = 16  # upper bound of the engine's dynamic batch profile


def require_tensorrt() -> tuple[object, object]:
    """Import tensorrt and torch with CUDA, or raise BackendUnavailable saying what is missing."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is a core dependency
        raise BackendUnavailable(f"tensorrt backend needs torch for CUDA buffers: {err}") from None
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            "tensorrt backend needs a CUDA GPU, and torch.cuda.is_available() is False here"
        )
    try:
        import tensorrt as trt
    except ImportError:
        raise BackendUnavailable(
            "tensorrt backend needs the TensorRT Python package: pip install 'agent-stack[tensorrt]'"
        ) from None
    if not trt.__version__.startswith("10."):
        raise BackendUnavailable(f"tensorrt backend supports TensorRT 10.x, found {trt.__version__}")
    return trt, torch


def engine_cache_path(cache_dir: Path, model: str, onnx_sha256: str, trt_version: str,
                      capability: tuple[int, int], precision: str) -> Path:  # fmt: skip
    """Where the engine for this (graph, TensorRT, GPU, precision) combination lives."""
    cc = f"sm{capability[0]}{capability[1]}"
    return cache_dir / f"{model}-{onnx_sha256[:16]}-trt{trt_version}-{cc}-{precision}.engine"


class TensorRTRunner:
    """Run one artifact graph through a cached TensorRT engine, batch size 1..MAX_BATCH."""

    backend = "tensorrt"

    def __init__(self, artifact: Artifact, name: str, precision: str = "fp16",
                 cache_dir: Path | None = None) -> None:  # fmt: skip
        if precision not in ("fp16", "fp32"):
            raise ValueError(f"tensorrt precision must be fp16 or fp32, got {precision!r}")
        trt, torch = require_tensorrt()
        self._trt, self._torch = trt, torch
        self.precision = precision
        entry = artifact.model(name)
        onnx_path = artifact.path(entry["onnx"])
        cache = engine_cache_path(
            Path(cache_dir or DEFAULT_CACHE), name, artifact.sha256(entry["onnx"]), trt.__version__,
            torch.cuda.get_device_capability(), precision,
        )  # fmt: skip
        self.logger = trt.Logger(trt.Logger.WARNING)
        if not cache.is_file():
            write_atomic(cache, self._build(onnx_path, entry["inputs"]))
        self.engine = trt.Runtime(self.logger).deserialize_cuda_engine(cache.read_bytes())
        if self.engine is None:
            raise RuntimeError(f"{cache}: TensorRT could not deserialize the engine; delete it to rebuild")
        self.engine_path = cache
        self.context = self.engine.create_execution_context()
        self.stream = torch.cuda.Stream()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        mode = trt.TensorIOMode.INPUT
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == mode]
        self.output_names = [n for n in names if self.engine.get_tensor_mode(n) != mode]

    def _build(self, onnx_path: Path, inputs: list[dict]) -> bytes:
        trt = self._trt
        log.info("building TensorRT %s engine from %s (once; cached afterwards)", self.precision, onnx_path)
        builder = trt.Builder(self.logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(onnx_path.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            hints = tensorrt_problems(onnx_path)  # the CPU-side check names the ops and types at fault
            raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}; graph check: {hints}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
        if self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        for spec in inputs:
            dims = [d if isinstance(d, int) else None for d in spec["shape"]]
            lo, opt, hi = ([b if d is None else d for d in dims] for b in (1, 1, MAX_BATCH))
            profile.set_shape(spec["name"], lo, opt, hi)
        config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError(f"TensorRT failed to build an engine from {onnx_path}")
        return bytes(plan)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        batch = next(iter(feeds.values())).shape[0]
        if batch > MAX_BATCH:
            raise ValueError(f"tensorrt backend: batch {batch} exceeds the engine profile's {MAX_BATCH}")
        with torch.cuda.stream(self.stream):
            keep = []
            for name in self.input_names:
                t = torch.from_numpy(np.ascontiguousarray(feeds[name])).cuda(non_blocking=True)
                keep.append(t)
                self.context.set_input_shape(name, tuple(t.shape))
                self.context.set_tensor_address(name, t.data_ptr())
            outs = {}
            for name in self.output_names:
                shape = tuple(self.context.get_tensor_shape(name))
                dtype = _TORCH_DTYPES[self.engine.get_tensor_dtype(name).name]
                outs[name] = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
                self.context.set_tensor_address(name, outs[name].data_ptr())
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT execution failed")
        self.stream.synchronize()
        return {n: t.cpu().numpy() for n, t in outs.items()}


# TensorRT DataType name -> torch dtype attribute.
_TORCH_DTYPES = {"FLOAT": "float32", "HALF": "float16", "INT32": "int32", "INT64": "int64",
                 "INT8": "int8", "UINT8": "uint8", "BOOL": "bool"}  # fmt: skip

"""ONNX Runtime backend: CPU by default, CUDA execution provider when the installed build has it."""

from __future__ import annotations

import numpy as np

from policies.artifact import Artifact
from policies.runtime.base import BackendUnavailable


class OnnxRuntimeRunner:
    """One InferenceSession over the artifact's fp32 or int8 graph."""

    backend = "onnxruntime"

    def __init__(
        self,
        artifact: Artifact,
        name: str,
        precision: str = "fp32",
        threads: int | None = None,
        device: str = "auto",
    ) -> None:
        import onnxruntime as ort

        entry = artifact.model(name)
        if precision == "int8":
            if "int8" not in entry:
                raise BackendUnavailable(
                    f"{artifact.root}: no INT8 {name} graph; export with `agent export --int8`"
                )
            filename = entry["int8"]
        elif precision == "fp32":
            filename = entry["onnx"]
        else:
            raise ValueError(f"onnxruntime precision must be fp32 or int8, got {precision!r}")
        self.precision = precision
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        # Idle workers sleep instead of spinning: a student is two sessions (encoder, head) called back to
        # back, and in the graph several nodes share the cores; a spinning pool steals them from the others.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = ort.get_available_providers()
        providers: list = ["CPUExecutionProvider"]
        # auto or cuda[:N]: CUDA where the provider is installed, else the CPU (`providers` says which)
        if device != "cpu" and "CUDAExecutionProvider" in available:
            index = int(device.partition(":")[2] or 0)
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
        self.session = ort.InferenceSession(str(artifact.path(filename)), opts, providers=providers)
        self.providers = self.session.get_providers()
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, outs, strict=True))

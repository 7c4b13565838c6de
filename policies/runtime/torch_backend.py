"""Eager PyTorch backend: the reference every other backend is compared against."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from policies.artifact import Artifact
from policies.state_predictor import StatePredictor
from policies.student_from_artifact import build_student
from policies.torch_files import load_torch


class TorchRunner:
    """Rebuild the exported module from the manifest's config and weights and run it eagerly."""

    backend = "torch"
    precision = "fp32"

    def __init__(
        self, artifact: Artifact, name: str, threads: int | None = None, device: str = "auto"
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.device = torch.device("cpu" if device == "auto" else device)  # the reference: CPU unless asked
        self.module = build_module(artifact, name).eval().to(self.device)
        self.input_names = [i["name"] for i in artifact.model(name)["inputs"]]
        self.output_names = [o["name"] for o in artifact.model(name)["outputs"]]

    @torch.inference_mode()
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.device) for n in self.input_names]
        outs = self.module(*args)
        return {n: o.cpu().numpy() for n, o in zip(self.output_names, outs, strict=True)}


def build_module(artifact: Artifact, name: str) -> nn.Module:
    """Deployed module `name` (encoder | policy | predictor) with the artifact's weights (weights_only)."""
    if name == "predictor":
        module = StatePredictor(artifact.predictor_config)
        module.load_state_dict(load_torch(artifact.weights.predictor))
        return module
    student = build_student(artifact)
    return student.deployed_encoder() if name == "encoder" else student.deployed_head()

"""Student policy: multimodal encoder + hybrid-action head, and its deployable (exportable) form."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import Field
from torch import nn

from policies.config import Config
from policies.encoder import EncoderConfig, StateEncoder
from policies.hybrid_head import HeadConfig, HybridActionHead, HybridDist
from policies.skill_contract import SkillContract


class StudentConfig(Config):
    """Student policy = encoder + head."""

    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    head: HeadConfig = Field(default_factory=HeadConfig)


@dataclass
class StudentOutput:
    """embedding (B, E), gates (B, 4), dist over the hybrid action."""

    embedding: torch.Tensor
    gates: torch.Tensor
    dist: HybridDist


class StudentPolicy(nn.Module):
    """Student observations -> state embedding -> hybrid action distribution."""

    def __init__(self, cfg: StudentConfig, contract: SkillContract) -> None:
        super().__init__()
        self.cfg = cfg
        self.contract = contract
        self.encoder = StateEncoder(cfg.encoder, contract.num_skills)
        self.head = HybridActionHead(cfg.encoder.embed_dim, contract, cfg.head)

    def forward(
        self,
        image: torch.Tensor,
        imu: torch.Tensor,
        skill: torch.Tensor,
        progress: torch.Tensor,
        step: torch.Tensor,
    ) -> StudentOutput:
        embedding, gates = self.encoder(image, imu, skill, progress, step)
        return StudentOutput(embedding, gates, self.head(embedding))

    def deployed_encoder(self) -> DeployedEncoder:
        """Exportable encoder: raw observations -> (state_embedding, gates)."""
        return DeployedEncoder(self)

    def deployed_head(self) -> DeployedHead:
        """Exportable deterministic head: state_embedding -> (argmax skill, mean parameters in bounds)."""
        return DeployedHead(self)


class DeployedEncoder(nn.Module):
    """Encoder for export and runtimes; declares its I/O names, shapes and dummy inputs.

    It is a separate graph from the head so that the ROS encoder node can publish the embedding and the
    policy and OPD nodes can act on it.
    """

    input_names = ("image", "imu", "skill", "progress", "step")
    output_names = ("state_embedding", "gates")

    def __init__(self, policy: StudentPolicy) -> None:
        super().__init__()
        self.encoder = policy.encoder
        self.cfg = policy.cfg.encoder
        self.num_skills = policy.contract.num_skills

    def forward(
        self,
        image: torch.Tensor,
        imu: torch.Tensor,
        skill: torch.Tensor,
        progress: torch.Tensor,
        step: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(image, imu, skill, progress, step)

    def io_spec(self) -> dict[str, list[dict]]:
        """Names, shapes ('batch' is dynamic), dtypes and meaning of every input and output."""
        ec, b = self.cfg, "batch"
        return {
            "inputs": [
                _io("image", [b, ec.image.height, ec.image.width, 3], "uint8",
                    "RGB camera frame, HWC, raw 0..255"),
                _io("imu", [b, ec.imu.window, 6], "float32",
                    "IMU window, oldest sample first: accel xyz m/s^2, gyro xyz rad/s"),
                _io("skill", [b], "int64", f"active skill id in [0, {self.num_skills - 1}]"),
                _io("progress", [b], "float32", "task progress in [0, 1]"),
                _io("step", [b], "float32", "control steps since the episode start"),
            ],
            "outputs": [
                _io("state_embedding", [b, ec.embed_dim], "float32", "state embedding"),
                _io("gates", [b, 4], "float32", "modality gates in (0, 1): image, imu, skill, time"),
            ],
        }  # fmt: skip

    def dummy_inputs(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        """Inputs of the right shapes and dtypes for tracing."""
        ec = self.cfg
        return (
            torch.zeros(batch, ec.image.height, ec.image.width, 3, dtype=torch.uint8),
            torch.zeros(batch, ec.imu.window, 6),
            torch.zeros(batch, dtype=torch.int64),
            torch.zeros(batch),
            torch.zeros(batch),
        )


class DeployedHead(nn.Module):
    """Deterministic hybrid-action head for export: argmax skill, tanh-mapped mean parameters."""

    input_names = ("state_embedding",)
    output_names = ("skill_logits", "action_skill", "action_params")

    def __init__(self, policy: StudentPolicy) -> None:
        super().__init__()
        self.head = policy.head
        self.embed_dim = policy.cfg.encoder.embed_dim

    def forward(self, state_embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = self.head(state_embedding)
        skill, params = self.head.deterministic(dist)
        return dist.logits, skill, params

    def io_spec(self) -> dict[str, list[dict]]:
        k, p, b = self.head.num_skills, self.head.num_params, "batch"
        return {
            "inputs": [_io("state_embedding", [b, self.embed_dim], "float32", "state embedding")],
            "outputs": [
                _io("skill_logits", [b, k], "float32", "skill logits"),
                _io("action_skill", [b], "int64", "argmax skill id"),
                _io("action_params", [b, p], "float32",
                    "parameters in contract slot order; slots of other skills hold their defaults"),
            ],
        }  # fmt: skip

    def dummy_inputs(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, self.embed_dim),)


def _io(name: str, shape: list, dtype: str, description: str) -> dict:
    return {"name": name, "shape": shape, "dtype": dtype, "description": description}

"""Student policy: multimodal encoder + hybrid-action head, and its deployable (exportable) form."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from policies.config import Config
from policies.encoder import EncoderConfig, StateEncoder
from policies.frame_memory import FrameMemory, MemoryConfig
from policies.hybrid_head import HeadConfig, HybridActionHead, HybridDist
from policies.skill_contract import SkillContract
from policies.student_input import INPUT_NAMES


class StudentConfig(Config):
    """Student policy = encoder + head, the head on a window of the last frames' embeddings."""

    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    head: HeadConfig = Field(default_factory=HeadConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)


@dataclass
class StudentOutput:
    """embedding (B, E), gates (B, 4), dist over the hybrid action."""

    embedding: torch.Tensor
    gates: torch.Tensor
    dist: HybridDist


class StudentPolicy(nn.Module):
    """Student observations -> state embedding; the last `memory.frames` embeddings -> hybrid action
    distribution."""

    def __init__(self, cfg: StudentConfig, contract: SkillContract) -> None:
        super().__init__()
        self.cfg = cfg
        self.contract = contract
        self.encoder = StateEncoder(cfg.encoder, contract.num_skills)
        self.head = HybridActionHead(cfg.encoder.embed_dim, contract, cfg.head)
        # none for a one-frame head: its weights are those of a student without memory
        self.memory = FrameMemory(cfg.encoder.embed_dim, cfg.memory) if cfg.memory.frames > 1 else None

    @property
    def memory_frames(self) -> int:
        """Embeddings the head acts on (W)."""
        return self.cfg.memory.frames

    def head_input(self, frames: torch.Tensor) -> torch.Tensor:
        """Window of embeddings (B, W, E), oldest first, zero rows before the episode's first frame -> what
        the head acts on (B, E): the newest embedding, corrected by the memory when there is one."""
        return frames[:, -1] if self.memory is None else self.memory(frames)

    def act_dist(self, frames: torch.Tensor) -> HybridDist:
        """Window of embeddings (B, W, E), as `head_input` -> hybrid action distribution."""
        return self.head(self.head_input(frames))

    def forward(
        self,
        image: torch.Tensor,
        imu: torch.Tensor,
        skill: torch.Tensor,
        progress: torch.Tensor,
        step: torch.Tensor,
    ) -> StudentOutput:
        """One frame alone: the head's window holds only it (after zero rows, as at an episode's start)."""
        embedding, gates = self.encoder(image, imu, skill, progress, step)
        frames = F.pad(embedding[:, None], (0, 0, self.memory_frames - 1, 0))  # (B, W, E)
        return StudentOutput(embedding, gates, self.act_dist(frames))

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

    input_names = INPUT_NAMES
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
    """Deterministic hybrid-action head for export: argmax skill, tanh-mapped mean parameters.

    Its input is the newest embedding (B, E) for a one-frame head, else the window (B, W, E).
    """

    output_names = ("skill_logits", "action_skill", "action_params")

    def __init__(self, policy: StudentPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.head = policy.head
        self.embed_dim = policy.cfg.encoder.embed_dim
        self.frames = policy.memory_frames
        self.input_names = ("state_embedding",) if self.frames == 1 else ("frames",)

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = self.policy.act_dist(inputs[:, None] if self.frames == 1 else inputs)
        skill, params = self.head.deterministic(dist)
        return dist.logits, skill, params

    def io_spec(self) -> dict[str, list[dict]]:
        k, p, b = self.head.num_skills, self.head.num_params, "batch"
        if self.frames == 1:
            inputs = [_io("state_embedding", [b, self.embed_dim], "float32", "state embedding")]
        else:
            inputs = [_io("frames", [b, self.frames, self.embed_dim], "float32",
                          "state embeddings of the last frames, oldest first; zero rows before the "
                          "episode's first frame")]  # fmt: skip
        return {
            "inputs": inputs,
            "outputs": [
                _io("skill_logits", [b, k], "float32", "skill logits"),
                _io("action_skill", [b], "int64", "argmax skill id"),
                _io("action_params", [b, p], "float32",
                    "parameters in contract slot order; slots of other skills hold their defaults"),
            ],
        }  # fmt: skip

    def dummy_inputs(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        shape = (batch, self.embed_dim) if self.frames == 1 else (batch, self.frames, self.embed_dim)
        return (torch.zeros(*shape),)


def _io(name: str, shape: list, dtype: str, description: str) -> dict:
    return {"name": name, "shape": shape, "dtype": dtype, "description": description}

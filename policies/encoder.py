"""Multimodal state encoder: camera + IMU window + active skill + task time -> state embedding."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from policies.config import Config
from policies.fusion import MODALITIES, FusionConfig, GatedFusion
from policies.image_encoder import ImageConfig, ImageEncoder
from policies.imu_encoder import ImuConfig, ImuEncoder
from policies.time_encoding import TimeConfig, TimeEncoder


class EncoderConfig(Config):
    """Encoder: one sub-config per branch plus the output width."""

    image: ImageConfig = Field(default_factory=ImageConfig)
    imu: ImuConfig = Field(default_factory=ImuConfig)
    time: TimeConfig = Field(default_factory=TimeConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    embed_dim: int = Field(256, ge=8, le=4096)  # width of the state embedding


class StateEncoder(nn.Module):
    """Encode one time step of student observations.

    Shapes:
        image (B, H, W, 3) uint8 RGB; imu (B, W, 6) float32, oldest sample first, [m/s^2, rad/s];
        skill (B,) int64 active skill id; progress (B,) float32 in [0, 1]; step (B,) float32 step index
        -> embedding (B, E), gates (B, 4) in order `MODALITIES`.
    """

    def __init__(self, cfg: EncoderConfig, num_skills: int) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.fusion.dim
        self.image = ImageEncoder(cfg.image, d)
        self.imu = ImuEncoder(cfg.imu, d)
        self.skill = nn.Embedding(num_skills, d)
        self.time = TimeEncoder(cfg.time, d)
        self.fusion = GatedFusion(cfg.fusion, cfg.embed_dim)

    @property
    def weights_source(self) -> str:
        return self.image.weights_source

    def forward(
        self,
        image: torch.Tensor,
        imu: torch.Tensor,
        skill: torch.Tensor,
        progress: torch.Tensor,
        step: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = [
            self.image(image),  # (B, N_img, D)
            self.imu(imu),  # (B, N_imu, D)
            self.skill(skill).unsqueeze(1),  # (B, 1, D)
            self.time(progress, step),  # (B, 1, D)
        ]
        assert len(tokens) == len(MODALITIES)
        return self.fusion(tokens)

"""IMU branch: a 1D CNN over a sliding window of accelerometer and gyroscope samples."""

from __future__ import annotations

import torch
from pydantic import Field, field_validator
from torch import nn

from policies.config import Config

IMU_CHANNELS = ("accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z")


class ImuConfig(Config):
    """IMU window and 1D-CNN."""

    window: int = Field(100, ge=8, le=2000)  # samples per window, oldest first
    rate_hz: float = Field(200.0, gt=0)  # IMU sample rate the window was trained at, Hz
    accel_scale: float = Field(9.81, gt=0)  # accel divided by this inside the graph, m/s^2
    gyro_scale: float = Field(2.0, gt=0)  # gyro divided by this inside the graph, rad/s
    conv_channels: list[int] = Field(default_factory=lambda: [32, 64, 128], min_length=1)  # per conv layer
    kernel: int = Field(5, ge=1, le=31)  # temporal kernel size, samples

    @field_validator("conv_channels")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if min(v) <= 0:
            raise ValueError(f"channel counts must be > 0, got {v}")
        return v

    @property
    def num_tokens(self) -> int:
        """Time steps left after the stride-2 convolutions."""
        n = self.window
        for _ in self.conv_channels:
            n = (n + 2 * (self.kernel // 2) - self.kernel) // 2 + 1
        return n

    @property
    def window_s(self) -> float:
        return self.window / self.rate_hz


class ImuEncoder(nn.Module):
    """IMU window -> temporal tokens. Shape: (B, W, 6) float32 [m/s^2, rad/s] -> (B, T, dim)."""

    def __init__(self, cfg: ImuConfig, dim: int) -> None:
        super().__init__()
        if cfg.num_tokens < 1:
            raise ValueError(f"imu.window {cfg.window} is too short for {len(cfg.conv_channels)} conv layers")
        layers: list[nn.Module] = []
        c_in = len(IMU_CHANNELS)
        for c_out in cfg.conv_channels:
            layers += [nn.Conv1d(c_in, c_out, cfg.kernel, stride=2, padding=cfg.kernel // 2), nn.GELU()]
            c_in = c_out
        self.cnn = nn.Sequential(*layers)
        self.proj = nn.Linear(c_in, dim)
        self.pos = nn.Parameter(torch.zeros(1, cfg.num_tokens, dim))
        nn.init.normal_(self.pos, std=0.02)
        scale = [cfg.accel_scale] * 3 + [cfg.gyro_scale] * 3
        self.register_buffer("inv_scale", 1.0 / torch.tensor(scale).view(1, 1, 6), persistent=False)

    def forward(self, imu: torch.Tensor) -> torch.Tensor:
        x = (imu * self.inv_scale).transpose(1, 2)  # (B, W, 6) -> (B, 6, W)
        x = self.cnn(x)  # (B, C, T)
        return self.proj(x.transpose(1, 2)) + self.pos  # (B, T, dim)

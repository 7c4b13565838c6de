"""Sinusoidal encoding of task progress and step index (Vaswani et al. 2017, section 3.5)."""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import nn

from policies.config import Config


class TimeConfig(Config):
    """Time/progress encoding."""

    frequencies: int = Field(8, ge=1, le=64)  # sinusoid frequencies per scalar
    max_steps: float = Field(2000.0, gt=0)  # step index that maps to half a period of the slowest sinusoid


class TimeEncoder(nn.Module):
    """(progress in [0, 1], step index) -> one token. Shape: (B,), (B,) -> (B, 1, dim)."""

    def __init__(self, cfg: TimeConfig, dim: int) -> None:
        super().__init__()
        # Angular frequencies pi * 2^k, k = 0..F-1: coarse and fine phase together. Must not change to
        # 2 pi * 2^k: then every sinusoid completes whole periods over [0, 1], so t = 0 and t = 1 (task
        # start and end, step 0 and step max_steps) give the same token. With the slowest at pi, its
        # (sin, cos) is half a circle over [0, 1] and encodes t injectively on its own.
        freqs = math.pi * 2.0 ** torch.arange(cfg.frequencies, dtype=torch.float32)
        self.register_buffer("freqs", freqs, persistent=False)
        self.max_steps = cfg.max_steps
        self.mlp = nn.Sequential(nn.Linear(4 * cfg.frequencies, dim), nn.GELU(), nn.Linear(dim, dim))

    def features(self, progress: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """Raw sinusoid features before the MLP. Shape: (B,), (B,) -> (B, 4F)."""
        t = torch.stack([progress, step / self.max_steps], dim=-1)  # (B, 2)
        phase = t.unsqueeze(-1) * self.freqs  # (B, 2, F)
        return torch.cat([phase.sin(), phase.cos()], dim=-1).flatten(1)  # (B, 2, 2F) -> (B, 4F)

    def forward(self, progress: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.features(progress, step)).unsqueeze(1)  # (B, 1, dim)

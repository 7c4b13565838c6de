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
    max_steps: float = Field(2000.0, gt=0)  # step index that maps to one full period of the slowest sinusoid


class TimeEncoder(nn.Module):
    """(progress in [0, 1], step index) -> one token. Shape: (B,), (B,) -> (B, 1, dim)."""

    def __init__(self, cfg: TimeConfig, dim: int) -> None:
        super().__init__()
        # Geometric frequencies from 1 to 2^(F-1) cycles per unit: coarse and fine phase together.
        freqs = 2.0 ** torch.arange(cfg.frequencies, dtype=torch.float32) * (2 * math.pi)
        self.register_buffer("freqs", freqs, persistent=False)
        self.max_steps = cfg.max_steps
        self.mlp = nn.Sequential(nn.Linear(4 * cfg.frequencies, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, progress: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        t = torch.stack([progress, step / self.max_steps], dim=-1)  # (B, 2)
        phase = t.unsqueeze(-1) * self.freqs  # (B, 2, F)
        enc = torch.cat([phase.sin(), phase.cos()], dim=-1).flatten(1)  # (B, 4F)
        return self.mlp(enc).unsqueeze(1)  # (B, 1, dim)

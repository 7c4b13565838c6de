"""Running mean/variance normalisation of observations, stored as buffers so it travels with the weights."""

from __future__ import annotations

import torch
from torch import nn


class RunningNorm(nn.Module):
    """x -> clip((x - mean) / std). Shape: (B, D) -> (B, D). Statistics change only through `update`."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch into the statistics (Chan et al. parallel variance). Shape: (B, D)."""
        if x.shape[0]:
            self.merge(x.shape[0], x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, n: float | torch.Tensor, b_mean: torch.Tensor, b_var: torch.Tensor) -> None:
        """Merge the statistics of `n` rows (their mean and biased variance, each (D,)) into these: a batch,
        or another norm's statistics (one rank's, in a job of several)."""
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * (n / total).float()
        m2 = self.var * self.count.float() + b_var * n + delta**2 * (self.count * n / total).float()
        self.var = m2 / total.float()
        self.count = total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

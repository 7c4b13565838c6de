"""Hybrid-action head: a discrete skill plus the continuous parameters of every skill, inside contract bounds.

Discrete part: skill logits; Gumbel-softmax (straight-through) when training, argmax when deployed.
Continuous part: a Gaussian per parameter slot in pre-squash space u, mapped into the slot's bounds by
    param = low + (high - low) * (tanh(u) + 1) / 2
so every produced parameter lies inside the contract whatever the network outputs. Slots of the skills
not chosen are replaced by their defaults ("masked").

Log-probabilities of both parts are exposed for the hybrid SAC teacher (Delalleau et al. 2019,
"Discrete and Continuous Action Representation for Practical RL in Video Games") and for distillation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from policies.config import Config
from policies.skill_contract import SkillContract

_LOG_2 = math.log(2.0)
_ATANH_LIMIT = 1.0 - 1e-6  # keeps atanh finite for parameters exactly on a bound


def mlp(in_dim: int, hidden: list[int]) -> tuple[nn.Sequential, int]:
    """Linear+ELU layers of the given widths (none: identity); returns the stack and its output width."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ELU()]
        d = h
    return nn.Sequential(*layers), d


class HeadConfig(Config):
    """Policy head MLP and distribution limits."""

    hidden: list[int] = Field(default_factory=lambda: [256, 256])  # MLP widths
    log_std_min: float = -5.0  # lower clamp of the pre-squash log std
    log_std_max: float = 1.0  # upper clamp of the pre-squash log std
    gumbel_tau: float = Field(1.0, gt=0.0)  # Gumbel-softmax temperature used in training

    @model_validator(mode="after")
    def _std_range(self) -> HeadConfig:
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"log_std_min ({self.log_std_min}) must be < log_std_max ({self.log_std_max})")
        return self


@dataclass
class HybridDist:
    """Distribution parameters. Shapes: logits (B, K); mean, log_std (B, P) in pre-squash space."""

    logits: torch.Tensor
    mean: torch.Tensor
    log_std: torch.Tensor


@dataclass
class HybridSample:
    """A sampled action with its log-probabilities.

    skill_onehot (B, K) is straight-through Gumbel-softmax (hard values, soft gradients); params (B, P) has
    every slot sampled (differentiable, reparameterised), with slots of other skills still sampled so that a
    critic can score all skills; logp_skill (B,); logp_slots (B, P) per-slot log-densities of params.
    """

    skill: torch.Tensor
    skill_onehot: torch.Tensor
    params: torch.Tensor
    logp_skill: torch.Tensor
    logp_slots: torch.Tensor


class HybridActionHead(nn.Module):
    """features (B, F) -> HybridDist over (skill, params) of a skill contract."""

    def __init__(self, in_dim: int, contract: SkillContract, cfg: HeadConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or HeadConfig()
        self.cfg = cfg
        self.num_skills = contract.num_skills
        self.num_params = contract.num_params
        self.trunk, d = mlp(in_dim, cfg.hidden)
        self.logits = nn.Linear(d, self.num_skills)
        self.mean = nn.Linear(d, self.num_params)
        self.log_std = nn.Linear(d, self.num_params)
        lay = contract.layout
        owner = torch.as_tensor(lay.owner)
        self.register_buffer("low", torch.as_tensor(lay.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(lay.high, dtype=torch.float32))
        self.register_buffer("defaults", torch.as_tensor(lay.defaults, dtype=torch.float32))
        # owner_onehot[p, k] = 1 if slot p belongs to skill k. Shape: (P, K).
        self.register_buffer(
            "owner_onehot", F.one_hot(owner, self.num_skills).float().reshape(-1, self.num_skills)
        )

    def forward(self, features: torch.Tensor) -> HybridDist:
        h = self.trunk(features)
        log_std = self.log_std(h).clamp(self.cfg.log_std_min, self.cfg.log_std_max)
        return HybridDist(self.logits(h), self.mean(h), log_std)

    # Bounds mapping. The formula is the contract's: it must not change without re-exporting models.
    def to_bounds(self, u: torch.Tensor) -> torch.Tensor:
        """Pre-squash u (B, P) -> params (B, P) in [low, high]."""
        return self.low + (self.high - self.low) * (torch.tanh(u) + 1.0) / 2.0

    def from_bounds(self, params: torch.Tensor) -> torch.Tensor:
        """Inverse of `to_bounds`, clamped so that params on a bound stay finite. Shape: (B, P)."""
        a = 2.0 * (params - self.low) / (self.high - self.low) - 1.0
        return torch.atanh(a.clamp(-_ATANH_LIMIT, _ATANH_LIMIT))

    def slot_mask(self, skill: torch.Tensor) -> torch.Tensor:
        """Slots owned by each chosen skill. Shape: (B,) int64 -> (B, P) float."""
        return F.one_hot(skill, self.num_skills).float() @ self.owner_onehot.T

    def per_skill(self, slot_values: torch.Tensor) -> torch.Tensor:
        """Sum per-slot values over each skill's slots. Shape: (B, P) -> (B, K)."""
        return slot_values @ self.owner_onehot

    def mask_params(self, skill: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """Keep the chosen skill's slots, put defaults elsewhere. Shape: (B,), (B, P) -> (B, P)."""
        mask = self.slot_mask(skill)
        return mask * params + (1.0 - mask) * self.defaults

    def deterministic(self, dist: HybridDist) -> tuple[torch.Tensor, torch.Tensor]:
        """Deployed action: argmax skill and the mean parameters. Shapes: (B,) int64, (B, P)."""
        skill = dist.logits.argmax(dim=-1)
        return skill, self.mask_params(skill, self.to_bounds(dist.mean))

    def sample(self, dist: HybridDist, tau: float | None = None) -> HybridSample:
        """Training action: straight-through Gumbel-softmax skill and reparameterised parameters."""
        tau = self.cfg.gumbel_tau if tau is None else tau
        onehot = F.gumbel_softmax(dist.logits, tau=tau, hard=True)  # (B, K)
        skill = onehot.argmax(dim=-1)
        u = dist.mean + dist.log_std.exp() * torch.randn_like(dist.mean)  # (B, P)
        logp_skill = (F.log_softmax(dist.logits, dim=-1) * onehot.detach()).sum(-1)
        return HybridSample(skill, onehot, self.to_bounds(u), logp_skill, self._slot_log_prob(dist, u))

    def log_prob(
        self, dist: HybridDist, skill: torch.Tensor, params: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of an action: (log pi(skill), summed log p of the skill's slots), each (B,)."""
        logp_skill = F.log_softmax(dist.logits, dim=-1).gather(1, skill[:, None]).squeeze(1)
        slots = self._slot_log_prob(dist, self.from_bounds(params))
        return logp_skill, (slots * self.slot_mask(skill)).sum(-1)

    def entropy_skill(self, dist: HybridDist) -> torch.Tensor:
        """Entropy of the skill distribution. Shape: (B,)."""
        logp = F.log_softmax(dist.logits, dim=-1)
        return -(logp.exp() * logp).sum(-1)

    def _slot_log_prob(self, dist: HybridDist, u: torch.Tensor) -> torch.Tensor:
        """log density of params = to_bounds(u) under the squashed Gaussian. Shape: (B, P)."""
        std = dist.log_std.exp()
        gauss = -0.5 * ((u - dist.mean) / std) ** 2 - dist.log_std - 0.5 * math.log(2 * math.pi)
        log_dtanh = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2), stable form
        log_scale = torch.log((self.high - self.low) / 2.0)
        return gauss - log_dtanh - log_scale

"""Teacher policy: privileged state -> hybrid action. Trained by hybrid SAC in simulation, frozen for OPD."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field
from torch import nn

from policies.config import Config
from policies.hybrid_head import HeadConfig, HybridActionHead, HybridDist, mlp
from policies.running_norm import RunningNorm
from policies.skill_contract import SkillContract


class TeacherConfig(Config):
    """Teacher actor."""

    hidden: list[int] = Field(default_factory=lambda: [256, 256])  # MLP widths, units
    head: HeadConfig = Field(default_factory=lambda: HeadConfig(hidden=[]))  # the MLP above is the trunk
    # Part of what the policy means, so it travels with the weights (teacher.yaml): training, evaluation and
    # deployment hold each decision this long. 4 = 5 Hz on the 20 Hz loop (see opd/hybrid_sac.py, gamma).
    action_repeat: int = Field(4, ge=1)  # control periods each decision is held, periods


def teacher_features(privileged: np.ndarray, skill: np.ndarray, num_skills: int) -> np.ndarray:
    """Teacher input: privileged state and the active skill, one-hot. Shape: (N, Dq), (N,) -> (N, Dq + K)."""
    onehot = np.eye(num_skills, dtype=np.float32)[np.asarray(skill, dtype=np.int64)]
    return np.concatenate([np.asarray(privileged, dtype=np.float32), onehot], axis=1)


class TeacherPolicy(nn.Module):
    """features (B, F) -> HybridDist; observation normalisation inside, updated only while training."""

    def __init__(self, obs_dim: int, contract: SkillContract, cfg: TeacherConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or TeacherConfig()
        self.cfg = cfg
        self.obs_dim = obs_dim
        self.contract = contract
        self.norm = RunningNorm(obs_dim)
        self.trunk, d = mlp(obs_dim, cfg.hidden)
        self.head = HybridActionHead(d, contract, cfg.head)

    def forward(self, features: torch.Tensor) -> HybridDist:
        return self.head(self.trunk(self.norm(features)))

    @torch.no_grad()
    def act(self, features: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Numpy in, numpy out: skill (N,) int64, params (N, P) within contract bounds."""
        dist = self(torch.as_tensor(features, dtype=torch.float32))
        if deterministic:
            skill, params = self.head.deterministic(dist)
        else:
            s = self.head.sample(dist)
            skill, params = s.skill, self.head.mask_params(s.skill, s.params)
        return skill.numpy(), params.double().numpy()

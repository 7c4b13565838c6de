"""Uniform replay for off-policy learners, saved beside checkpoints so an interrupted job loses nothing
beyond the last save. Reward terms are stored raw: normalisation is applied when sampling, with the
statistics of that moment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from policies.files import atomic_path

_FIELDS = ("obs", "skill", "params", "terms", "next_obs", "terminated")


@dataclass
class Batch:
    """Shapes: obs/next_obs (B, F), skill (B,) int64, params (B, P), terms (B, T), terminated (B,)."""

    obs: torch.Tensor
    skill: torch.Tensor
    params: torch.Tensor
    terms: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor

    @staticmethod
    def cat(batches: list[Batch]) -> Batch:
        """One batch of the rows of several, in order. Shapes: (B_1 + ... + B_n, ...)."""
        return Batch(*(torch.cat([getattr(b, f) for b in batches]) for f in _FIELDS))

    def to(self, device: torch.device) -> Batch:
        """The same rows on `device` (no copy where they are already there)."""
        return Batch(*(getattr(self, f).to(device) for f in _FIELDS))


class ReplayBuffer:
    """Fixed-capacity ring of transitions."""

    def __init__(self, capacity: int, obs_dim: int, num_params: int, num_terms: int) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.skill = np.zeros(capacity, np.int64)
        self.params = np.zeros((capacity, num_params), np.float32)
        self.terms = np.zeros((capacity, num_terms), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.terminated = np.zeros(capacity, np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs: np.ndarray, skill: np.ndarray, params: np.ndarray, terms: np.ndarray,
            next_obs: np.ndarray, terminated: np.ndarray) -> None:  # fmt: skip
        """Append a batch of N transitions (one per env)."""
        n = len(skill)
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx], self.skill[idx], self.params[idx] = obs, skill, params
        self.terms[idx], self.next_obs[idx], self.terminated[idx] = terms, next_obs, terminated
        self.pos = int((self.pos + n) % self.capacity)
        self.size = int(min(self.size + n, self.capacity))

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        idx = rng.integers(0, self.size, size=batch_size)
        t = torch.from_numpy
        return Batch(t(self.obs[idx]), t(self.skill[idx]), t(self.params[idx]), t(self.terms[idx]),
                     t(self.next_obs[idx]), t(self.terminated[idx]))  # fmt: skip

    def save(self, path: Path) -> None:
        """Write the filled part atomically (temporary file, then rename)."""
        with atomic_path(path) as tmp:
            arrays = {f: getattr(self, f)[: self.size] for f in _FIELDS}
            np.savez(tmp, pos=self.pos, size=self.size, **arrays)

    def load(self, path: Path) -> None:
        with np.load(path) as data:
            size = int(data["size"])
            if size > self.capacity or data["obs"].shape[1:] != self.obs.shape[1:]:
                raise ValueError(f"{path}: replay buffer of shape {data['obs'].shape} does not fit this one")
            for f in _FIELDS:
                getattr(self, f)[:size] = data[f]
            self.size, self.pos = size, int(data["pos"])

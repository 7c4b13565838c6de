"""Teacher policy: privileged state -> hybrid action. Trained by hybrid SAC in simulation, frozen for OPD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import yaml
from pydantic import Field
from torch import nn

from policies.config import Config
from policies.hybrid_head import HeadConfig, HybridActionHead, HybridDist, mlp
from policies.running_norm import RunningNorm
from policies.skill_contract import SkillContract
from policies.teacher_view import Sightings, TeacherView, ViewConfig
from policies.torch_files import load_torch


class TeacherConfig(Config):
    """Teacher actor."""

    hidden: list[int] = Field(default_factory=lambda: [256, 256])  # MLP widths, units
    head: HeadConfig = Field(default_factory=lambda: HeadConfig(hidden=[]))  # the MLP above is the trunk
    # Part of what the policy means, so it travels with the weights (teacher.yaml): training, evaluation and
    # deployment hold each decision this long. 4 = 5 Hz on the 20 Hz loop (opd/teacher/hybrid_sac.py, gamma).
    action_repeat: int = Field(4, ge=1)  # control periods each decision is held, periods
    # What it sees of the privileged state (policies/teacher_view.py); None: all of it. Also part of what
    # the policy means: a teacher trained on the camera's view acts on that view wherever it runs.
    view: ViewConfig | None = None


def teacher_features(privileged: np.ndarray, skill: np.ndarray, num_skills: int) -> np.ndarray:
    """Teacher input: privileged state and the active skill, one-hot. Shape: (N, Dq), (N,) -> (N, Dq + K)."""
    onehot = np.eye(num_skills, dtype=np.float32)[np.asarray(skill, dtype=np.int64)]
    return np.concatenate([np.asarray(privileged, dtype=np.float32), onehot], axis=1)


class TeacherPolicy(nn.Module):
    """features (B, F) -> HybridDist; observation normalisation inside, updated only while training."""

    def __init__(
        self, obs_dim: int, contract: SkillContract, cfg: TeacherConfig | None = None,
        fields: tuple[str, ...] | list[str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        cfg = cfg or TeacherConfig()
        self.cfg = cfg
        self.obs_dim = obs_dim
        self.contract = contract
        if cfg.view is not None and fields is None:
            raise ValueError("a teacher with a view needs the robot's privileged field names")
        self.view = TeacherView(cfg.view, fields) if cfg.view is not None else None
        self.norm = RunningNorm(obs_dim)
        self.trunk, d = mlp(obs_dim, cfg.hidden)
        self.head = HybridActionHead(d, contract, cfg.head)

    def new_memory(self, num_envs: int) -> Sightings | None:
        """What each caller of a teacher whose view remembers (`ViewConfig.remember`) owns: one row per env,
        reset at its episodes' starts. None for a teacher without such a view (no state to keep)."""
        return self.view.new_memory(num_envs) if self.view is not None else None

    def seen(
        self, privileged: np.ndarray, memory: Sightings | None = None, envs: np.ndarray | None = None,
        update: bool | np.ndarray = True,
    ) -> np.ndarray:  # fmt: skip
        """What it sees of privileged state(s) (..., Dq): the same shape, through its view. A remembering
        view takes (N, Dq) with the caller's `memory` (rows `envs`, `update`: `TeacherView.__call__`)."""
        if self.view is None:
            return privileged
        privileged = np.asarray(privileged)
        if self.view.remember is not None:
            return self.view(privileged, memory, envs, update)
        return self.view(privileged.reshape(-1, privileged.shape[-1])).reshape(privileged.shape)

    def seen_stream(
        self, privileged: np.ndarray, stamps: np.ndarray | None = None, starts: np.ndarray | None = None
    ) -> np.ndarray:
        """What it sees of one stream's states (T, Dq), in the order given, as a caller fed them one by
        one: each through the memory of those before it. With `stamps` (T,) a state older than one before
        it is seen but not remembered (as the OPD learner refuses it); `starts` (T,) bool: the state begins
        an episode, so the memory starts afresh there (as the learner's `begin_episode`). Offline passes
        (replay) use this."""
        privileged = np.asarray(privileged)
        if self.view is None or self.view.remember is None:
            return self.seen(privileged)
        memory = self.new_memory(1)
        out = np.empty_like(privileged)
        newest = -np.inf
        for t in range(len(privileged)):
            if starts is not None and starts[t]:
                memory.reset(np.array([0]))
                newest = -np.inf
            fresh = stamps is None or stamps[t] > newest
            out[t] = self.view(privileged[t : t + 1], memory, update=fresh)[0]
            if stamps is not None and fresh:
                newest = stamps[t]
        return out

    def features(
        self, privileged: np.ndarray, skill: np.ndarray, seen: np.ndarray | None = None,
        memory: Sightings | None = None, envs: np.ndarray | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Its input from the privileged state (N, Dq) and active skills (N,): (N, Dq + K), seen through
        its view (`seen`: `self.seen(...)` where the caller has it already; else `memory` and `envs` as
        there). Every caller that feeds it builds the input here."""
        seen = self.seen(privileged, memory, envs) if seen is None else seen
        return teacher_features(seen, skill, self.contract.num_skills)

    def forward(self, features: torch.Tensor) -> HybridDist:
        return self.head(self.trunk(self.norm(features)))

    @torch.no_grad()
    def act(self, features: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Numpy in, numpy out: skill (N,) int64, params (N, P) within contract bounds; on the device the
        policy's weights are on."""
        dist = self(torch.as_tensor(features, dtype=torch.float32, device=self.norm.mean.device))
        if deterministic:
            skill, params = self.head.deterministic(dist)
        else:
            s = self.head.sample(dist)
            skill, params = s.skill, self.head.mask_params(s.skill, s.params)
        return skill.cpu().numpy(), params.double().cpu().numpy()


def load_teacher(path: str | Path) -> TeacherPolicy:
    """A trained teacher from teacher.pt and the teacher.yaml beside it (weights only), in eval mode."""
    path = Path(path)
    meta_path = path.with_suffix(".yaml")
    if not path.is_file() or not meta_path.is_file():
        raise FileNotFoundError(f"teacher checkpoint needs {path} and {meta_path}")
    meta = yaml.safe_load(meta_path.read_text())
    contract = SkillContract.from_dict(meta["contract"], str(meta_path))
    policy = TeacherPolicy(
        int(meta["obs_dim"]),
        contract,
        TeacherConfig.from_dict(meta["teacher"], str(meta_path)),
        meta.get("privileged_fields"),
    )
    policy.load_state_dict(load_torch(path))
    return policy.eval()

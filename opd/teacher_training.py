"""Headless teacher training: hybrid SAC on privileged observations of a vectorised Gymnasium env.

Output directory layout (resumable; rerunning the same command continues from the last checkpoint):
    config.yaml                 resolved training config
    checkpoints/step_XXXXXXXXX.pt + .yaml   learner state (weights only) and the config beside it
    checkpoints/replay.npz      replay buffer at the last checkpoint
    teacher.pt, teacher.yaml    the final actor (weights only) and what is needed to rebuild it
    tb/                         TensorBoard scalars; breaker/ circuit-breaker dumps
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import yaml
from pydantic import Field

from opd.hybrid_sac import HybridSAC, SACConfig
from opd.replay_buffer import ReplayBuffer
from opd.reward_normalizer import RewardNormalizer, RewardNormConfig
from policies.config import Config
from policies.teacher_policy import TeacherConfig, TeacherPolicy, teacher_features

log = logging.getLogger(__name__)

ENV_IDS = {"mujoco": "agent/DiffBotPrivileged-v0", "isaacsim": "agent/DiffBotPrivilegedIsaac-v0"}


class TeacherTrainConfig(Config):
    """Teacher training job."""

    sim: Literal["mujoco", "isaacsim"] = "mujoco"  # simulator backend
    sim_config: str | None = None  # sim YAML (None = the backend's default)
    num_envs: int = Field(8, ge=1)  # parallel envs (Gymnasium vector API)
    vectorization: Literal["sync", "async"] = "async"  # async runs envs in worker processes
    total_steps: int = Field(400_000, ge=1)  # env steps, summed over envs
    seed: int = 0
    random_steps: int = Field(10_000, ge=0)  # uniform random actions first, env steps
    learning_starts: int = Field(5_000, ge=0)  # env steps before the first update
    updates_per_step: float = Field(0.25, gt=0)  # gradient updates per env step
    buffer_size: int = Field(500_000, ge=1)  # transitions
    checkpoint_every: int = Field(50_000, ge=1)  # env steps
    log_every: int = Field(2_000, ge=1)  # env steps between TensorBoard writes
    threads: int = Field(1, ge=1)  # torch CPU threads of the learner
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)
    sac: SACConfig = Field(default_factory=SACConfig)
    reward: RewardNormConfig = Field(default_factory=RewardNormConfig)


def make_vec_env(
    cfg: TeacherTrainConfig, num_envs: int | None = None, proxy: Path | None = None
) -> gym.vector.VectorEnv:
    """The privileged-observation env, vectorised with same-step autoreset (final obs in `info`)."""
    import sim.gym_env  # noqa: F401  registers the environments

    kwargs: dict[str, Any] = {}
    if cfg.sim_config:
        kwargs["config"] = cfg.sim_config
    if proxy is not None:
        kwargs["proxy"] = proxy
    return gym.make_vec(
        ENV_IDS[cfg.sim], num_envs=num_envs or cfg.num_envs, vectorization_mode=cfg.vectorization,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **kwargs,
    )  # fmt: skip


class TeacherTrainer:
    """Owns env, learner, buffer, normaliser and logging; `run()` trains to `total_steps`."""

    def __init__(self, cfg: TeacherTrainConfig, out_dir: Path) -> None:
        self.cfg, self.out = cfg, Path(out_dir)
        (self.out / "checkpoints").mkdir(parents=True, exist_ok=True)
        cfg.to_yaml(self.out / "config.yaml")
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.threads)
        self.rng = np.random.default_rng(cfg.seed)
        self.envs = make_vec_env(cfg)
        self.sim_cfg = self.envs.get_attr("config")[0]
        self.contract = self.envs.get_attr("contract")[0]
        space = self.envs.single_observation_space
        self.obs_dim = space["privileged"].shape[0] + self.contract.num_skills
        self.term_names = tuple(type(self.sim_cfg.task.rewards).model_fields)
        self.normalizer = RewardNormalizer(
            self.term_names, self.sim_cfg.task.rewards.model_dump(), cfg.reward, dump_dir=self.out / "breaker"
        )
        actor = TeacherPolicy(self.obs_dim, self.contract, cfg.teacher)
        self.sac = HybridSAC(actor, cfg.sac, torch.tensor(self.normalizer.scale(), dtype=torch.float32))
        self.buffer = ReplayBuffer(
            cfg.buffer_size, self.obs_dim, self.contract.num_params, len(self.term_names)
        )
        self.steps = 0
        self.episodes: deque[tuple[float, bool]] = deque(maxlen=100)  # (return, success) of recent episodes
        self._ep_return = np.zeros(cfg.num_envs)

    def features(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return teacher_features(obs["privileged"], obs["skill"], self.contract.num_skills)

    def run(self) -> Path:
        """Train (resuming if a checkpoint exists), then write teacher.pt/teacher.yaml; return teacher.pt."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from torch.utils.tensorboard import SummaryWriter

        self._resume()
        writer = SummaryWriter(str(self.out / "tb"))
        obs, _ = self.envs.reset(seed=self.cfg.seed + self.steps)
        feats = self.features(obs)
        pending_updates = 0.0
        losses: dict[str, float] = {}
        t0, steps0 = time.time(), self.steps
        cols = (TextColumn("[bold]teacher"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
        with Progress(*cols, refresh_per_second=2) as bar:
            task = bar.add_task("train", total=self.cfg.total_steps, completed=self.steps, stats="")
            while self.steps < self.cfg.total_steps:
                skill, params = self._explore(feats)
                obs, _, terminated, truncated, info = self.envs.step({"skill": skill, "params": params})
                terms = self._terms(info)
                next_feats = self._next_features(obs, info, terminated | truncated)
                tripped = self.normalizer.observe(terms, self.steps)
                self.buffer.add(feats, skill, params, terms, next_feats, terminated.astype(np.float32))
                self._track_episodes(terms, terminated | truncated, info)
                feats = self.features(obs)
                self.sac.actor.norm.update(torch.from_numpy(feats))
                self.steps += self.cfg.num_envs
                if tripped:
                    writer.add_scalar("breaker/trips", self.normalizer.trips, self.steps)
                if self.steps >= self.cfg.learning_starts:
                    pending_updates += self.cfg.num_envs * self.cfg.updates_per_step
                    while pending_updates >= 1:
                        pending_updates -= 1
                        if self.normalizer.allow_update():
                            self.sac.reward_scale = torch.tensor(self.normalizer.scale(), dtype=torch.float32)
                            losses = self.sac.update(self.buffer.sample(self.cfg.sac.batch_size, self.rng))
                if self.steps % self.cfg.log_every < self.cfg.num_envs:
                    self._log(writer, losses, (self.steps - steps0) / max(time.time() - t0, 1e-9))
                if self.steps % self.cfg.checkpoint_every < self.cfg.num_envs:
                    self.save_checkpoint()
                bar.update(task, completed=self.steps, stats=self._stats_text())
        self.save_checkpoint()
        writer.close()
        self.envs.close()
        return self.export_teacher()

    def _explore(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.steps < self.cfg.random_steps:
            lay = self.contract.layout
            skill = self.rng.integers(0, self.contract.num_skills, size=self.cfg.num_envs)
            params = self.rng.uniform(lay.low, lay.high, size=(self.cfg.num_envs, lay.size))
            return skill, params
        return self.sac.act(feats)

    def _terms(self, info: dict) -> np.ndarray:
        """Unweighted reward terms of this step, final-step values for envs that just ended. Shape: (N, T)."""
        src = info["reward_terms"]
        terms = np.stack([np.asarray(src[n], np.float64) for n in self.term_names], axis=1)
        if "final_info" in info:
            done = info["_final_info"]
            final = info["final_info"]["reward_terms"]
            terms[done] = np.stack([np.asarray(final[n])[done] for n in self.term_names], axis=1)
        return terms.astype(np.float32)

    def _next_features(self, obs: dict, info: dict, done: np.ndarray) -> np.ndarray:
        """Features of s_{t+1}; for envs that just ended, of their final observation, not the reset one."""
        feats = self.features(obs)
        if done.any():
            final = info["final_obs"]
            for i in np.nonzero(done)[0]:
                feats[i] = teacher_features(final[i]["privileged"][None], np.array([final[i]["skill"]]),
                                            self.contract.num_skills)[0]  # fmt: skip
        return feats

    def _track_episodes(self, terms: np.ndarray, done: np.ndarray, info: dict) -> None:
        self._ep_return += terms.astype(np.float64) @ self.normalizer.weights
        for i in np.nonzero(done)[0]:
            success = bool(np.asarray(info["final_info"]["success"])[i])
            self.episodes.append((float(self._ep_return[i]), success))
            self._ep_return[i] = 0.0

    def _stats_text(self) -> str:
        if not self.episodes:
            return "no episode finished yet"
        ret, succ = np.mean([e[0] for e in self.episodes]), np.mean([e[1] for e in self.episodes])
        return f"return {ret:7.2f}  success {succ:5.1%}  (last {len(self.episodes)} episodes)"

    def _log(self, writer: Any, losses: dict[str, float], sps: float) -> None:
        for k, v in losses.items():
            writer.add_scalar(k, v, self.steps)
        writer.add_scalar("perf/env_steps_per_s", sps, self.steps)
        if self.episodes:
            writer.add_scalar("episode/return", np.mean([e[0] for e in self.episodes]), self.steps)
            writer.add_scalar("episode/success_rate", np.mean([e[1] for e in self.episodes]), self.steps)
        for name, s in zip(self.term_names, self.normalizer.std, strict=True):
            writer.add_scalar(f"reward_std/{name}", s, self.steps)

    def save_checkpoint(self) -> None:
        """Learner, normaliser and counters (weights only), the config beside it, and the replay buffer."""
        ckpt_dir = self.out / "checkpoints"
        path = ckpt_dir / f"step_{self.steps:09d}.pt"
        state = {"sac": self.sac.state_dict(), "normalizer": self.normalizer.state_dict(),
                 "steps": self.steps, "rng": self.rng.bit_generator.state,
                 "torch_rng": torch.get_rng_state()}  # fmt: skip
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)
        self.cfg.to_yaml(path.with_suffix(".yaml"))
        self.buffer.save(ckpt_dir / "replay.npz")
        log.info("checkpoint %s", path)

    def _resume(self) -> None:
        ckpts = sorted((self.out / "checkpoints").glob("step_*.pt"))
        if not ckpts:
            return
        state = torch.load(ckpts[-1], weights_only=True)
        self.sac.load_state_dict(state["sac"])
        self.normalizer.load_state_dict(state["normalizer"])
        self.steps = int(state["steps"])
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        replay = self.out / "checkpoints" / "replay.npz"
        if replay.is_file():
            self.buffer.load(replay)
        log.info("resumed from %s at step %d with %d transitions", ckpts[-1], self.steps, len(self.buffer))

    def export_teacher(self) -> Path:
        """teacher.pt (actor state_dict) + teacher.yaml (what rebuilding it needs)."""
        path = self.out / "teacher.pt"
        torch.save(self.sac.actor.state_dict(), path)
        meta = {"obs_dim": self.obs_dim, "sim": self.cfg.sim, "steps": self.steps, "seed": self.cfg.seed,
                "teacher": self.cfg.teacher.model_dump(mode="json"),
                "contract": self.contract.model_dump(mode="json"),
                "privileged_fields": list(self.envs.get_attr("robot")[0].spec.privileged_fields)
                if self.cfg.vectorization == "sync" else None}  # fmt: skip
        (self.out / "teacher.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        return path

"""Seeded evaluation of a policy on the sim, with a Wilson 95% confidence interval on success."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml

from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy, teacher_features

EVAL_SEED = 10_000  # evaluation episodes use seeds EVAL_SEED + i, disjoint from training seeds


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (Wilson 1927); (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def load_teacher(path: str | Path) -> TeacherPolicy:
    """A trained teacher from teacher.pt and the teacher.yaml beside it (weights only)."""
    path = Path(path)
    meta_path = path.with_suffix(".yaml")
    if not path.is_file() or not meta_path.is_file():
        raise FileNotFoundError(f"teacher checkpoint needs {path} and {meta_path}")
    meta = yaml.safe_load(meta_path.read_text())
    contract = SkillContract.from_dict(meta["contract"], str(meta_path))
    policy = TeacherPolicy(
        int(meta["obs_dim"]), contract, TeacherConfig.from_dict(meta["teacher"], str(meta_path))
    )
    policy.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return policy.eval()


def evaluate_teacher(teacher: TeacherPolicy, episodes: int, proxy: Path | None = None,
                     sim_config: str | None = None, seed: int = EVAL_SEED) -> dict:  # fmt: skip
    """Run `episodes` seeded episodes with the greedy teacher; return the report dict."""
    import sim.gym_env as gym_env

    env = gym_env.DiffBotEnv(config=sim_config, obs_mode="privileged", proxy=proxy)
    k = teacher.contract.num_skills
    successes, returns, outcomes = 0, [], {}
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                feats = teacher_features(obs["privileged"][None], np.array([obs["skill"]]), k)
                skill, params = teacher.act(feats)
                obs, reward, terminated, truncated, info = env.step(
                    {"skill": int(skill[0]), "params": params[0]}
                )
                total += reward
                done = terminated or truncated
            successes += bool(info["success"])
            outcomes[info["outcome"]] = outcomes.get(info["outcome"], 0) + 1
            returns.append(total)
    finally:
        env.close()
    lo, hi = wilson_interval(successes, episodes)
    return {
        "episodes": episodes,
        "success_rate": successes / max(episodes, 1),
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_return": float(np.mean(returns)) if returns else 0.0,
        "sim": "mujoco",
        "proxy": proxy is not None,
        "outcomes": outcomes,
    }

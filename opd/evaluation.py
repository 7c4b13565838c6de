"""Seeded evaluation of the greedy teacher on the sim, with a Wilson 95% confidence interval on success.

Episode i always draws its layout from seed EVAL_SEED + i, whichever of the N parallel envs runs it, so a
report depends on the policy and the episode count only (for a fixed N: a row's float rounding can
depend on the batch it is computed in).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml
from gymnasium.vector import AutoresetMode

from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy, teacher_features

# Evaluation episodes use seeds EVAL_SEED + i. Training envs draw from seed + i (+ 1000 for the
# demonstrations) and continue their own generators, so no training episode repeats an evaluation one.
EVAL_SEED = 10_000


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
    """A trained teacher from teacher.pt and the teacher.yaml beside it (weights only), in eval mode."""
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


def evaluate_teacher(
    teacher: TeacherPolicy,
    episodes: int,
    proxy: Path | None = None,
    sim_config: str | Path | None = None,
    seed: int = EVAL_SEED,
    num_envs: int = 16,
) -> dict:
    """Run `episodes` seeded episodes with the greedy teacher, holding each decision for the teacher's
    `action_repeat` control periods; return the report dict (see `agent eval teacher --json`)."""
    from sim.vector_env import DiffBotVectorEnv

    n = max(1, min(num_envs, episodes))
    repeat = teacher.cfg.action_repeat
    envs = DiffBotVectorEnv(n, sim_config, "privileged", proxy, repeat, AutoresetMode.DISABLED)
    k = teacher.contract.num_skills
    episode_of = np.arange(n)  # episode each env runs; -1 once there are no more to start
    returns = np.zeros(n)
    successes, totals, outcomes = 0, [], {}
    try:
        obs, _ = envs.reset(seed=[seed + i for i in range(n)])
        started = n
        while (episode_of >= 0).any():
            skill, params = teacher.act(teacher_features(obs["privileged"], obs["skill"], k))
            obs, reward, terminated, truncated, info = envs.step({"skill": skill, "params": params})
            running = episode_of >= 0
            returns += np.where(running, reward, 0.0)
            ended = running & (terminated | truncated)
            for i in np.flatnonzero(ended):
                successes += bool(info["success"][i])
                outcomes[info["outcome"][i]] = outcomes.get(info["outcome"][i], 0) + 1
                totals.append(float(returns[i]))
                returns[i] = 0.0
                episode_of[i] = started if started < episodes else -1
                started += episode_of[i] >= 0
            restart = ended & (episode_of >= 0)
            if restart.any():  # the others hold their ended episodes (not simulated) until all are done
                seeds = [seed + int(e) if r else None for e, r in zip(episode_of, restart, strict=True)]
                obs, _ = envs.reset(seed=seeds, options={"reset_mask": restart})
    finally:
        envs.close()
    lo, hi = wilson_interval(successes, episodes)
    return {
        "episodes": episodes,
        "success_rate": successes / max(episodes, 1),
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_return": float(np.mean(totals)) if totals else 0.0,
        "sim": envs.config.backend,
        "proxy": proxy is not None,
        "outcomes": outcomes,
    }

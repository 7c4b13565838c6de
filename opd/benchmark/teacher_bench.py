"""Where a teacher training step's time goes: milliseconds per hybrid-SAC update of the recipe's networks and
batch on each device asked for, and per step of its vector env (on the CPU, where MuJoCo runs), so that
`--device` can be chosen on numbers: a GPU can only shorten the updates.

A training step is one vector env step plus num_envs x updates_per_step updates, so the recipe's env steps
per second on a device are num_envs / (env ms + updates x update ms) / 1000 (collectives of N ranks aside).

    python -m opd.benchmark.teacher_bench [--config opd/configs/teacher.yaml] [--devices cpu cuda] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from opd.teacher.hybrid_sac import HybridSAC
from opd.teacher.replay_buffer import ReplayBuffer
from opd.teacher.trainer import TeacherTrainConfig, make_vec_env
from opd.world import DEVICE_CHOICES, torch_device
from policies.config import from_root
from policies.teacher_policy import TeacherPolicy

ROWS = 10_000  # synthetic transitions the updates sample from


def env_ms(cfg: TeacherTrainConfig, steps: int) -> tuple[float, Any]:
    """Milliseconds per vector env step (acting included, on the CPU), and the env's robot spec."""
    envs = make_vec_env(cfg, gym.vector.AutoresetMode.SAME_STEP)
    spec = envs.unwrapped.robot.spec
    actor = TeacherPolicy(len(spec.privileged_fields) + spec.contract.num_skills, spec.contract, cfg.teacher,
                          spec.privileged_fields)  # fmt: skip
    obs, _ = envs.reset(seed=cfg.seed)
    times = []
    for _ in range(steps + 3):  # 3 untimed
        t0 = time.perf_counter()
        skill, params = actor.act(actor.features(obs["privileged"], obs["skill"]), deterministic=False)
        obs, *_ = envs.step({"skill": skill, "params": params})
        times.append(time.perf_counter() - t0)
    envs.close()
    return 1e3 * float(np.mean(times[3:])), spec


def update_ms(cfg: TeacherTrainConfig, spec: Any, device: torch.device, updates: int) -> float:
    """Milliseconds per update (critics, actor, temperatures, targets) on `device`, batches from the CPU."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    obs_dim, lay = len(spec.privileged_fields) + spec.contract.num_skills, spec.contract.layout
    terms = len(spec.reward_terms)
    actor = TeacherPolicy(obs_dim, spec.contract, cfg.teacher, spec.privileged_fields)
    sac = HybridSAC(actor, cfg.sac, torch.ones(terms), device)
    buffer = ReplayBuffer(ROWS, obs_dim, lay.size, terms)
    obs = rng.standard_normal((2, ROWS, obs_dim), np.float32)
    skills = rng.integers(0, spec.contract.num_skills, ROWS)
    params = rng.uniform(lay.low, lay.high, (ROWS, lay.size))
    buffer.add(obs[0], skills, params, rng.standard_normal((ROWS, terms), np.float32), obs[1],
               np.zeros(ROWS, np.float32))  # fmt: skip
    times = []
    for _ in range(updates + 5):  # 5 untimed
        t0 = time.perf_counter()
        sac.update(buffer.sample(cfg.sac.batch_size, rng))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.mean(times[5:]))


def run(cfg: TeacherTrainConfig, devices: list[str], updates: int, steps: int) -> dict[str, Any]:
    """The figures of one config: env ms, update ms per device, and each device's env steps per second."""
    torch.set_num_threads(cfg.threads)
    step, spec = env_ms(cfg, steps)
    per_step = cfg.num_envs * cfg.updates_per_step  # updates per vector step
    out: dict[str, Any] = {"cpu": _cpu_model(), "threads": cfg.threads, "num_envs": cfg.num_envs,
                           "updates_per_vector_step": per_step, "batch": cfg.sac.batch_size,
                           "env_ms": round(step, 2), "devices": {}}  # fmt: skip
    for name in devices:
        device = torch_device(name)
        ms = update_ms(cfg, spec, device, updates)
        out["devices"][str(device)] = {
            "update_ms": round(ms, 2),
            "learning_share": round(per_step * ms / (step + per_step * ms), 3),
            "env_steps_per_s": round(1e3 * cfg.num_envs / (step + per_step * ms), 1),
        }
    return out


def _cpu_model() -> str:
    """The CPU's model name (Linux), which every timing figure is reported with."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m opd.benchmark.teacher_bench", description=__doc__.split("\n")[0]
    )
    p.add_argument("--config", type=Path, default=Path("opd/configs/teacher.yaml"), help="teacher recipe")
    p.add_argument("--devices", nargs="+", default=["cpu"], help=f"each {DEVICE_CHOICES}")
    p.add_argument("--updates", type=int, default=50, help="timed updates per device")
    p.add_argument("--steps", type=int, default=30, help="timed vector env steps")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if min(args.updates, args.steps) < 1:
        p.error("--updates and --steps must be at least 1")
    out = run(TeacherTrainConfig.from_yaml(from_root(args.config)), args.devices, args.updates, args.steps)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The task is solvable (a hand-written controller succeeds) and not trivial (random fails)."""

from __future__ import annotations

import numpy as np
from sim_doubles import sim_config

from sim.mujoco_backend import MujocoBackend
from sim.scripted_controller import ScriptedController


def success_rate(policy: str, seed: int, envs: int) -> float:
    """Success rate of `envs` episodes run side by side in one backend."""
    with MujocoBackend(sim_config(num_envs=envs, camera={"enabled": False})) as robot:
        obs = robot.reset(seed=seed)
        controller, rng = ScriptedController(robot.spec), np.random.default_rng(seed)
        c = robot.spec.contract
        while not obs.task.done.all():
            if policy == "scripted":
                action = controller.act(obs.privileged)
            else:
                skill = rng.integers(0, c.num_skills, envs)
                action = skill, rng.uniform(c.layout.low, c.layout.high, (envs, c.num_params))
            robot.send_action(*action)
            obs = robot.step()
        return float(obs.task.success.mean())


def test_scripted_controller_reaches_the_markers_reliably() -> None:
    assert success_rate("scripted", seed=100, envs=12) >= 11 / 12


def test_random_policy_mostly_fails() -> None:
    assert success_rate("random", seed=100, envs=8) <= 1 / 8

"""The third-person view: it follows the robot through the real-robot proxy and leaves the episode alone."""

from __future__ import annotations

import numpy as np
import pytest

from sim.third_person import ThirdPersonConfig, ThirdPersonView
from sim.vector_env import DiffBotVectorEnv
from tests.sim.sim_doubles import DummyRobot

SMALL = ThirdPersonConfig(height=48, width=64)


def test_the_view_follows_the_robot_through_the_proxy_and_changes_nothing_it_renders() -> None:
    envs = DiffBotVectorEnv(2, {"camera": {"enabled": False}}, "privileged", proxy={})
    envs.reset(seed=0)
    view = ThirdPersonView(envs.robot, SMALL)
    data = view.backend.data(1)
    before = (data.qpos.copy(), data.qvel.copy(), data.time)
    first = view.render(1)
    assert first.shape == (48, 64, 3) and first.dtype == np.uint8 and first.std() > 0
    assert (data.qpos == before[0]).all() and (data.qvel == before[1]).all() and data.time == before[2]
    assert (view.render(0) != first).any()  # env 0's layout, not env 1's
    skill, params = envs.contract.action("turn_in_place", turn_rate=1.5)
    for _ in range(5):
        envs.step({"skill": np.full(2, skill), "params": np.tile(params, (2, 1))})
    turned = view.render(1)
    assert (turned != first).any()  # the robot turned under a camera that follows it
    view.close()
    envs.close()


def test_a_backend_other_than_mujoco_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="MuJoCo backend only, not DummyRobot"):
        ThirdPersonView(DummyRobot())

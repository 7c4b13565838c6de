"""Isaac Sim backend. The simulator tests need Isaac Sim and a GPU and skip without them; the pure-numpy
pieces they rely on (IMU frame rotation) are tested here for real."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from sim_doubles import sim_config

from sim.isaacsim_backend import _rotate_inverse

requires_isaacsim = pytest.mark.skipif(
    importlib.util.find_spec("isaacsim") is None,
    reason="Isaac Sim is not installed (pip install --extra-index-url https://pypi.nvidia.com '.[isaacsim]')",
)


def test_world_vectors_rotate_into_the_body_frame() -> None:
    rng = np.random.default_rng(0)
    rot = Rotation.random(16, random_state=1)
    xyzw = rot.as_quat()
    wxyz = np.c_[xyzw[:, 3], xyzw[:, :3]]
    v = rng.normal(size=(16, 3))
    np.testing.assert_allclose(_rotate_inverse(wxyz, v), rot.inv().apply(v), atol=1e-12)


@pytest.fixture(scope="module")
def isaac() -> Iterator[Any]:
    from sim.isaacsim_backend import IsaacSimBackend

    robot = IsaacSimBackend(sim_config(backend="isaacsim", num_envs=4, camera={"enabled": False}))
    robot.connect()
    yield robot
    robot.close()


@requires_isaacsim
@pytest.mark.gpu
def test_reset_and_zero_action_step_match_the_spec(isaac: Any) -> None:
    obs = isaac.reset(seed=0)
    isaac.spec.check(obs)
    isaac.send_action(np.zeros(4, dtype=np.int64), np.zeros((4, isaac.spec.contract.num_params)))
    obs = isaac.step()
    isaac.spec.check(obs)
    assert np.isfinite(obs.privileged).all() and np.isfinite(obs.imu).all()
    np.testing.assert_allclose(obs.imu[:, -1, 2], 9.81, atol=0.5)  # at rest the accelerometer reads +g
    assert np.all(obs.imu_stamps_s[:, -1] == obs.time_s)


@requires_isaacsim
@pytest.mark.gpu
def test_scripted_controller_reaches_the_markers(isaac: Any) -> None:
    from sim.scripted_controller import ScriptedController

    controller = ScriptedController(isaac.spec)
    obs = isaac.reset(seed=100)
    while not obs.task.done.all():
        isaac.send_action(*controller.act(obs.privileged))
        obs = isaac.step()
    assert obs.task.success.mean() >= 0.75

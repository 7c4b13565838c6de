"""Isaac Sim backend. The simulator tests need Isaac Sim and a GPU and skip without them; the pure-numpy
pieces they rely on (IMU frame rotation) are tested here for real."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from sim_doubles import sim_config

from sim.isaacsim_backend import FOCAL_LENGTH, _rotate_inverse, pinhole_apertures, scaled_friction
from sim.robots.diffbot import constants as C

requires_isaacsim = pytest.mark.skipif(
    importlib.util.find_spec("isaacsim") is None,
    reason="Isaac Sim is not installed (pip install --extra-index-url https://pypi.nvidia.com '.[isaacsim]')",
)


def test_the_camera_apertures_give_the_mjcf_field_of_view() -> None:
    """Review defect: Isaac Sim's camera kept its default field of view; MuJoCo's is 75 degrees vertical."""
    for width, height in ((64, 64), (128, 96)):
        horizontal, vertical = pinhole_apertures(C.CAMERA_FOVY_DEG, width, height)
        fovy = math.degrees(2 * math.atan(vertical / (2 * FOCAL_LENGTH)))
        assert fovy == pytest.approx(75.0) and horizontal / vertical == pytest.approx(width / height)


def test_friction_randomisation_scales_each_envs_shapes() -> None:
    """Review defect: the backend raised on the friction randomisation sim/configs/proxy.yaml turns on."""
    nominal = np.array([[[1.0, 0.8], [0.0, 0.0]], [[1.0, 0.8], [0.0, 0.0]]])  # (E, shapes: tyre, caster, 2)
    out = scaled_friction(nominal, np.array([0.7, 1.3]))
    np.testing.assert_allclose(out, [[[0.7, 0.56], [0.0, 0.0]], [[1.3, 1.04], [0.0, 0.0]]])


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


@requires_isaacsim
@pytest.mark.gpu
def test_the_default_proxy_config_runs_on_isaac_sim(isaac: Any) -> None:
    """The same sim/configs/proxy.yaml as on MuJoCo: friction, mass and motor randomisation included."""
    from sim.real_robot_proxy import ProxyConfig, RealRobotProxy

    cfg = ProxyConfig.from_yaml(Path(__file__).resolve().parents[2] / "sim" / "configs" / "proxy.yaml")
    assert cfg.dynamics.friction_scale != (1.0, 1.0)  # the randomisation that used to raise
    proxy = RealRobotProxy(isaac, cfg)
    obs = proxy.reset(seed=3)
    for _ in range(5):
        proxy.send_action(np.zeros(4, dtype=np.int64), np.zeros((4, isaac.spec.contract.num_params)))
        obs = proxy.step()
    assert np.isfinite(obs.privileged).all()

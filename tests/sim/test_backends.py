"""Backend registry: selection by name, clear failures, and a light `import sim`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from sim_doubles import sim_config

from sim.backends import BACKENDS, BackendUnavailable, make_backend
from sim.mujoco_backend import MujocoBackend
from sim.robot_interface import RobotInterface


def test_mujoco_is_chosen_by_name() -> None:
    robot = make_backend(sim_config())
    assert isinstance(robot, MujocoBackend) and isinstance(robot, RobotInterface)
    assert not robot.connected  # building does not connect


@pytest.mark.skipif(importlib.util.find_spec("isaacsim") is not None, reason="Isaac Sim is installed here")
def test_isaacsim_fails_at_once_naming_what_is_missing() -> None:
    with pytest.raises(BackendUnavailable, match=r"`isaacsim`.*pip install"):
        make_backend(sim_config(backend="isaacsim"))


def test_every_registered_backend_is_a_robot_interface() -> None:
    for name, target in BACKENDS.items():
        module, _, cls = target.partition(":")
        assert issubclass(getattr(importlib.import_module(module), cls), RobotInterface), name


def test_importing_sim_is_light() -> None:
    code = "import sys, sim, sim.config, sim.robot_interface, sim.backends; print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    for heavy in ("mujoco", "gymnasium", "torch", "isaacsim", "rclpy"):
        assert f"'{heavy}'" not in loaded, heavy

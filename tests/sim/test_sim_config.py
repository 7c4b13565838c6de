"""Sim configs: the shipped YAML files load, and bad values are rejected with the field's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.config import PROJECT_ROOT, ConfigError
from sim.config import RatesConfig, SimConfig
from sim.real_robot_proxy import ProxyConfig
from sim.room_appearance import MaterialSet

CONFIGS = sorted((PROJECT_ROOT / "sim" / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    is_proxy, is_materials = path.stem.startswith("proxy"), path.stem.endswith("materials")
    cls = ProxyConfig if is_proxy else MaterialSet if is_materials else SimConfig
    cfg = cls.from_yaml(path)
    if cls is SimConfig:
        assert cfg.contract.is_file()


def test_defaults_match_mujoco_yaml() -> None:
    assert SimConfig.from_yaml(PROJECT_ROOT / "sim/configs/mujoco.yaml") == SimConfig()


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg = SimConfig.from_dict({"num_envs": 3, "task": {"num_obstacles": 1}})
    cfg.to_yaml(tmp_path / "sim.yaml")
    assert SimConfig.from_yaml(tmp_path / "sim.yaml") == cfg


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"rates": {"imu_hz": 150}}, "imu_hz"),
        ({"rates": {"camera_hz": 30}}, "camera_hz"),
        ({"camera": {"width": 0}}, "camera.width"),
        ({"task": {"markers": ["red", "pink"]}}, "task.markers"),
        ({"task": {"markers": ["red", "red"]}}, "task.markers"),
        ({"task": {"num_obstacles": 9}}, "task.num_obstacles"),
        ({"task": {"rewards": {"progres": 1.0}}}, "task.rewards.progres"),
        ({"backend": "gazebo"}, "backend"),
        ({"settle_s": 0.1}, "settle_s"),
        ({"num_envs": 0}, "num_envs"),
    ],
)
def test_bad_values_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        SimConfig.from_dict(data)


def test_hyperperiod_is_the_common_period_of_all_schedules() -> None:
    assert RatesConfig().hyperperiod == 40  # 200 Hz physics: control 10, IMU 1, camera 40/3 -> 40 steps
    assert RatesConfig(physics_hz=240, control_hz=30, imu_hz=120, camera_hz=30).hyperperiod == 8


def test_relative_paths_are_relative_to_the_project() -> None:
    cfg = SimConfig.from_dict({"contract": "sim/robots/diffbot/skills.yaml"})
    assert cfg.contract == PROJECT_ROOT / "sim/robots/diffbot/skills.yaml"

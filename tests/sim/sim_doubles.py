"""Doubles for the sim tests: configs with overrides and a dummy robot whose sensors read their own capture
time. A module of its own (not conftest) so that test modules can import it by a name no other folder uses."""

from __future__ import annotations

import os
from collections.abc import Sequence

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

from policies.skill_contract import SkillContract
from sim.config import SimConfig
from sim.robot_interface import (
    IMU_CHANNELS,
    AppliedAction,
    DynamicsScales,
    Observation,
    RobotInterface,
    RobotSpec,
    TaskStatus,
    clip_actions,
    env_indices,
)
from sim.robots.diffbot import constants

CONTRACT = SkillContract.load(constants.CONTRACT)


def sim_config(**overrides: object) -> SimConfig:
    """The default SimConfig with top-level overrides (sub-configs as dicts)."""
    return SimConfig.from_dict(overrides)


class DummyRobot(RobotInterface):
    """Deterministic robot with exact clocks, for testing wrappers without a simulator.

    Every sensor reads its capture time: IMU samples are [stamp] * 6, a frame is filled with its frame
    number (100 + number mod 100: mid-grey, so noise is not clipped), proprio and privileged are
    [stamp, position], so delays show up exactly.
    Rates: control 20 Hz, IMU 200 Hz, camera 10 Hz; a reset settles for one IMU window.
    """

    IMU_HZ, CONTROL_HZ, CAMERA_HZ, WINDOW = 200, 20, 10, 8

    def __init__(self, num_envs: int = 2, camera: bool = True) -> None:
        self._spec = RobotSpec(
            num_envs=num_envs,
            contract=CONTRACT,
            control_hz=self.CONTROL_HZ,
            imu_hz=self.IMU_HZ,
            camera_hz=self.CAMERA_HZ,
            imu_window=self.WINDOW,
            image_shape=(4, 4, 3) if camera else None,
            proprio_fields=("stamp_s", "x_m"),
            privileged_fields=("time_s", "x_m"),
        )
        self._connected = False
        self.tick = np.zeros(num_envs, dtype=np.int64)  # IMU ticks since connect
        self.start = np.zeros(num_envs, dtype=np.int64)  # tick of the last reset
        self.x = np.zeros(num_envs)
        self.skill = np.full(num_envs, CONTRACT.safe_skill_id, dtype=np.int64)
        self.speed = np.zeros(num_envs)
        self.scales: list[DynamicsScales] = []  # every set_dynamics call

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    @property
    def connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        self._connected = True

    def close(self) -> None:
        self._connected = False

    def set_dynamics(self, scales: DynamicsScales) -> None:
        self.scales.append(scales)

    def reset(self, seed: int | None = None, envs: Sequence[int] | np.ndarray | None = None) -> Observation:
        idx = env_indices(envs, self.spec.num_envs)
        self.start[idx] = self.tick[idx]
        self.tick[idx] += self.WINDOW  # settle
        self.x[idx] = 0.0 if seed is None else float(seed)
        self.skill[idx] = CONTRACT.safe_skill_id
        self.speed[idx] = 0.0
        return self.observation()

    def send_action(self, skill: np.ndarray, params: np.ndarray) -> AppliedAction:
        applied = clip_actions(CONTRACT, skill, params, self.spec.num_envs)
        self.skill[:] = applied.skill
        self.speed[:] = np.where(applied.skill == CONTRACT.skill_id("drive"), applied.params[:, 0], 0.0)
        return applied

    def step(self) -> Observation:
        self.tick += self.IMU_HZ // self.CONTROL_HZ
        self.x += self.speed / self.CONTROL_HZ
        return self.observation()

    def observation(self) -> Observation:
        n, w = self.spec.num_envs, self.WINDOW
        dt = 1.0 / self.IMU_HZ
        time_s = self.tick * dt
        stamps = (self.tick[:, None] - w + 1 + np.arange(w)[None, :]) * dt  # (N, W), the newest at time_s
        per_frame = self.IMU_HZ // self.CAMERA_HZ  # IMU ticks per camera frame
        frame = self.tick // per_frame  # (N,) number of the newest frame
        image = None
        if self.spec.image_shape is not None:
            image = np.broadcast_to((100 + frame % 100)[:, None, None, None], (n, 4, 4, 3)).astype(np.uint8)
        steps = (self.tick - self.start - w) // (self.IMU_HZ // self.CONTROL_HZ)
        return Observation(
            time_s=time_s,
            image=image,
            image_stamp_s=None if image is None else frame * per_frame * dt,
            imu=np.repeat(stamps[..., None], len(IMU_CHANNELS), axis=2).astype(np.float32),
            imu_stamps_s=stamps,
            proprio=np.stack([time_s, self.x], axis=1).astype(np.float32),
            proprio_stamp_s=time_s.copy(),
            privileged=np.stack([time_s, self.x], axis=1).astype(np.float32),
            skill=self.skill.copy(),
            task=TaskStatus(
                progress=np.zeros(n, dtype=np.float32),
                step=steps,
                outcome=np.zeros(n, dtype=np.int8),
                reward=np.zeros(n, dtype=np.float32),
            ),
        )

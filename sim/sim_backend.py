"""Shared bookkeeping of the simulated DiffBot backends (MuJoCo, Isaac Sim).

A simulator subclass only places episodes and integrates physics; this base owns the rest so both behave
the same: the spec, contract clipping, skills executed through the base controller, the IMU window, wheel
odometry, the marker task and the observation.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np

from policies.skill_contract import SkillContract
from sim.config import SimConfig
from sim.marker_task import Layout, MarkerTask
from sim.motor_model import ActuatorParams, MotorModel
from sim.robot_interface import (
    IMU_CHANNELS,
    AppliedAction,
    Observation,
    Outcome,
    RobotInterface,
    RobotSpec,
    clip_actions,
    env_indices,
)
from sim.robots.diffbot.base_controller import BaseController
from sim.stamped_ring import StampedRing

PROPRIO_FIELDS = (
    "wheel_left_radps", "wheel_right_radps",  # wheel encoder speeds
    "odom_x_m", "odom_y_m", "odom_yaw_rad",  # dead-reckoned from the encoders; origin = pose after the reset
    "odom_v_mps", "odom_w_radps",  # body twist from the encoders
)  # fmt: skip


class SimBackend(RobotInterface):
    """N simulated DiffBot envs. `step` simulates one control period at once (no waiting).

    Subclasses implement connect/close, `_start_episodes` and `_simulate`, and keep `_tick`, `_kin`,
    `_wheels`, the IMU ring, the odometry and (when the camera is on) `_frames`/`_frame_stamp` current.
    A period from physics step t0 to t0 + S records the samples of steps (t0, t0 + S], so an observation
    holds everything measured up to and including its own time and nothing twice.
    """

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.contract = SkillContract.load(cfg.contract)
        n, rates, cam = cfg.num_envs, cfg.rates, cfg.camera
        self.task = MarkerTask(cfg.task, n, rates.control_hz, self.contract.safe_skill_id)
        self._base = BaseController(self.contract, n)
        self._spec = RobotSpec(
            num_envs=n,
            contract=self.contract,
            control_hz=rates.control_hz,
            imu_hz=rates.imu_hz,
            camera_hz=rates.camera_hz,
            imu_window=cfg.imu.window,
            image_shape=(cam.height, cam.width, 3) if cam.enabled else None,
            proprio_fields=PROPRIO_FIELDS,
            privileged_fields=self.task.fields,
            reward_terms=self.task.reward_names,
        )
        self._dt = 1.0 / rates.physics_hz
        self._imu_every = rates.physics_hz // rates.imu_hz  # physics steps per IMU sample
        self._settle = max(1, int(np.ceil(cfg.settle_s * rates.physics_hz - 1e-9)))  # physics steps
        self._rngs = [np.random.default_rng() for _ in range(n)]
        self._tick = np.zeros(n, dtype=np.int64)  # physics steps since connect: each env's clock
        self._imu = StampedRing(n, cfg.imu.window, len(IMU_CHANNELS))
        self._frames = np.zeros((n, cam.height, cam.width, 3), dtype=np.uint8) if cam.enabled else None
        self._frame_stamp = np.zeros(n)  # (N,) capture time of `_frames`, s
        self._odom = np.zeros((n, 5))  # (N, 5) odometry: x, y, yaw, v, w
        self._kin = np.zeros((n, 5))  # (N, 5) true base state: x, y, yaw, forward speed, yaw rate
        self._wheels = np.zeros((n, 2))  # (N, 2) wheel encoder speeds, rad/s
        self._skill = np.full(n, self.contract.safe_skill_id, dtype=np.int64)
        self._pending: AppliedAction | None = None  # the last send_action, applied by the next step
        self._has_pending = np.zeros(n, dtype=bool)  # False for envs reset since then
        self._motors: MotorModel | None = None  # real motors between wheel targets and wheels, once set

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    @abstractmethod
    def _start_episodes(self, envs: np.ndarray, layouts: list[Layout]) -> None:
        """Place the robot, markers and obstacles of `envs` and let the robots settle at rest.

        Must leave each env's IMU window full and, with the camera on, a frame captured.
        """

    @abstractmethod
    def _simulate(self, active: np.ndarray, wheels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Simulate one control period of the `active` (N,) envs with wheel speed targets (N, S, 2) rad/s.

        Returns (bumped, nan), each (N,) bool: the bumper touched a hazard; the state became non-finite
        (the env must then be restored to a finite state).
        """

    def reset(self, seed: int | None = None, envs: Sequence[int] | np.ndarray | None = None) -> Observation:
        self._require_connected()
        idx = env_indices(envs, self.cfg.num_envs)
        if seed is not None:
            for i in idx:
                self._rngs[i] = np.random.default_rng(seed + int(i))
        layouts = [self.task.sample_layout(self._rngs[i]) for i in idx]
        self._imu.clear(idx)
        self._base.reset(idx)
        if self._motors is not None:
            self._motors.reset(idx)
        self._start_episodes(idx, layouts)
        self._odom[idx] = 0.0
        self._skill[idx] = self.contract.safe_skill_id
        self._has_pending[idx] = False
        for i, layout in zip(idx, layouts, strict=True):
            self.task.begin(int(i), layout, self._kin[i, :3])
        return self.observation()

    def send_action(self, skill: np.ndarray, params: np.ndarray) -> AppliedAction:
        self._require_connected()  # a command to a closed (or never connected) robot is lost: say so
        applied = clip_actions(self.contract, skill, params, self.cfg.num_envs)
        self._pending = applied
        self._has_pending[:] = True
        return applied

    def step(self) -> Observation:
        self._require_connected()
        active = self.task.outcome == Outcome.RUNNING
        new = np.flatnonzero(active & self._has_pending)
        if new.size:
            self._base.command(self._base.twist_command(self._pending.skill, self._pending.params), new)
            self._skill[new] = self._pending.skill[new]
            self._has_pending[:] = False
        setpoints = self._base.profile(self.cfg.rates.substeps, self._dt)  # (N, S, 2) v, w
        wheels = BaseController.wheel_speeds(setpoints)  # (N, S, 2) left, right
        if self._motors is not None:
            wheels = self._motors.apply(wheels, self._dt)
        bumped, nan = self._simulate(active, wheels)
        self.task.update(self._kin[:, :3], self._skill, bumped, nan, active)
        return self.observation()

    def set_actuators(self, params: ActuatorParams) -> None:
        params.check(self.cfg.num_envs)
        speed = self._motors.speed if self._motors is not None else np.zeros((self.cfg.num_envs, 2))
        elapsed = self._motors.elapsed_s if self._motors is not None else np.zeros(self.cfg.num_envs)
        self._motors = MotorModel(params)
        self._motors.speed, self._motors.elapsed_s = speed, elapsed  # envs not reset keep their motors' state

    def observation(self) -> Observation:
        self._require_connected()
        imu, imu_stamps, _ = self._imu.latest(self.cfg.imu.window)  # (N, W, 6), (N, W)
        time_s = self._tick * self._dt
        return Observation(
            time_s=time_s,
            image=None if self._frames is None else self._frames.copy(),
            image_stamp_s=None if self._frames is None else self._frame_stamp.copy(),
            imu=imu.astype(np.float32),
            imu_stamps_s=imu_stamps,
            proprio=np.concatenate([self._wheels, self._odom], axis=1).astype(np.float32),  # (N, 7)
            proprio_stamp_s=time_s.copy(),
            privileged=self.task.privileged(self._kin[:, :3], self._kin[:, 3:]),
            skill=self._skill.copy(),
            task=self.task.status(),
        )

    def _capture_ticks(self, t0: int, steps: int) -> list[int]:
        """Offsets k in [0, steps) at which physics step t0 + k is a camera tick (exact integer schedule)."""
        cam, phys = self.cfg.rates.camera_hz, self.cfg.rates.physics_hz
        return [k for k in range(steps) if ((t0 + k) * cam) % phys < cam]

    def _require_connected(self) -> None:
        if not self.connected:
            raise RuntimeError(f"{type(self).__name__} is not connected: call connect() first")

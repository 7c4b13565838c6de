"""The one robot interface for simulation and hardware: MuJoCo, Isaac Sim, the real-robot proxy, ROS 2 bridge.

A `RobotInterface` holds N envs and exchanges batched arrays with a leading N axis. A control loop is:

    with make_backend(cfg) as robot:           # connect ... close
        obs = robot.reset(seed=0)
        while not obs.task.done.all():
            applied = robot.send_action(skill, params)   # clipped to the skill contract
            obs = robot.step()                           # one control period later

Time is explicit: every observation carries the time it describes and every sensor sample its own
capture stamp, all on the robot's clock in seconds (monotonic across resets, never rewound, so that a ROS
bridge can publish it as /clock).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from policies.skill_contract import SkillContract

if TYPE_CHECKING:  # the robot interface imports no implementation
    from sim.motor_model import ActuatorParams
    from sim.room_appearance import RoomDraw

IMU_CHANNELS = ("accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z")  # m/s^2 (x3), rad/s (x3)


class Outcome(IntEnum):
    """How an episode ended; RUNNING while it has not."""

    RUNNING = 0
    SUCCESS = 1
    COLLISION = 2
    TIMEOUT = 3
    NAN = 4  # the simulation state became non-finite; the env was restored and stopped


@dataclass(frozen=True)
class TaskStatus:
    """Task oracle for each env. Every array has shape (N,).

    `reward_terms` holds the unweighted terms of the last step by name; `reward` is their weighted sum
    (weights in `TaskConfig.rewards`). A real robot without an oracle reports progress only.
    """

    progress: np.ndarray  # float32 in [0, 1]: fraction of markers reached, i.e. which colour is next
    step: np.ndarray  # int64, control steps since the reset
    outcome: np.ndarray  # int8 `Outcome` codes
    reward: np.ndarray  # float32
    reward_terms: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (N,) float32

    @property
    def done(self) -> np.ndarray:
        """(N,) bool: the episode has ended (success or failure)."""
        return self.outcome != Outcome.RUNNING

    @property
    def success(self) -> np.ndarray:
        """(N,) bool."""
        return self.outcome == Outcome.SUCCESS

    @property
    def reasons(self) -> list[str]:
        """Outcome names, e.g. ['running', 'collision']."""
        return [Outcome(int(o)).name.lower() for o in self.outcome]


@dataclass(frozen=True)
class Observation:
    """What the robot reports at one control tick, for N envs.

    Shapes (N envs, H x W camera, W_imu IMU window, Dp proprio fields, Dq privileged fields):
        time_s (N,) float64            time this observation describes (end of the last control period)
        image (N, H, W, 3) uint8 RGB    newest camera frame; None when the camera is off
        image_stamp_s (N,) float64     capture time of `image`; None when the camera is off
        imu (N, W_imu, 6) float32       accel xyz m/s^2 (specific force: +9.81 on z at rest), gyro xyz
                                       rad/s, in the body frame (x forward, z up), oldest sample first
        imu_stamps_s (N, W_imu) float64 capture time of each IMU sample; the new samples are those stamped
                                       after the newest stamp of the previous observation
        proprio (N, Dp) float32         wheel encoders and odometry, named by `RobotSpec.proprio_fields`
        proprio_stamp_s (N,) float64   measurement time of `proprio`
        privileged (N, Dq) float32      true, undelayed state at `time_s` (the teacher's input), named by
                                       `RobotSpec.privileged_fields`
        skill (N,) int64                active skill: the one applied during the last period
        task: TaskStatus                progress, step index, outcome and reward of the last period
        imu_arrival_s (N, W_imu) float64 when each IMU sample reached the controller (capture + transport
                                       latency, e.g. the real-robot proxy); None: at its capture time
    """

    time_s: np.ndarray
    image: np.ndarray | None
    image_stamp_s: np.ndarray | None
    imu: np.ndarray
    imu_stamps_s: np.ndarray
    proprio: np.ndarray
    proprio_stamp_s: np.ndarray
    privileged: np.ndarray
    skill: np.ndarray
    task: TaskStatus
    imu_arrival_s: np.ndarray | None = None


@dataclass(frozen=True)
class AppliedAction:
    """What the robot executes after clipping. Shapes: skill (N,) int64, params (N, P), clipped (N,)."""

    skill: np.ndarray
    params: np.ndarray
    clipped: np.ndarray
    reasons: tuple[str, ...]  # per env: why it differs from the request ('' when it does not)


@dataclass(frozen=True)
class DynamicsScales:
    """Multiplicative dynamics randomisation per env, each (N,): 1.0 is the nominal robot."""

    mass: np.ndarray  # every body mass and inertia
    friction: np.ndarray  # sliding friction of the wheels
    motor: np.ndarray  # wheel motor gain and torque limit
    wheel_radius: np.ndarray | None = None  # (N, 2) left, right wheel radius; None = nominal


@dataclass(frozen=True)
class RobotSpec:
    """Declared observation and action spec of a robot with `num_envs` envs."""

    num_envs: int
    contract: SkillContract  # action space: skill id in [0, K), params (P,) in contract bounds
    control_hz: int
    imu_hz: int
    camera_hz: int
    imu_window: int  # W_imu
    image_shape: tuple[int, int, int] | None  # (H, W, 3); None when the camera is off
    proprio_fields: tuple[str, ...]  # names of the Dp proprio columns, with units in the name
    privileged_fields: tuple[str, ...]  # names of the Dq privileged columns
    reward_terms: tuple[str, ...] = ()  # names in `TaskStatus.reward_terms`

    @property
    def control_period_s(self) -> float:
        return 1.0 / self.control_hz

    def observation_shapes(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and dtype of every observation array (camera arrays only when the camera is on)."""
        n, w = self.num_envs, self.imu_window
        shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            "time_s": ((n,), np.dtype(np.float64)),
            "imu": ((n, w, len(IMU_CHANNELS)), np.dtype(np.float32)),
            "imu_stamps_s": ((n, w), np.dtype(np.float64)),
            "proprio": ((n, len(self.proprio_fields)), np.dtype(np.float32)),
            "proprio_stamp_s": ((n,), np.dtype(np.float64)),
            "privileged": ((n, len(self.privileged_fields)), np.dtype(np.float32)),
            "skill": ((n,), np.dtype(np.int64)),
        }
        if self.image_shape is not None:
            shapes["image"] = ((n, *self.image_shape), np.dtype(np.uint8))
            shapes["image_stamp_s"] = ((n,), np.dtype(np.float64))
        return shapes

    def check(self, obs: Observation) -> None:
        """Raise ValueError naming every array whose shape or dtype differs from the spec."""
        errors = []
        for name, (shape, dtype) in self.observation_shapes().items():
            arr = getattr(obs, name)
            if arr is None or arr.shape != shape or arr.dtype != dtype:
                got = None if arr is None else f"{arr.shape} {arr.dtype}"
                errors.append(f"{name}: expected {shape} {dtype}, got {got}")
        if self.image_shape is None and obs.image is not None:
            errors.append("image: the camera is off but an image was returned")
        if errors:
            raise ValueError("observation does not match the spec:\n  " + "\n  ".join(errors))


def clip_actions(
    contract: SkillContract, skill: np.ndarray, params: np.ndarray, num_envs: int
) -> AppliedAction:
    """Clip a batch of requested actions with `SkillContract.clip`, env by env.

    Shapes: skill (N,) int, params (N, P). A batch of the wrong shape is a ValueError naming the input; a
    bad action inside a well-formed batch becomes the safe skill (see `SkillContract.clip`).
    """
    skill, params = np.asarray(skill), np.asarray(params)
    if skill.shape != (num_envs,):
        raise ValueError(f"skill must have shape ({num_envs},), got {skill.shape}")
    if params.shape != (num_envs, contract.num_params):
        raise ValueError(f"params must have shape ({num_envs}, {contract.num_params}), got {params.shape}")
    clipped = [contract.clip(k, p) for k, p in zip(skill, params, strict=True)]
    return AppliedAction(
        skill=np.array([c.skill for c in clipped], dtype=np.int64),
        params=np.stack([c.params for c in clipped]),
        clipped=np.array([c.clipped for c in clipped], dtype=bool),
        reasons=tuple(c.reason for c in clipped),
    )


def env_indices(envs: Sequence[int] | np.ndarray | None, num_envs: int) -> np.ndarray:
    """Env selection as sorted unique int64 indices (None = all); out-of-range indices are a ValueError."""
    idx = np.arange(num_envs) if envs is None else np.unique(np.asarray(envs, dtype=np.int64))
    if idx.size and (idx[0] < 0 or idx[-1] >= num_envs):
        raise ValueError(f"env indices must lie in [0, {num_envs - 1}], got {idx.tolist()}")
    return idx


class RobotInterface(ABC):
    """N envs of one robot, simulated or real. Subclasses document what `step` waits for."""

    @property
    @abstractmethod
    def spec(self) -> RobotSpec:
        """Declared observation and action spec."""

    @property
    @abstractmethod
    def connected(self) -> bool:
        """True between `connect` and `close`."""

    @abstractmethod
    def connect(self) -> None:
        """Acquire the robot (start the simulator, open the GL context, open the driver)."""

    @abstractmethod
    def close(self) -> None:
        """Release everything `connect` acquired; safe to call twice."""

    @abstractmethod
    def reset(self, seed: int | None = None, envs: Sequence[int] | np.ndarray | None = None) -> Observation:
        """Start new episodes in `envs` (None = all) and return the observation of all envs.

        Env i draws its episode from `seed + i` when a seed is given, else continues its own generator.
        The clock keeps running: a reset takes simulated time (the robot settles), it never rewinds.
        """

    @abstractmethod
    def observation(self) -> Observation:
        """The current observation, without advancing time."""

    @abstractmethod
    def send_action(self, skill: np.ndarray, params: np.ndarray) -> AppliedAction:
        """Command one action per env for the next control period; returns it after contract clipping.

        Shapes: skill (N,) int, params (N, P). Envs that are done ignore their action until reset.
        """

    @abstractmethod
    def step(self) -> Observation:
        """Advance one control period (a real robot waits for its next tick) and return the observation.

        An env whose episode has ended holds its last observation until it is reset.
        """

    def set_dynamics(self, scales: DynamicsScales) -> None:
        """Scale the dynamics of every env from its next reset on; only simulators can."""
        raise NotImplementedError(f"{type(self).__name__} cannot change its dynamics")

    def set_actuators(self, params: ActuatorParams) -> None:
        """Put real motors (lag, deadband, battery) between the wheel targets and the wheels of every env from
        its next reset on (`sim.motor_model`); only simulators can."""
        raise NotImplementedError(f"{type(self).__name__} cannot model its motors")

    def set_appearance(self, rooms: Sequence[RoomDraw | None]) -> None:
        """Render each env in its room from its next reset on (`sim.room_appearance`; None = the sim's own
        look); only simulators that render can."""
        raise NotImplementedError(f"{type(self).__name__} cannot render a room appearance")

    def __enter__(self) -> RobotInterface:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

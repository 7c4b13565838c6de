"""Typed configuration of a simulated robot: rates, sensors, task, rewards and the backend's own options.

Loaded from YAML (sim/configs/*.yaml) through `policies.config.Config`, so an unknown key or a bad value is
rejected with the field's name. All times are in seconds and all rates in integer Hz: integer rates keep the
sensor schedules exact (no drift between the camera, IMU and control clocks).
"""

from __future__ import annotations

from math import gcd
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from policies.config import Config, from_root
from sim.robots.diffbot import constants

# The robot backends by name, "module:class" (each class takes a SimConfig): here, where a config's name is
# checked; `sim.backends.make_backend` imports the chosen one (they are heavy).
BACKENDS: dict[str, str] = {
    "mujoco": "sim.mujoco_backend:MujocoBackend",
    "isaacsim": "sim.isaacsim_backend:IsaacSimBackend",
}


class RatesConfig(Config):
    """Clock rates. Physics is the base clock: control and IMU periods are whole physics steps."""

    physics_hz: int = Field(200, gt=0, le=10_000)  # simulation step rate, Hz
    control_hz: int = Field(20, gt=0)  # decisions: one send_action + step per period, Hz
    imu_hz: int = Field(200, gt=0)  # IMU sample rate, Hz
    camera_hz: int = Field(15, gt=0)  # camera frame rate, Hz

    @model_validator(mode="after")
    def _divides(self) -> RatesConfig:
        for name in ("control_hz", "imu_hz"):
            if self.physics_hz % getattr(self, name):
                raise ValueError(f"{name} ({getattr(self, name)}) must divide physics_hz ({self.physics_hz})")
        # An observation holds the newest frame only: a faster camera would lose frames between steps.
        if self.camera_hz > self.control_hz:
            raise ValueError(f"camera_hz ({self.camera_hz}) must be <= control_hz ({self.control_hz})")
        return self

    @property
    def substeps(self) -> int:
        """Physics steps per control period."""
        return self.physics_hz // self.control_hz

    @property
    def hyperperiod(self) -> int:
        """Physics steps after which the control, IMU and camera schedules repeat together."""
        camera = self.physics_hz // gcd(self.physics_hz, self.camera_hz)
        ticks = [self.substeps, self.physics_hz // self.imu_hz, camera]
        out = 1
        for t in ticks:
            out = out * t // gcd(out, t)
        return out


class CameraConfig(Config):
    """Forward camera. Off for privileged-state training: rendering is the expensive part of a step."""

    enabled: bool = True  # render frames into observations
    width: int = Field(128, ge=8, le=2048)  # pixels
    height: int = Field(128, ge=8, le=2048)  # pixels


class ImuConfig(Config):
    """IMU window carried by every observation."""

    window: int = Field(100, ge=1, le=10_000)  # samples per observation, oldest first


class RewardWeights(Config):
    """Weight of each reward term (`MarkerTask._reward_<name>`); reward = sum(weight * term)."""

    progress: float = 5.0  # per metre gained towards the current marker (potential shaping)
    heading: float = 1.0  # per radian the heading error to the current marker shrinks (potential shaping)
    reached: float = 3.0  # per marker reached in order
    success: float = 10.0  # once, when the last marker is reached
    collision: float = -5.0  # once, when the bumper touches a wall or an obstacle (ends the episode)
    time: float = -0.005  # per control step, favours short routes; small, so that no crash pays off
    skill_switch: float = -0.01  # per change of skill, favours smooth commands
    clearance: float = -0.1  # per step, times how far the robot is inside `clearance_m` of a hazard (0..1)


class TaskConfig(Config):
    """Marker tour: visit the markers in a fixed colour order without touching a hazard."""

    markers: list[str] = Field(default_factory=lambda: ["red", "green", "blue"])  # visiting order (colours)
    num_obstacles: int = Field(3, ge=0)  # obstacles placed per episode
    reach_radius_m: float = Field(0.25, gt=0.05, le=0.6)  # marker reached when the base centre is closer, m
    time_limit_s: float = Field(40.0, gt=0)  # episode length before a timeout failure, s
    marker_spacing_m: float = Field(1.0, ge=0)  # least distance between markers and from the start, m
    clearance_m: float = Field(0.15, gt=0)  # hazard gap below which the clearance term grows, m
    rewards: RewardWeights = Field(default_factory=RewardWeights)

    @field_validator("markers")
    @classmethod
    def _known_markers(cls, markers: list[str]) -> list[str]:
        if not markers:
            raise ValueError("at least one marker is needed")
        unknown = [m for m in markers if m not in constants.MARKER_COLOURS]
        if unknown:
            raise ValueError(f"unknown marker colours {unknown}; arena: {list(constants.MARKER_COLOURS)}")
        if len(set(markers)) != len(markers):
            raise ValueError(f"each colour may appear once, got {markers}")
        return markers

    @field_validator("num_obstacles")
    @classmethod
    def _enough_obstacles(cls, n: int) -> int:
        if n > len(constants.OBSTACLES):
            raise ValueError(f"{n} obstacles requested; the arena has {len(constants.OBSTACLES)}")
        return n


class MujocoConfig(Config):
    """MuJoCo backend options."""

    mjcf: Path = constants.ARENA_MJCF  # scene MJCF (arena including the robot); its timestep is replaced

    @field_validator("mjcf")
    @classmethod
    def _in_project(cls, path: Path) -> Path:
        return from_root(path)


class IsaacSimConfig(Config):
    """Isaac Sim backend options."""

    headless: bool = True  # no viewport window (servers, CI)
    device: str = "cuda:0"  # PhysX/tensor device
    env_spacing_m: float = Field(6.0, gt=2 * constants.ARENA_HALF_SIZE_M)  # distance between env origins, m


class SimConfig(Config):
    """One simulated robot backend with N envs."""

    backend: str = "mujoco"  # registered backend name (sim.backends.BACKENDS): mujoco | isaacsim
    num_envs: int = Field(1, ge=1, le=65_536)  # envs in one backend object
    contract: Path = constants.CONTRACT  # skill contract YAML
    settle_s: float = Field(0.5, ge=0)  # rest after each reset, filling the IMU window with real samples, s
    rates: RatesConfig = Field(default_factory=RatesConfig)
    camera: CameraConfig = Field(default_factory=CameraConfig)
    imu: ImuConfig = Field(default_factory=ImuConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    mujoco: MujocoConfig = Field(default_factory=MujocoConfig)
    isaacsim: IsaacSimConfig = Field(default_factory=IsaacSimConfig)

    @field_validator("contract")
    @classmethod
    def _in_project(cls, path: Path) -> Path:
        return from_root(path)

    @field_validator("backend")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in BACKENDS:
            raise ValueError(f"unknown backend {name!r}; registered: {sorted(BACKENDS)}")
        return name

    @model_validator(mode="after")
    def _settle_fills_window(self) -> SimConfig:
        needed = self.imu.window / self.rates.imu_hz
        if self.settle_s + 1e-9 < needed:
            raise ValueError(
                f"settle_s ({self.settle_s}) must be >= imu.window / rates.imu_hz ({needed:g} s) so that the "
                "first observation's IMU window holds real samples"
            )
        return self

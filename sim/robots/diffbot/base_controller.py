"""DiffBot base controller: skill -> velocity command (Twist) -> acceleration-limited setpoint -> wheels.

This is what the base's firmware does on the real robot, so it is perception-free, shared by every backend,
and usable by the ROS 2 policy node to turn a hybrid action into a geometry_msgs/Twist (`twist_command`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.skill_contract import SkillContract
from sim.robots.diffbot import constants as C

# (skill, parameter names in slot order) that this base knows how to execute.
REQUIRED_SKILLS = {"drive": ("speed", "curvature"), "turn_in_place": ("turn_rate",), "stop": ("decel",)}


@dataclass(frozen=True)
class TwistCommand:
    """Velocity targets and the accelerations allowed to reach them. Each field has shape (N,)."""

    linear: np.ndarray  # m/s forward (Twist linear.x)
    angular: np.ndarray  # rad/s yaw rate, + = left (Twist angular.z)
    linear_accel: np.ndarray  # m/s^2
    angular_accel: np.ndarray  # rad/s^2


class BaseController:
    """Velocity setpoints of N bases, ramped towards the commanded twist at bounded acceleration."""

    def __init__(self, contract: SkillContract, num_envs: int) -> None:
        for skill, names in REQUIRED_SKILLS.items():
            k = contract.skill_id(skill)
            got = tuple(p.name for p in contract.skills[k].params)
            if got != names:
                raise ValueError(
                    f"skill contract {contract.robot!r}: skill {skill!r} must have params {names}, got {got}"
                )
        self._slot = {  # flat parameter slot of each (skill, param)
            (s, p): contract.layout.slices[contract.skill_id(s)].start + i
            for s, names in REQUIRED_SKILLS.items()
            for i, p in enumerate(names)
        }
        self._ids = {s: contract.skill_id(s) for s in REQUIRED_SKILLS}
        self.num_envs = num_envs
        self.setpoint = np.zeros((num_envs, 2))  # (N, 2): v m/s, w rad/s currently commanded to the wheels
        stop = np.full(num_envs, self._ids["stop"])
        self._target = self.twist_command(stop, np.tile(contract.layout.defaults, (num_envs, 1)))

    def twist_command(self, skill: np.ndarray, params: np.ndarray) -> TwistCommand:
        """Map clipped actions to velocity targets. Shapes: skill (N,) int, params (N, P)."""
        drive, turn, stop = (skill == self._ids[k] for k in ("drive", "turn_in_place", "stop"))
        speed = params[:, self._slot["drive", "speed"]] * drive
        curvature = params[:, self._slot["drive", "curvature"]]
        angular = speed * curvature + turn * params[:, self._slot["turn_in_place", "turn_rate"]]
        linear_accel = np.where(stop, params[:, self._slot["stop", "decel"]], C.LINEAR_ACCEL_MPS2)
        angular_accel = np.full(len(skill), C.ANGULAR_ACCEL_RADPS2)
        return TwistCommand(speed, angular, linear_accel, angular_accel)

    def command(self, cmd: TwistCommand, envs: np.ndarray) -> None:
        """Set new targets for `envs` (int indices) from a full-batch command."""
        for name in ("linear", "angular", "linear_accel", "angular_accel"):
            getattr(self._target, name)[envs] = getattr(cmd, name)[envs]

    def reset(self, envs: np.ndarray) -> None:
        """Bring `envs` to rest with a stop target."""
        self.setpoint[envs] = 0.0
        self._target.linear[envs] = 0.0
        self._target.angular[envs] = 0.0

    def profile(self, substeps: int, dt: float) -> np.ndarray:
        """Setpoints over the next control period, advancing the state to its end.

        Returns (N, S, 2): v, w after each of the S physics steps of length dt, each within the allowed
        acceleration of the previous one.
        """
        t = dt * np.arange(1, substeps + 1)  # (S,)
        target = np.stack([self._target.linear, self._target.angular], axis=1)  # (N, 2)
        accel = np.stack([self._target.linear_accel, self._target.angular_accel], axis=1)  # (N, 2)
        delta = target - self.setpoint  # (N, 2)
        step = np.minimum(np.abs(delta)[:, None, :], accel[:, None, :] * t[None, :, None])  # (N, S, 2)
        out = self.setpoint[:, None, :] + np.sign(delta)[:, None, :] * step
        self.setpoint = out[:, -1].copy()
        return out

    @staticmethod
    def wheel_speeds(twist: np.ndarray) -> np.ndarray:
        """Inverse kinematics: (..., 2) v m/s, w rad/s -> (..., 2) left, right wheel speeds rad/s."""
        v, w = twist[..., 0], twist[..., 1]
        half = 0.5 * C.TRACK_WIDTH_M
        return np.stack([v - w * half, v + w * half], axis=-1) / C.WHEEL_RADIUS_M

    @staticmethod
    def body_twist(wheels: np.ndarray) -> np.ndarray:
        """Forward kinematics (odometry): (..., 2) left, right rad/s -> (..., 2) v m/s, w rad/s."""
        left, right = wheels[..., 0] * C.WHEEL_RADIUS_M, wheels[..., 1] * C.WHEEL_RADIUS_M
        return np.stack([0.5 * (left + right), (right - left) / C.TRACK_WIDTH_M], axis=-1)


def integrate_odometry(odom: np.ndarray, wheels: np.ndarray, dt: float) -> np.ndarray:
    """Dead reckoning from encoder speeds, midpoint heading per sample, as base firmware does.

    Shapes: odom (M, 5) x m, y m, yaw rad, v m/s, w rad/s; wheels (M, S, 2) left, right rad/s sampled every
    dt seconds -> the updated odom (M, 5).
    """
    twist = BaseController.body_twist(wheels)  # (M, S, 2)
    yaw = odom[:, 2:3] + np.cumsum(twist[..., 1], axis=1) * dt  # (M, S) heading after each sample
    heading = yaw - 0.5 * dt * twist[..., 1]
    out = np.empty_like(odom)
    out[:, 0] = odom[:, 0] + dt * np.sum(twist[..., 0] * np.cos(heading), axis=1)
    out[:, 1] = odom[:, 1] + dt * np.sum(twist[..., 0] * np.sin(heading), axis=1)
    out[:, 2] = np.arctan2(np.sin(yaw[:, -1]), np.cos(yaw[:, -1]))
    out[:, 3:] = twist[:, -1]
    return out

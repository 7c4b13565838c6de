"""Wheel motors as a real base has them, between the base controller's wheel targets and the simulator.

The simulators drive each wheel with an ideal velocity servo. A hobby or research base drives it through a
PWM motor driver from a battery, so three things stand between the target and the wheel:
- a deadband: below a minimum command the motor does not turn (static friction and the driver's dead zone);
- the battery's voltage: an open-loop PWM base turns its wheels in proportion to it, and it sags over a run;
- a first-order lag: the motor's electrical and mechanical time constant.
Per env, set per episode by the real-robot proxy (`RobotInterface.set_actuators`); none is applied until then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ActuatorParams:
    """One episode's motors, each (N,): 0 lag, 0 deadband, voltage 1 and no sag is the ideal servo."""

    lag_s: np.ndarray  # first-order time constant of the wheel speed, s
    deadband_radps: np.ndarray  # wheel speed commands below this do not turn the wheel, rad/s
    voltage: np.ndarray  # battery voltage at the episode's start, relative to the nominal, 1
    sag_per_s: np.ndarray  # voltage lost per second of the episode, relative, 1/s

    def check(self, num_envs: int) -> None:
        for name in ("lag_s", "deadband_radps", "voltage", "sag_per_s"):
            value = np.asarray(getattr(self, name))
            if value.shape != (num_envs,) or not np.all(np.isfinite(value) & (value >= 0)):
                raise ValueError(f"actuators.{name} must hold {num_envs} finite values >= 0, got {value}")


MIN_VOLTAGE = 0.5  # a base browns out below half its nominal voltage; the sag stops there


class MotorModel:
    """Wheel speeds (N, S, 2) as commanded -> as the motors deliver them, one control period at a time."""

    def __init__(self, params: ActuatorParams) -> None:
        self.params = params
        n = len(params.lag_s)
        self.speed = np.zeros((n, 2))  # (N, 2) each motor's current speed, rad/s
        self.elapsed_s = np.zeros(n)  # (N,) time since the env's episode began, s

    def reset(self, envs: np.ndarray) -> None:
        """Motors at rest at an episode's start."""
        self.speed[envs] = 0.0
        self.elapsed_s[envs] = 0.0

    def apply(self, wheels: np.ndarray, dt: float) -> np.ndarray:
        """Shape: wheels (N, S, 2) targets every dt seconds -> (N, S, 2) delivered speeds, advancing time."""
        p = self.params
        n, s, _ = wheels.shape
        t = self.elapsed_s[:, None] + dt * np.arange(1, s + 1)[None, :]  # (N, S)
        voltage = np.maximum(p.voltage[:, None] - p.sag_per_s[:, None] * t, MIN_VOLTAGE)  # (N, S)
        driven = np.where(np.abs(wheels) < p.deadband_radps[:, None, None], 0.0, wheels) * voltage[..., None]
        with np.errstate(divide="ignore"):
            alpha = np.where(p.lag_s > 0, -np.expm1(-dt / p.lag_s), 1.0)[:, None]  # (N, 1) per-step blend
        out = np.empty_like(driven)
        speed = self.speed
        for k in range(s):
            speed = speed + alpha * (driven[:, k] - speed)
            out[:, k] = speed
        self.speed = speed
        self.elapsed_s += dt * s
        return out

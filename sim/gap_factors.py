"""The gap proxy taken apart: each factor of a preset alone on an ideal robot, so its cost can be measured.

A factor is a set of config fields (dotted paths into `ProxyConfig`); its config is the ideal proxy (every
latency, noise and randomisation off: the clean sim delivered through the proxy's plumbing) with those fields
taken from the preset. Every field the gap preset changes from the ideal belongs to exactly one factor
(tested), so the factors add up to the preset.
"""

from __future__ import annotations

from typing import Any

from sim.real_robot_proxy import ProxyConfig

# Every latency, noise and randomisation off (ProxyConfig's own defaults are today's proxy).
IDEAL: dict[str, Any] = {
    "camera": {"latency_s": 0, "jitter_s": 0, "drop_prob": 0, "hold_prob": 0, "noise_std": 0,
               "blur_sigma_px": 0, "exposure_std": 0},
    "imu": {"latency_s": 0, "jitter_s": 0, "accel_noise_std": 0, "gyro_noise_std": 0, "accel_bias_std": 0,
            "gyro_bias_std": 0, "accel_bias_walk": 0, "gyro_bias_walk": 0},
    "odometry": {"latency_s": 0, "jitter_s": 0},
    "dynamics": {"mass_scale": [1, 1], "friction_scale": [1, 1], "motor_scale": [1, 1], "action_latency_s": 0,
                 "action_jitter_s": 0},
}  # fmt: skip

_IMU_NOISE = ("latency_s", "jitter_s", "accel_noise_std", "gyro_noise_std", "accel_bias_std", "gyro_bias_std",
              "accel_bias_walk", "gyro_bias_walk")  # fmt: skip
FACTORS: dict[str, tuple[str, ...]] = {
    # Today's proxy without its floor and action latency: delayed, noisy camera, IMU and odometry, and the
    # body's mass and motor strength off their nominal values.
    "sensors": (
        "camera",
        "odometry",
        *(f"imu.{f}" for f in _IMU_NOISE),
        "dynamics.mass_scale",
        "dynamics.motor_scale",
    ),  # fmt: skip
    "action_latency": ("dynamics.action_latency_s", "dynamics.action_jitter_s"),
    "floor_slip": ("dynamics.friction_scale",),
    "motors": (
        "dynamics.motor_lag_s",
        "dynamics.deadband_radps",
        "dynamics.battery_voltage",
        "dynamics.battery_sag_per_s",
    ),  # fmt: skip
    "wheels": ("dynamics.wheel_radius_scale", "dynamics.wheel_radius_mismatch"),
    "imu_mount": ("imu.misalignment_rad", "imu.scale_error"),
    "lens": ("lens",),
    "room": ("room",),
}


def ideal() -> ProxyConfig:
    return ProxyConfig.from_dict(IDEAL, "the ideal proxy")


def factor_config(preset: ProxyConfig, name: str) -> ProxyConfig:
    """The ideal proxy with factor `name`'s fields as `preset` has them."""
    data, values = ideal().model_dump(mode="json"), preset.model_dump(mode="json")
    for path in FACTORS[name]:
        *parents, leaf = path.split(".")
        src, dst = values, data
        for key in parents:
            src, dst = src[key], dst[key]
        dst[leaf] = src[leaf]
    return ProxyConfig.from_dict(data, f"factor {name!r}")

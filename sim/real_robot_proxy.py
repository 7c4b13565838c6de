"""Real-robot proxy: wraps any backend so that it behaves like hardware: the sim-to-real gap, made measurable.

What it adds, all in seconds and seeded per env:
- per-sensor delivery latency with jitter (camera, IMU, odometry); camera frames are sometimes dropped (the
  previous frame stays) or held (the previous image again, under a new stamp). Stamps stay honest: a late
  sample keeps its capture stamp;
- image noise, blur and exposure changes; IMU white noise and a bias random walk;
- dynamics randomisation per episode (mass, friction, motor strength) and action latency;
- the teacher-side view: `privileged`, `task` and `time_s` pass through true and undelayed, so the teacher's
  state and the student's delayed sensors share each observation's timestamp.
With every latency and noise at 0 and every scale range at [1, 1] it is identical to the wrapped backend.

Timing rules. The proxy sees the backend at control ticks only, so a delivery time falls at the first tick
at or after it, and action latency is rounded up to whole control periods. Everything captured during a
reset (the robot settles at rest) is delivered when the reset returns; latency applies from then on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
from pydantic import Field, model_validator
from scipy.ndimage import gaussian_filter

from policies.config import Config
from sim.robot_interface import (
    IMU_CHANNELS,
    AppliedAction,
    DynamicsScales,
    Observation,
    RobotInterface,
    RobotSpec,
    clip_actions,
    env_indices,
)
from sim.stamped_ring import StampedRing


class CameraProxyConfig(Config):
    """Camera delivery and image degradation."""

    latency_s: float = Field(0.12, ge=0)  # delay from capture to delivery, s
    jitter_s: float = Field(0.02, ge=0)  # extra delay per frame, uniform in [0, jitter_s], s
    drop_prob: float = Field(0.02, ge=0, le=1)  # chance a frame is lost (the previous one stays), 1
    hold_prob: float = Field(0.02, ge=0, le=1)  # chance a frame shows the previous image under its own stamp
    noise_std: float = Field(3.0, ge=0)  # Gaussian pixel noise, 0-255 intensity units
    blur_sigma_px: float = Field(0.5, ge=0)  # Gaussian blur, pixels
    exposure_std: float = Field(0.1, ge=0)  # std of the per-frame log gain, 1


class ImuProxyConfig(Config):
    """IMU delivery and noise (per sample, in the IMU frame)."""

    latency_s: float = Field(0.01, ge=0)  # delay from capture to delivery, s
    jitter_s: float = Field(0.002, ge=0)  # extra delay per sample, uniform in [0, jitter_s], s
    accel_noise_std: float = Field(0.05, ge=0)  # white noise, m/s^2
    gyro_noise_std: float = Field(0.005, ge=0)  # white noise, rad/s
    accel_bias_std: float = Field(0.05, ge=0)  # initial bias per episode, m/s^2
    gyro_bias_std: float = Field(0.005, ge=0)  # initial bias per episode, rad/s
    accel_bias_walk: float = Field(0.005, ge=0)  # bias random walk, m/s^2 per sqrt(s)
    gyro_bias_walk: float = Field(0.0005, ge=0)  # bias random walk, rad/s per sqrt(s)


class OdometryProxyConfig(Config):
    """Wheel encoder / odometry delivery (`proprio`)."""

    latency_s: float = Field(0.02, ge=0)  # delay from measurement to delivery, s
    jitter_s: float = Field(0.005, ge=0)  # extra delay per message, uniform in [0, jitter_s], s


class DynamicsConfig(Config):
    """Per-episode dynamics randomisation (scales drawn uniformly in [low, high]) and action latency."""

    mass_scale: tuple[float, float] = (0.8, 1.2)  # body masses and inertias, 1
    friction_scale: tuple[float, float] = (0.7, 1.3)  # wheel sliding friction, 1
    motor_scale: tuple[float, float] = (0.8, 1.2)  # wheel motor gain and torque limit, 1
    action_latency_s: float = Field(0.03, ge=0)  # delay from send_action to execution, s
    action_jitter_s: float = Field(0.01, ge=0)  # extra delay per action, uniform in [0, jitter], s

    @model_validator(mode="after")
    def _ranges(self) -> DynamicsConfig:
        for name in ("mass_scale", "friction_scale", "motor_scale"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} = {(low, high)}: need 0 < low <= high")
        return self

    @property
    def randomised(self) -> bool:
        """True unless every scale range is [1, 1]."""
        return any(getattr(self, n) != (1.0, 1.0) for n in ("mass_scale", "friction_scale", "motor_scale"))


class ProxyConfig(Config):
    """The real-robot proxy (sim/configs/proxy.yaml holds the defaults)."""

    camera: CameraProxyConfig = Field(default_factory=CameraProxyConfig)
    imu: ImuProxyConfig = Field(default_factory=ImuProxyConfig)
    odometry: OdometryProxyConfig = Field(default_factory=OdometryProxyConfig)
    dynamics: DynamicsConfig = Field(default_factory=DynamicsConfig)


class RealRobotProxy(RobotInterface):
    """A backend seen through delayed, noisy sensors, with randomised dynamics. `step` steps it once."""

    def __init__(self, robot: RobotInterface, cfg: ProxyConfig) -> None:
        self.robot, self.cfg = robot, cfg
        spec = robot.spec
        n = spec.num_envs
        period = 1.0 / spec.control_hz
        # IMU history: the window, the samples in flight, and one period of new ones
        in_flight = int(np.ceil((cfg.imu.latency_s + cfg.imu.jitter_s) * spec.imu_hz))
        extra = in_flight + int(np.ceil(spec.imu_hz * period))
        self._imu = StampedRing(n, spec.imu_window + extra, len(IMU_CHANNELS))
        odom_depth = int(np.ceil((cfg.odometry.latency_s + cfg.odometry.jitter_s) / period)) + 2
        self._odom = StampedRing(n, odom_depth, len(spec.proprio_fields))
        self._rngs = [np.random.default_rng() for _ in range(n)]
        self._bias = np.zeros((n, len(IMU_CHANNELS)))  # current IMU bias per env
        # frames in flight per env: (stamp, due, image)
        self._frames: list[deque[tuple[float, float, np.ndarray]]] = [deque() for _ in range(n)]
        self._frame = None if spec.image_shape is None else np.zeros((n, *spec.image_shape), dtype=np.uint8)
        self._frame_stamp = np.zeros(n)
        self._last_captured = [np.zeros(0, dtype=np.uint8)] * n  # newest processed image, for holds
        self._seen = np.full((n, 3), -np.inf)  # newest frame, IMU and odometry stamps ingested
        self._due = np.full((n, 3), -np.inf)  # newest delivery time per stream (keeps deliveries in order)
        self._actions: list[deque[tuple[float, int, np.ndarray]]] = [deque() for _ in range(n)]
        defaults = spec.contract.layout.defaults
        self._exec_skill = np.full(n, spec.contract.safe_skill_id, dtype=np.int64)
        self._exec_params = np.tile(defaults, (n, 1))
        self._scales = {k: np.ones(n) for k in ("mass", "friction", "motor")}
        self._last: Observation | None = None

    @property
    def spec(self) -> RobotSpec:
        return self.robot.spec

    @property
    def connected(self) -> bool:
        return self.robot.connected

    def connect(self) -> None:
        self.robot.connect()

    def close(self) -> None:
        self.robot.close()

    def reset(self, seed: int | None = None, envs: Sequence[int] | np.ndarray | None = None) -> Observation:
        idx = env_indices(envs, self.spec.num_envs)
        imu = self.cfg.imu
        bias_std = np.array([imu.accel_bias_std] * 3 + [imu.gyro_bias_std] * 3)
        for i in idx:
            if seed is not None:
                self._rngs[i] = np.random.default_rng([seed + int(i), 1])  # a stream apart from the backend's
            rng = self._rngs[i]
            self._bias[i] = bias_std * rng.standard_normal(len(IMU_CHANNELS))
            for name, (low, high) in self._scale_ranges().items():
                self._scales[name][i] = rng.uniform(low, high)
            self._frames[i].clear()
            self._actions[i].clear()
            self._seen[i] = self._due[i] = -np.inf
        self._imu.clear(idx)
        self._odom.clear(idx)
        self._exec_skill[idx] = self.spec.contract.safe_skill_id
        self._exec_params[idx] = self.spec.contract.layout.defaults
        if self.cfg.dynamics.randomised:
            self.robot.set_dynamics(DynamicsScales(**{k: v.copy() for k, v in self._scales.items()}))
        obs = self.robot.reset(seed=seed, envs=idx)
        self._ingest(obs, reset=np.isin(np.arange(self.spec.num_envs), idx))
        return self._deliver(obs)

    def observation(self) -> Observation:
        if self._last is None:
            raise RuntimeError("RealRobotProxy: reset() before observation()")
        return self._last

    def send_action(self, skill: np.ndarray, params: np.ndarray) -> AppliedAction:
        applied = clip_actions(self.spec.contract, skill, params, self.spec.num_envs)
        dyn = self.cfg.dynamics
        now = self.observation().time_s
        for i, queue in enumerate(self._actions):
            due = now[i] + dyn.action_latency_s + self._rngs[i].uniform(0.0, dyn.action_jitter_s)
            due = max(due, queue[-1][0] if queue else -np.inf)  # actions execute in the order sent
            queue.append((due, int(applied.skill[i]), applied.params[i]))
        return applied

    def step(self) -> Observation:
        now = self.observation().time_s
        for i, queue in enumerate(self._actions):
            while queue and queue[0][0] <= now[i] + 1e-9:
                _, self._exec_skill[i], self._exec_params[i] = queue.popleft()
        self.robot.send_action(self._exec_skill.copy(), self._exec_params.copy())
        obs = self.robot.step()
        self._ingest(obs, reset=np.zeros(self.spec.num_envs, dtype=bool))
        return self._deliver(obs)

    def _scale_ranges(self) -> dict[str, tuple[float, float]]:
        d = self.cfg.dynamics
        return {"mass": d.mass_scale, "friction": d.friction_scale, "motor": d.motor_scale}

    def _ingest(self, obs: Observation, reset: np.ndarray) -> None:
        """Take the new samples of `obs` into the delay lines, degrading them as they arrive.

        Samples of envs that were just reset are due at once (captured while the robot settled).
        """
        for i in range(self.spec.num_envs):
            now = obs.time_s[i] if reset[i] else None
            if obs.image is not None and obs.image_stamp_s[i] > self._seen[i, 0]:
                self._seen[i, 0] = obs.image_stamp_s[i]
                self._ingest_frame(i, obs.image_stamp_s[i], obs.image[i], now)
            new = obs.imu_stamps_s[i] > self._seen[i, 1]
            if new.any():
                self._seen[i, 1] = obs.imu_stamps_s[i, -1]
                self._ingest_imu(i, obs.imu_stamps_s[i, new], obs.imu[i, new], now)
            if obs.proprio_stamp_s[i] > self._seen[i, 2]:
                self._seen[i, 2] = stamp = obs.proprio_stamp_s[i]
                odom = self.cfg.odometry
                due = self._due_times(i, 2, np.array([stamp]), odom.latency_s, odom.jitter_s, now)
                self._odom.extend(np.array([i]), np.array([stamp]), obs.proprio[i][None, None], due)

    def _ingest_frame(self, i: int, stamp: float, image: np.ndarray, now: float | None) -> None:
        cam, rng = self.cfg.camera, self._rngs[i]
        first = now is not None  # the frame a reset returns is never lost
        if not first and rng.random() < cam.drop_prob:
            return
        if not first and rng.random() < cam.hold_prob:
            image = self._last_captured[i]
        else:
            image = self._degrade(image, rng)
            self._last_captured[i] = image
        due = self._due_times(i, 0, np.array([stamp]), cam.latency_s, cam.jitter_s, now)[0]
        self._frames[i].append((stamp, due, image))

    def _ingest_imu(self, i: int, stamps: np.ndarray, values: np.ndarray, now: float | None) -> None:
        """Add bias (random walk) and white noise to S new samples. Shapes: stamps (S,), values (S, 6)."""
        imu, rng = self.cfg.imu, self._rngs[i]
        walk = np.array([imu.accel_bias_walk] * 3 + [imu.gyro_bias_walk] * 3)
        noise = np.array([imu.accel_noise_std] * 3 + [imu.gyro_noise_std] * 3)
        dt = 1.0 / self.spec.imu_hz
        steps = walk * np.sqrt(dt) * rng.standard_normal(values.shape)  # (S, 6)
        bias = self._bias[i] + np.cumsum(steps, axis=0)  # (S, 6) bias at each sample
        self._bias[i] = bias[-1]
        noisy = values + bias + noise * rng.standard_normal(values.shape)
        due = self._due_times(i, 1, stamps, imu.latency_s, imu.jitter_s, now)
        self._imu.extend(np.array([i]), stamps, noisy[None], due)

    def _due_times(
        self, i: int, stream: int, stamps: np.ndarray, latency: float, jitter: float, now: float | None
    ) -> np.ndarray:
        """Delivery times (S,) of samples stamped (S,): stamp + latency + jitter, never out of order.

        At a reset (`now` given) all of them are delivered by `now`: each at stamp + latency or at `now`,
        whichever comes first.
        """
        if now is not None:
            due = np.minimum(stamps + latency, now)
        else:
            due = stamps + latency + self._rngs[i].uniform(0.0, jitter, len(stamps))
            due = np.maximum.accumulate(np.maximum(due, self._due[i, stream]))
        self._due[i, stream] = due[-1]
        return due

    def _degrade(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Exposure gain, blur and pixel noise on one (H, W, 3) uint8 frame; identity when all are 0."""
        cam = self.cfg.camera
        if cam.exposure_std == 0 and cam.blur_sigma_px == 0 and cam.noise_std == 0:
            return image.copy()
        out = image.astype(np.float32) * np.exp(cam.exposure_std * rng.standard_normal())
        if cam.blur_sigma_px > 0:
            out = gaussian_filter(out, sigma=(cam.blur_sigma_px, cam.blur_sigma_px, 0))
        if cam.noise_std > 0:
            out += cam.noise_std * rng.standard_normal(out.shape).astype(np.float32)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)

    def _deliver(self, obs: Observation) -> Observation:
        """`obs` with each sensor replaced by what has arrived by `obs.time_s`."""
        now = obs.time_s
        for i, queue in enumerate(self._frames):
            while queue and queue[0][1] <= now[i] + 1e-9:
                self._frame_stamp[i], _, self._frame[i] = queue.popleft()
        imu, imu_stamps, imu_arrival = self._imu.latest(self.spec.imu_window, until=now + 1e-9)
        proprio, proprio_stamp, _ = self._odom.latest(1, until=now + 1e-9)
        self._last = Observation(
            time_s=now,
            image=None if self._frame is None else self._frame.copy(),
            image_stamp_s=None if self._frame is None else self._frame_stamp.copy(),
            imu=imu.astype(np.float32),
            imu_stamps_s=imu_stamps,
            proprio=proprio[:, 0].astype(np.float32),
            proprio_stamp_s=proprio_stamp[:, 0],
            privileged=obs.privileged,
            skill=obs.skill,
            task=obs.task,
            imu_arrival_s=imu_arrival,
        )
        return self._last

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

from policies.camera_model import CameraModel
from policies.config import PROJECT_ROOT, Config
from sim.camera_effects import CameraEffects, LensConfig, LensDraw, Remap, nominal_camera
from sim.motor_model import ActuatorParams
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
from sim.robots.diffbot import constants as C
from sim.room_appearance import RoomConfig, RoomDraw, RoomSampler
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
    # Mounting misalignment per episode, uniform in [-a, a] about each axis, rad: a board screwed to a chassis
    # sits within ~1-2 deg of the drawing (and MEMS die-to-package alignment adds ~1 deg, MPU-6050 datasheet).
    misalignment_rad: float = Field(0.0, ge=0, le=0.2)
    # Scale-factor error per axis and episode, uniform in [-e, e], relative: MPU-6050 datasheet, "sensitivity
    # scale factor tolerance" +-3% (gyro and accelerometer).
    scale_error: float = Field(0.0, ge=0, le=0.2)


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
    # Wheel motors (`sim.motor_model`), drawn per episode, each uniform in [low, high]; off at the defaults.
    motor_lag_s: tuple[float, float] = (0.0, 0.0)  # first-order time constant of the wheel speed, s
    deadband_radps: tuple[float, float] = (0.0, 0.0)  # wheel commands below this do not turn it, rad/s
    battery_voltage: tuple[float, float] = (1.0, 1.0)  # at the episode's start, relative to nominal
    battery_sag_per_s: tuple[float, float] = (0.0, 0.0)  # voltage lost per second, relative
    # Wheel radius against the nominal the base controller and odometry assume, relative: both wheels scaled
    # by one draw, then each by its own in [-mismatch, mismatch] (UMBmark's unequal wheel diameters).
    wheel_radius_scale: tuple[float, float] = (1.0, 1.0)
    wheel_radius_mismatch: float = Field(0.0, ge=0, le=0.1)

    @model_validator(mode="after")
    def _ranges(self) -> DynamicsConfig:
        for name in ("mass_scale", "friction_scale", "motor_scale", "wheel_radius_scale", "battery_voltage"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} = {(low, high)}: need 0 < low <= high")
        for name in ("motor_lag_s", "deadband_radps", "battery_sag_per_s"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} = {(low, high)}: need 0 <= low <= high")
        if self.battery_voltage[1] > 1.5:
            raise ValueError(f"battery_voltage = {self.battery_voltage}: need high <= 1.5 (relative)")
        return self

    @property
    def randomised(self) -> bool:
        """True unless every scale range is [1, 1]."""
        ones = ("mass_scale", "friction_scale", "motor_scale")
        return any(getattr(self, n) != (1.0, 1.0) for n in ones) or self.wheels

    @property
    def wheels(self) -> bool:
        """True when the wheels' radii are drawn off the nominal."""
        return self.wheel_radius_scale != (1.0, 1.0) or self.wheel_radius_mismatch > 0

    @property
    def motors(self) -> bool:
        """True when the wheel motors are not ideal servos."""
        return (self.motor_lag_s[1] > 0 or self.deadband_radps[1] > 0 or self.battery_voltage != (1.0, 1.0)
                or self.battery_sag_per_s[1] > 0)  # fmt: skip


class ProxyConfig(Config):
    """The real-robot proxy (sim/configs/proxy.yaml holds the defaults)."""

    camera: CameraProxyConfig = Field(default_factory=CameraProxyConfig)
    imu: ImuProxyConfig = Field(default_factory=ImuProxyConfig)
    odometry: OdometryProxyConfig = Field(default_factory=OdometryProxyConfig)
    dynamics: DynamicsConfig = Field(default_factory=DynamicsConfig)
    lens: LensConfig = Field(default_factory=LensConfig)  # the camera's own effects (sim.camera_effects)
    room: RoomConfig = Field(default_factory=RoomConfig)  # the room around the arena (sim.room_appearance)


def robot_camera(height: int, width: int, proxy: ProxyConfig | None = None) -> CameraModel:
    """The robot's forward camera at `height` x `width` px, through the proxy's lens when given: the camera
    a student trained on these frames learnt from (`policies.export` writes it into the manifest)."""
    return nominal_camera((proxy or ProxyConfig()).lens, height, width, C.CAMERA_FOVY_DEG)


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
        self._wheel_radius = np.ones((n, 2))
        self._imu_mount = np.tile(np.eye(3), (n, 1, 1))  # (N, 3, 3) IMU frame from the body frame
        self._imu_scale = np.ones((n, len(IMU_CHANNELS)))  # (N, 6) scale factor per channel
        self._motors = {k: np.zeros(n) for k in ("lag_s", "deadband_radps", "voltage", "sag_per_s")}
        self._motors["voltage"][:] = 1.0
        self._rooms: list[RoomDraw | None] = [None] * n
        self._room = RoomSampler(cfg.room, PROJECT_ROOT, C.MARKER_COLOURS) if cfg.room.active else None
        self._lens: CameraEffects | None = None
        if spec.image_shape is not None:
            h, w = spec.image_shape[:2]
            hfov = 2 * np.arctan(np.tan(np.radians(C.CAMERA_FOVY_DEG) / 2) * w / h)
            lens = CameraEffects(cfg.lens, h, w, hfov)
            self._lens = lens if lens.active else None
        self._lens_draws: list[tuple[LensDraw, Remap | None]] = []  # per env, drawn again at each reset
        if self._lens is not None:  # frames of an env not reset yet pass through some camera too
            self._lens_draws = [(d, self._lens.remap(d)) for d in (self._lens.draw(r) for r in self._rngs)]
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
            self._draw_gap(i, rng)
            self._frames[i].clear()
            self._actions[i].clear()
            self._seen[i] = self._due[i] = -np.inf
        self._imu.clear(idx)
        self._odom.clear(idx)
        self._exec_skill[idx] = self.spec.contract.safe_skill_id
        self._exec_params[idx] = self.spec.contract.layout.defaults
        dyn = self.cfg.dynamics
        if dyn.randomised:
            radius = self._wheel_radius.copy() if dyn.wheels else None
            scales = {k: v.copy() for k, v in self._scales.items()}
            self.robot.set_dynamics(DynamicsScales(**scales, wheel_radius=radius))
        if dyn.motors:
            self.robot.set_actuators(ActuatorParams(**{k: v.copy() for k, v in self._motors.items()}))
        if self._room is not None:
            self.robot.set_appearance(list(self._rooms))
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

    def _draw_gap(self, i: int, rng: np.random.Generator) -> None:
        """Env i's episode of the gap factors that are on: motors, wheels, IMU mount, camera and room. Only
        those that are on draw from `rng`, so a proxy without them (today's) draws exactly as before."""
        dyn, imu = self.cfg.dynamics, self.cfg.imu
        if dyn.motors:
            self._motors["lag_s"][i] = rng.uniform(*dyn.motor_lag_s)
            self._motors["deadband_radps"][i] = rng.uniform(*dyn.deadband_radps)
            self._motors["voltage"][i] = rng.uniform(*dyn.battery_voltage)
            self._motors["sag_per_s"][i] = rng.uniform(*dyn.battery_sag_per_s)
        if dyn.wheels:
            mismatch = rng.uniform(-dyn.wheel_radius_mismatch, dyn.wheel_radius_mismatch, 2)
            self._wheel_radius[i] = rng.uniform(*dyn.wheel_radius_scale) * (1.0 + mismatch)
        if imu.misalignment_rad > 0:
            self._imu_mount[i] = _rotation(rng.uniform(-imu.misalignment_rad, imu.misalignment_rad, 3))
        if imu.scale_error > 0:
            self._imu_scale[i] = 1.0 + rng.uniform(-imu.scale_error, imu.scale_error, len(IMU_CHANNELS))
        if self._lens is not None:
            draw = self._lens.draw(rng)
            self._lens_draws[i] = (draw, self._lens.remap(draw))
        if self._room is not None:
            self._rooms[i] = self._room.draw(rng)

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
                self._ingest_frame(i, obs.image_stamp_s[i], obs.image[i], now, _yaw_rate_at(obs, i))
            new = obs.imu_stamps_s[i] > self._seen[i, 1]
            if new.any():
                self._seen[i, 1] = obs.imu_stamps_s[i, -1]
                self._ingest_imu(i, obs.imu_stamps_s[i, new], obs.imu[i, new], now)
            if obs.proprio_stamp_s[i] > self._seen[i, 2]:
                self._seen[i, 2] = stamp = obs.proprio_stamp_s[i]
                odom = self.cfg.odometry
                due = self._due_times(i, 2, np.array([stamp]), odom.latency_s, odom.jitter_s, now)
                self._odom.extend(np.array([i]), np.array([stamp]), obs.proprio[i][None, None], due)

    def _ingest_frame(
        self, i: int, stamp: float, image: np.ndarray, now: float | None, yaw_rate: float
    ) -> None:
        cam, rng = self.cfg.camera, self._rngs[i]
        first = now is not None  # the frame a reset returns is never lost
        if not first and rng.random() < cam.drop_prob:
            return
        if not first and rng.random() < cam.hold_prob:
            image = self._last_captured[i]
        else:
            image = self._degrade(i, image, rng, yaw_rate)
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
        mount = self._imu_mount[i]  # (3, 3): accelerometer and gyro share the board
        values = (
            np.concatenate([values[:, :3] @ mount.T, values[:, 3:] @ mount.T], axis=1) * self._imu_scale[i]
        )
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

    def _degrade(self, i: int, image: np.ndarray, rng: np.random.Generator, yaw_rate: float) -> np.ndarray:
        """One (H, W, 3) uint8 frame through the camera: the lens's optics (`sim.camera_effects`, when on),
        then exposure gain, blur and pixel noise, then its processing (white balance, JPEG); identity when
        all are off."""
        cam, lens = self.cfg.camera, self._lens
        if cam.exposure_std == 0 and cam.blur_sigma_px == 0 and cam.noise_std == 0 and lens is None:
            return image.copy()
        out = image.astype(np.float32)
        if lens is not None:
            draw, remap = self._lens_draws[i]
            out = lens.optics(out, draw, remap, yaw_rate)
        out *= np.exp(cam.exposure_std * rng.standard_normal())
        if cam.blur_sigma_px > 0:
            out = gaussian_filter(out, sigma=(cam.blur_sigma_px, cam.blur_sigma_px, 0))
        if cam.noise_std > 0:
            out += cam.noise_std * rng.standard_normal(out.shape).astype(np.float32)
        if lens is not None:
            return lens.processing(out, draw)
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


def _yaw_rate_at(obs: Observation, i: int) -> float:
    """Env i's gyro z at its newest frame's capture (the newest IMU sample not after it), rad/s."""
    stamps = obs.imu_stamps_s[i]
    k = max(0, int(np.searchsorted(stamps, obs.image_stamp_s[i], side="right")) - 1)
    return float(obs.imu[i, k, 5])


def _rotation(rpy: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of roll, pitch, yaw (3,) rad, applied in x, y, z order."""
    (cr, cp, cy), (sr, sp, sy) = np.cos(rpy), np.sin(rpy)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx

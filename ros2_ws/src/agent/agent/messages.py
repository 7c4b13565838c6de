"""ROS messages <-> the numpy values of the core, with the input checks every node runs first.

Every check failure is a `MessageError` with a short `reason` (the diagnostics counter key) and a message
that says what was expected and what came. Nodes count it, warn (throttled) and keep running.

Layouts. Only standard messages are used. The state embedding, hybrid actions and the active skill travel
as sensor_msgs/JointState rather than std_msgs/Float32MultiArray: Float32MultiArray has no header, and
every consumer needs the stamp (latency is measured from the camera stamp, OPD pairs student and teacher
actions by stamp, bag replay re-times by it). JointState's `name` list makes each layout self-describing
and checkable, so an action written under one skill contract is rejected by a node holding another
instead of being misread. Values are in `position` (float64); `velocity` and `effort` stay empty.

- state embedding (/agent/state): name ["e0", ..., "e{E-1}"], position the embedding (E,);
  header = the camera image's (stamp and frame_id).
- hybrid action (/agent/action, /opd/action, /teacher/action): name ["skill", "<skill>.<param>", ...]
  over the contract's parameter slots, position [skill id, params (P,)]. For the diffbot contract:
  skill, drive.speed, drive.curvature, turn_in_place.turn_rate, stop.decel. Slots of skills not chosen
  hold their defaults, so a valid action is always inside the bounds. Stamp = the state it was computed
  from (the image stamp), or the publish time for the safe action sent on stale inputs.
- active skill (/agent/active_skill): name ["skill", "progress", "step"]: the skill being executed,
  task progress in [0, 1] and control steps since the episode start.
- privileged state (/sim/privileged_state): name ["skill", "step", <privileged field>, ...]: the active
  skill id, control steps since the episode start, then the sim twin's true state in the robot's
  `RobotSpec.privileged_fields` order (units in the names).

Stamps become float seconds (float64: ~0.24 us resolution at today's Unix time, finer than any sensor).
"""

from __future__ import annotations

import array
import math

import numpy as np
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image, Imu, JointState

from policies.runtime.student_runtime import MAX_STEP
from policies.skill_contract import SkillContract

IMAGE_ENCODINGS = ("rgb8", "bgr8")
SKILL_STATE_NAMES = ("skill", "progress", "step")


class MessageError(ValueError):
    """A malformed message. `reason` is a short key for counters: encoding, size, nonfinite, stamp, ..."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def stamp_to_sec(stamp: Time) -> float:
    """builtin_interfaces/Time -> float seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def sec_to_stamp(seconds: float) -> Time:
    """Float seconds (>= 0) -> builtin_interfaces/Time, rounded to the nanosecond."""
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def checked_stamp(stamp: Time) -> float:
    """A header stamp as float seconds; zero (unset) or malformed stamps raise MessageError."""
    if stamp.nanosec >= 1_000_000_000:
        raise MessageError("stamp", f"header.stamp.nanosec = {stamp.nanosec} is not < 1e9")
    if stamp.sec < 0 or (stamp.sec == 0 and stamp.nanosec == 0):
        raise MessageError(
            "stamp", f"header.stamp {stamp.sec}.{stamp.nanosec:09d} is zero or negative (unset?)"
        )
    return stamp_to_sec(stamp)


def image_to_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image (rgb8 or bgr8, any row padding) -> RGB array. Shape: (H, W, 3) uint8."""
    if msg.encoding not in IMAGE_ENCODINGS:
        raise MessageError(
            "encoding", f"image encoding {msg.encoding!r} not supported; publish one of {IMAGE_ENCODINGS}"
        )
    h, w, step = msg.height, msg.width, msg.step
    if h == 0 or w == 0:
        raise MessageError("size", f"empty image {w}x{h}")
    if step < 3 * w:
        raise MessageError("size", f"image step {step} < 3 * width {w} for {msg.encoding}")
    if len(msg.data) != step * h:
        raise MessageError("size", f"image data has {len(msg.data)} bytes, step * height = {step * h}")
    rows = np.frombuffer(msg.data, dtype=np.uint8).reshape(h, step)  # (H, step) with row padding
    rgb = rows[:, : 3 * w].reshape(h, w, 3)  # (H, W, 3)
    if msg.encoding == "bgr8":
        rgb = rgb[:, :, ::-1]
    return np.ascontiguousarray(rgb)


def rgb_to_image(rgb: np.ndarray, stamp: float, frame_id: str = "camera", encoding: str = "rgb8") -> Image:
    """RGB array (H, W, 3) uint8 -> sensor_msgs/Image in rgb8 or bgr8."""
    if encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"encoding must be one of {IMAGE_ENCODINGS}, got {encoding!r}")
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB array, got {rgb.dtype} {rgb.shape}")
    pixels = rgb[:, :, ::-1] if encoding == "bgr8" else rgb
    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding=encoding, step=3 * rgb.shape[1])
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), frame_id
    msg.data = array.array("B", np.ascontiguousarray(pixels).tobytes())
    return msg


def imu_to_sample(msg: Imu) -> np.ndarray:
    """sensor_msgs/Imu -> (6,) float32: accel xyz m/s^2, gyro xyz rad/s. Orientation is not used."""
    if msg.linear_acceleration_covariance[0] == -1 or msg.angular_velocity_covariance[0] == -1:
        # REP 145: covariance[0] = -1 marks a field the sensor does not provide.
        raise MessageError("missing", "IMU message without linear acceleration or angular velocity")
    a, g = msg.linear_acceleration, msg.angular_velocity
    sample = np.array([a.x, a.y, a.z, g.x, g.y, g.z], dtype=np.float64)
    if not np.all(np.isfinite(sample)):
        raise MessageError("nonfinite", f"IMU sample has NaN/Inf: {sample.tolist()}")
    return sample.astype(np.float32)


def sample_to_imu(sample: np.ndarray, stamp: float, frame_id: str = "imu") -> Imu:
    """(6,) accel xyz m/s^2, gyro xyz rad/s -> sensor_msgs/Imu (orientation marked as not provided)."""
    ax, ay, az, gx, gy, gz = (float(v) for v in np.asarray(sample, dtype=np.float64).reshape(6))
    msg = Imu()
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), frame_id
    msg.orientation_covariance[0] = -1.0
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = ax, ay, az
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = gx, gy, gz
    return msg


def _joint_msg(names: list[str], values: np.ndarray, stamp: float, frame_id: str) -> JointState:
    msg = JointState(name=list(names))  # a copy: the message must not alias the caller's layout
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), frame_id
    msg.position = array.array("d", np.asarray(values, dtype=np.float64).tobytes())
    return msg


def _joint_values(msg: JointState, names: list[str], what: str) -> np.ndarray:
    """The `position` values of a JointState whose names must equal `names`. Shape: (len(names),)."""
    if list(msg.name) != names:
        raise MessageError("layout", f"{what}: names {_short(list(msg.name))} do not match {_short(names)}")
    values = np.asarray(msg.position, dtype=np.float64)
    if values.shape != (len(names),):
        raise MessageError("size", f"{what}: {values.size} positions for {len(names)} names")
    if not np.all(np.isfinite(values)):
        raise MessageError("nonfinite", f"{what}: NaN/Inf in {names[int(np.argmin(np.isfinite(values)))]!r}")
    return values


def _short(names: list[str]) -> str:
    return f"{names[:5]}{'...' if len(names) > 5 else ''} (n={len(names)})"


def embedding_names(dim: int) -> list[str]:
    return [f"e{i}" for i in range(dim)]


def embedding_to_msg(embedding: np.ndarray, stamp: float, frame_id: str, names: list[str]) -> JointState:
    """State embedding (E,) -> JointState; `names` = embedding_names(E), cached by the caller."""
    return _joint_msg(names, embedding, stamp, frame_id)


def msg_to_embedding(msg: JointState, names: list[str]) -> np.ndarray:
    """JointState -> state embedding (E,) float32, checked against `names` = embedding_names(E)."""
    values = _joint_values(msg, names, "state embedding")
    with np.errstate(over="ignore"):
        embedding = values.astype(np.float32)
    if not np.all(np.isfinite(embedding)):  # finite as float64, not as the model's float32
        bad = names[int(np.argmin(np.isfinite(embedding)))]
        raise MessageError("nonfinite", f"state embedding: {bad!r} overflows float32")
    return embedding


class ActionCodec:
    """Hybrid action (skill id, params (P,)) <-> JointState, in the layout of one skill contract."""

    def __init__(self, contract: SkillContract) -> None:
        self.contract = contract
        self.names = ["skill"] + [f"{s.name}.{p.name}" for s in contract.skills for p in s.params]

    def to_msg(self, skill: int, params: np.ndarray, stamp: float, frame_id: str = "") -> JointState:
        """Encode an action that is already within the contract (see SkillContract.clip)."""
        values = np.concatenate([[float(skill)], np.asarray(params, dtype=np.float64)])  # (1 + P,)
        return _joint_msg(self.names, values, stamp, frame_id)

    def from_msg(self, msg: JointState, bounded: bool = True) -> tuple[int, np.ndarray]:
        """Decode and check an action: names, integral skill id in range, params within their bounds.

        A robot passes `bounded=False`: it clips parameters into the contract itself (SkillContract.clip).
        """
        values = _joint_values(msg, self.names, "action")
        skill_value, params = values[0], values[1:]  # (P,)
        if skill_value != math.floor(skill_value) or not 0 <= skill_value < self.contract.num_skills:
            raise MessageError("skill", f"action skill id {skill_value} is not an integer in "
                               f"[0, {self.contract.num_skills - 1}] ({self.contract.names})")  # fmt: skip
        if not bounded:
            return int(skill_value), params
        layout = self.contract.layout
        bad = np.flatnonzero((params < layout.low) | (params > layout.high))
        if bad.size:
            i = int(bad[0])
            raise MessageError("bounds", f"action {self.names[i + 1]} = {params[i]} outside "
                               f"[{layout.low[i]}, {layout.high[i]}]")  # fmt: skip
        return int(skill_value), params


def skill_state_to_msg(skill: int, progress: float, step: float, stamp: float) -> JointState:
    """Active skill, task progress [0, 1] and step index -> JointState (SKILL_STATE_NAMES)."""
    return _joint_msg(list(SKILL_STATE_NAMES), np.array([skill, progress, step], dtype=np.float64), stamp, "")


def msg_to_skill_state(msg: JointState, num_skills: int) -> tuple[int, float, float]:
    """JointState -> (skill id, progress, step), each checked against its range."""
    skill, progress, step = _joint_values(msg, list(SKILL_STATE_NAMES), "active skill")
    if skill != math.floor(skill) or not 0 <= skill < num_skills:
        raise MessageError("skill", f"active skill id {skill} is not an integer in [0, {num_skills - 1}]")
    if not 0.0 <= progress <= 1.0:
        raise MessageError("range", f"task progress {progress} outside [0, 1]")
    if not 0.0 <= step <= MAX_STEP:
        raise MessageError("range", f"step {step} outside [0, {MAX_STEP:g}]")
    return int(skill), float(progress), float(step)


def privileged_names(fields: tuple[str, ...] | list[str]) -> list[str]:
    """Layout of the privileged state message: active skill, step, then the robot's privileged fields."""
    return ["skill", "step", *fields]


def privileged_to_msg(
    privileged: np.ndarray, skill: int, step: int, stamp: float, names: list[str]
) -> JointState:
    """Privileged state (Dq,), active skill and step -> JointState; `names` = privileged_names(fields)."""
    head = [float(skill), float(step)]
    values = np.concatenate([head, np.asarray(privileged, dtype=np.float64)])  # (2 + Dq,)
    return _joint_msg(names, values, stamp, "")


def msg_to_privileged(msg: JointState, names: list[str], num_skills: int) -> tuple[int, int, np.ndarray]:
    """JointState -> (active skill id, step, privileged state (Dq,) float32), checked against `names`."""
    values = _joint_values(msg, names, "privileged state")
    skill, step = values[0], values[1]
    if skill != math.floor(skill) or not 0 <= skill < num_skills:
        raise MessageError("skill", f"active skill id {skill} is not an integer in [0, {num_skills - 1}]")
    if step != math.floor(step) or not 0 <= step <= MAX_STEP:
        raise MessageError("range", f"step {step} is not an integer in [0, {MAX_STEP:g}]")
    return int(skill), int(step), values[2:].astype(np.float32)


def odometry_to_msg(x: float, y: float, yaw: float, v: float, w: float, stamp: float) -> Odometry:
    """Planar odometry (x, y m, yaw rad in `odom`; v m/s, w rad/s in `base_link`) -> nav_msgs/Odometry."""
    msg = Odometry(child_frame_id="base_link")
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), "odom"
    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    msg.twist.twist.linear.x, msg.twist.twist.angular.z = float(v), float(w)
    return msg

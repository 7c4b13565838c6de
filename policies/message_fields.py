"""Message fields -> the core's numpy values, with the input checks every consumer runs first.

Duck-typed over message objects: rclpy's generated classes on the live graph and `rosbags`' dataclasses in
bag replay have the same field names, so a node and `agent replay` accept and refuse exactly the same
inputs. Nothing here imports ROS; building messages stays in `agent.messages`, which documents the layouts.

Every check failure is a `MessageError` with a short `reason` (the diagnostics counter key) and a message
that says what was expected and what came.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from policies.runtime.student_runtime import MAX_STEP
from policies.skill_contract import SkillContract

IMAGE_ENCODINGS = ("rgb8", "bgr8")  # what the live encoder takes on /camera/image_raw
REPLAY_ENCODINGS = (*IMAGE_ENCODINGS, "mono8")  # recorded robot cameras: mono8 too
COMPRESSED_FORMATS = ("jpeg", "png")  # sensor_msgs/CompressedImage
SKILL_STATE_NAMES = ("skill", "progress", "step")


class MessageError(ValueError):
    """A malformed message. `reason` is a short key for counters: encoding, size, nonfinite, stamp, ..."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def stamp_to_sec(stamp: Any) -> float:
    """builtin_interfaces/Time -> float seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def checked_stamp(stamp: Any) -> float:
    """A header stamp as float seconds; zero (unset) or malformed stamps raise MessageError."""
    if stamp.nanosec >= 1_000_000_000:
        raise MessageError("stamp", f"header.stamp.nanosec = {stamp.nanosec} is not < 1e9")
    if stamp.sec < 0 or (stamp.sec == 0 and stamp.nanosec == 0):
        raise MessageError(
            "stamp", f"header.stamp {stamp.sec}.{stamp.nanosec:09d} is zero or negative (unset?)"
        )
    return stamp_to_sec(stamp)


def image_to_rgb(msg: Any, encodings: tuple[str, ...] = IMAGE_ENCODINGS) -> np.ndarray:
    """sensor_msgs/Image (rgb8, bgr8, or mono8 where `encodings` allows it; any row padding) -> RGB array.
    Shape: (H, W, 3) uint8."""
    if msg.encoding not in encodings:
        raise MessageError(
            "encoding", f"image encoding {msg.encoding!r} not supported; publish one of {encodings}"
        )
    channels = 1 if msg.encoding == "mono8" else 3
    h, w, step = msg.height, msg.width, msg.step
    if h == 0 or w == 0:
        raise MessageError("size", f"empty image {w}x{h}")
    if step < channels * w:
        raise MessageError("size", f"image step {step} < {channels} * width {w} for {msg.encoding}")
    if len(msg.data) != step * h:
        raise MessageError("size", f"image data has {len(msg.data)} bytes, step * height = {step * h}")
    rows = np.frombuffer(msg.data, dtype=np.uint8).reshape(h, step)  # (H, step) with row padding
    pixels = rows[:, : channels * w].reshape(h, w, channels)  # (H, W, C)
    if msg.encoding == "mono8":
        return np.ascontiguousarray(np.repeat(pixels, 3, axis=2))
    if msg.encoding == "bgr8":
        pixels = pixels[:, :, ::-1]
    return np.ascontiguousarray(pixels)


def compressed_to_rgb(msg: Any) -> np.ndarray:
    """sensor_msgs/CompressedImage (JPEG or PNG; `format` as image_transport writes it, e.g. "rgb8; jpeg
    compressed bgr8" or plain "jpeg") -> RGB array (H, W, 3) uint8. Decoded with Pillow, which reads the
    codec from the data itself; the format string only has to name a supported one."""
    from PIL import Image, UnidentifiedImageError

    fmt = str(msg.format).lower()
    if not any(name in fmt for name in COMPRESSED_FORMATS):
        raise MessageError("encoding", f"compressed format {msg.format!r}: not one of {COMPRESSED_FORMATS}")
    try:
        with Image.open(io.BytesIO(bytes(msg.data))) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()  # (H, W, 3)
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise MessageError("decode", f"compressed image ({msg.format!r}) does not decode: {err}") from None


def imu_to_sample(msg: Any) -> np.ndarray:
    """sensor_msgs/Imu -> (6,) float32: accel xyz m/s^2, gyro xyz rad/s. Orientation is not used."""
    if msg.linear_acceleration_covariance[0] == -1 or msg.angular_velocity_covariance[0] == -1:
        # REP 145: covariance[0] = -1 marks a field the sensor does not provide.
        raise MessageError("missing", "IMU message without linear acceleration or angular velocity")
    a, g = msg.linear_acceleration, msg.angular_velocity
    sample = np.array([a.x, a.y, a.z, g.x, g.y, g.z], dtype=np.float64)
    if not np.all(np.isfinite(sample)):
        raise MessageError("nonfinite", f"IMU sample has NaN/Inf: {sample.tolist()}")
    return sample.astype(np.float32)


def joint_values(msg: Any, names: list[str], what: str) -> np.ndarray:
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


def msg_to_embedding(msg: Any, names: list[str]) -> np.ndarray:
    """JointState -> state embedding (E,) float32, checked against `names` = embedding_names(E)."""
    values = joint_values(msg, names, "state embedding")
    with np.errstate(over="ignore"):
        embedding = values.astype(np.float32)
    if not np.all(np.isfinite(embedding)):  # finite as float64, not as the model's float32
        bad = names[int(np.argmin(np.isfinite(embedding)))]
        raise MessageError("nonfinite", f"state embedding: {bad!r} overflows float32")
    return embedding


def action_names(contract: SkillContract) -> list[str]:
    """Layout of a hybrid action message: "skill", then "<skill>.<param>" over the contract's slots."""
    return ["skill"] + [f"{s.name}.{p.name}" for s in contract.skills for p in s.params]


def msg_to_action(msg: Any, contract: SkillContract, bounded: bool = True) -> tuple[int, np.ndarray]:
    """Decode and check a hybrid action: names, integral skill id in range, params (P,) within bounds.

    A robot passes `bounded=False`: it clips parameters into the contract itself (SkillContract.clip).
    """
    names = action_names(contract)
    values = joint_values(msg, names, "action")
    skill_value, params = values[0], values[1:]  # (P,)
    if skill_value != math.floor(skill_value) or not 0 <= skill_value < contract.num_skills:
        raise MessageError("skill", f"action skill id {skill_value} is not an integer in "
                           f"[0, {contract.num_skills - 1}] ({contract.names})")  # fmt: skip
    if not bounded:
        return int(skill_value), params
    layout = contract.layout
    bad = np.flatnonzero((params < layout.low) | (params > layout.high))
    if bad.size:
        i = int(bad[0])
        raise MessageError("bounds", f"action {names[i + 1]} = {params[i]} outside "
                           f"[{layout.low[i]}, {layout.high[i]}]")  # fmt: skip
    return int(skill_value), params


def msg_to_skill_state(msg: Any, num_skills: int) -> tuple[int, float, float]:
    """JointState -> (skill id, progress, step), each checked against its range."""
    skill, progress, step = joint_values(msg, list(SKILL_STATE_NAMES), "active skill")
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


def msg_to_privileged(msg: Any, names: list[str], num_skills: int) -> tuple[int, int, np.ndarray]:
    """JointState -> (active skill id, step, privileged state (Dq,) float32), checked against `names`."""
    values = joint_values(msg, names, "privileged state")
    skill, step = values[0], values[1]
    if skill != math.floor(skill) or not 0 <= skill < num_skills:
        raise MessageError("skill", f"active skill id {skill} is not an integer in [0, {num_skills - 1}]")
    if step != math.floor(step) or not 0 <= step <= MAX_STEP:
        raise MessageError("range", f"step {step} is not an integer in [0, {MAX_STEP:g}]")
    return int(skill), int(step), values[2:].astype(np.float32)

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

from policies.camera_model import CameraModel
from policies.runtime.student_runtime import MAX_STEP
from policies.skill_contract import SkillContract

IMAGE_ENCODINGS = ("rgb8", "bgr8")  # what the live encoder takes on /camera/image_raw
REPLAY_ENCODINGS = (*IMAGE_ENCODINGS, "mono8")  # recorded robot cameras: mono8 too
COMPRESSED_FORMATS = ("jpeg", "png")  # sensor_msgs/CompressedImage
MAX_COMPRESSED_PIXELS = 8192 * 8192  # larger is no camera frame: a corrupt or hostile header, px
SKILL_STATE_NAMES = ("skill", "progress", "step")
SOURCES = ("student", "teacher", "safe")  # agent_interfaces/HybridAction.SOURCE_*, by value


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
    codec from the data itself: the data must be JPEG or PNG (Pillow would also take TIFF, BMP, DDS...),
    and its header's size is checked before any pixel is decoded."""
    from PIL import Image

    fmt = str(msg.format).lower()
    if not any(name in fmt for name in COMPRESSED_FORMATS):
        raise MessageError("encoding", f"compressed format {msg.format!r}: not one of {COMPRESSED_FORMATS}")
    try:
        with Image.open(io.BytesIO(bytes(msg.data)), formats=("JPEG", "PNG")) as img:
            w, h = img.size
            if w * h > MAX_COMPRESSED_PIXELS:
                raise MessageError("size", f"compressed image of {w}x{h} px, over {MAX_COMPRESSED_PIXELS} px")
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()  # (H, W, 3)
    except MessageError:
        raise
    except Exception as err:  # Pillow's decoders raise an open set of errors on corrupt data
        raise MessageError("decode", f"compressed image ({msg.format!r}) does not decode: {err!r}") from None


def imu_to_sample(msg: Any) -> np.ndarray:
    """sensor_msgs/Imu -> (6,) float32: accel xyz m/s^2, gyro xyz rad/s. Orientation is not used."""
    if msg.linear_acceleration_covariance[0] == -1 or msg.angular_velocity_covariance[0] == -1:
        # REP 145: covariance[0] = -1 marks a field the sensor does not provide.
        raise MessageError("missing", "IMU message without linear acceleration or angular velocity")
    a, g = msg.linear_acceleration, msg.angular_velocity
    sample = np.array([a.x, a.y, a.z, g.x, g.y, g.z], dtype=np.float64)
    if not np.all(np.isfinite(sample)):
        raise MessageError("nonfinite", f"IMU sample has NaN/Inf: {sample.tolist()}")
    return _to_float32(sample, "IMU sample")


def camera_info_to_model(msg: Any) -> CameraModel:
    """sensor_msgs/CameraInfo -> CameraModel (K's fx, fy, cx, cy; width, height; distortion_model and D).

    K all zero is an uncalibrated camera (the message's own convention): refused, as are a missing size,
    non-positive focal lengths and NaN/Inf.
    """
    k = np.asarray(msg.k, dtype=np.float64)  # (9,) row-major 3x3
    d = np.asarray(msg.d, dtype=np.float64)
    if k.shape != (9,) or not np.all(np.isfinite(k)) or not np.all(np.isfinite(d)):
        raise MessageError("nonfinite", f"camera info: K {k.tolist()} (9) or D {d.tolist()} not finite")
    if not np.any(k):
        raise MessageError("uncalibrated", "camera info: K is all zero (an uncalibrated camera)")
    fx, fy, cx, cy = k[0], k[4], k[2], k[5]
    if msg.width <= 0 or msg.height <= 0 or fx <= 0 or fy <= 0:
        raise MessageError("range", f"camera info: {msg.width}x{msg.height} px with fx {fx}, fy {fy}: "
                           "need a size and positive focal lengths")  # fmt: skip
    return CameraModel(width=msg.width, height=msg.height, fx=fx, fy=fy, cx=cx, cy=cy,
                       distortion_model=msg.distortion_model, d=tuple(d.tolist()))  # fmt: skip


def _to_float32(values: np.ndarray, what: str) -> np.ndarray:
    """Finite float64 values -> float32. A value past float32's range would become Inf after the check for
    NaN/Inf, so it is refused here instead of reaching a model."""
    with np.errstate(over="ignore"):
        out = values.astype(np.float32)
    if not np.all(np.isfinite(out)):
        raise MessageError("range", f"{what}: a value beyond float32's range in {values.tolist()}")
    return out


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


def msg_to_embedding(msg: Any, dim: int, encoder_hash: str) -> np.ndarray:
    """agent_interfaces/StateEmbedding -> state embedding (E,) float32, checked: computed by the encoder
    `encoder_hash` names (`Artifact.encoder_hash`), `dim` values, all finite."""
    if msg.encoder_hash != encoder_hash:
        raise MessageError("encoder", f"state embedding from encoder {msg.encoder_hash[:12] or '(unnamed)'}"
                           f"..., this node's artifact has encoder {encoder_hash[:12]}...: embeddings of "
                           "different encoders are not comparable")  # fmt: skip
    embedding = np.asarray(msg.data, dtype=np.float32)
    if embedding.shape != (dim,):
        raise MessageError("size", f"state embedding has {embedding.size} values, the artifact's is {dim}")
    if not np.all(np.isfinite(embedding)):
        bad = int(np.argmin(np.isfinite(embedding)))
        raise MessageError("nonfinite", f"state embedding: NaN/Inf at index {bad}")
    return embedding


def param_names(contract: SkillContract) -> list[str]:
    """The contract's parameter slots as "<skill>.<param>", in the order of a hybrid action's `params`."""
    return [f"{s.name}.{p.name}" for s in contract.skills for p in s.params]


def msg_to_action(msg: Any, contract: SkillContract, bounded: bool = True) -> tuple[int, np.ndarray]:
    """Decode and check agent_interfaces/HybridAction: written in this contract (its fingerprint), a known
    source, skill id and name of the contract, params (P,) finite and within bounds.

    A robot passes `bounded=False`: it clips parameters into the contract itself (SkillContract.clip).
    """
    if msg.contract != contract.fingerprint:
        raise MessageError("contract", f"action written in contract {msg.contract or '(unnamed)'!r}, "
                           f"this node holds {contract.fingerprint!r} ({contract.robot}: "
                           f"{contract.names})")  # fmt: skip
    if msg.source >= len(SOURCES):
        raise MessageError("source", f"action source {msg.source} not one of {list(enumerate(SOURCES))}")
    skill = int(msg.skill)
    if skill >= contract.num_skills or msg.skill_name != contract.names[skill]:
        raise MessageError("skill", f"action skill {skill} {msg.skill_name!r} is not a skill of the "
                           f"contract {list(enumerate(contract.names))}")  # fmt: skip
    params = np.asarray(msg.params, dtype=np.float64)  # (P,)
    names = param_names(contract)
    if params.shape != (len(names),):
        raise MessageError("size", f"action has {params.size} params, the contract's slots: {_short(names)}")
    if not np.all(np.isfinite(params)):
        bad = names[int(np.argmin(np.isfinite(params)))]
        raise MessageError("nonfinite", f"action: NaN/Inf in {bad!r}")
    if not bounded:
        return skill, params
    layout = contract.layout
    bad = np.flatnonzero((params < layout.low) | (params > layout.high))
    if bad.size:
        i = int(bad[0])
        raise MessageError("bounds", f"action {names[i]} = {params[i]} outside "
                           f"[{layout.low[i]}, {layout.high[i]}]")  # fmt: skip
    return skill, params


def action_source(msg: Any) -> str:
    """Who decided a checked HybridAction: one of SOURCES."""
    return SOURCES[msg.source]


def msg_to_gate(msg: Any) -> dict[str, Any]:
    """agent_interfaces/GateState -> the decision as replay compares it: stamp (s), source, reason, error,
    threshold, and the context it was made in (decided_at, teacher_upto: NaN = no teacher state yet)."""
    if msg.source >= len(SOURCES):
        raise MessageError("source", f"gate source {msg.source} is none of {SOURCES}")
    values = {"error": msg.error, "threshold": msg.threshold, "decided_at": msg.decided_at,
              "teacher_upto": msg.teacher_upto}  # fmt: skip
    if math.isnan(msg.decided_at) or math.isinf(msg.teacher_upto):
        raise MessageError("nonfinite", f"gate context not finite: {values}")
    return {
        "stamp": checked_stamp(msg.header.stamp),
        "source": SOURCES[msg.source],
        "reason": msg.reason,
        **values,
    }


def msg_to_skill_state(msg: Any, num_skills: int) -> tuple[int, float, float]:
    """JointState -> (skill id, progress, step), each checked against its range."""
    return checked_skill_state(*joint_values(msg, list(SKILL_STATE_NAMES), "active skill"), num_skills)


def checked_skill_state(
    skill: float, progress: float, step: float, num_skills: int
) -> tuple[int, float, float]:
    """(skill id, progress, step) as the encoder takes them, each checked against its range (NaN fails)."""
    if not math.isfinite(skill) or skill != math.floor(skill) or not 0 <= skill < num_skills:
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
    return int(skill), int(step), _to_float32(values[2:], "privileged state")

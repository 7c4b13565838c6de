"""ROS messages <-> the numpy values of the core. This module builds messages; decoding them, with the
input checks every node runs first, is the ROS-free `policies.message_fields` (bag replay runs the same),
re-exported here. A check failure is a `MessageError`; nodes count it, warn (throttled) and keep running.

Layouts. The stack's own data travels in its own messages (agent_interfaces, ros2_ws/src/agent_interfaces;
each .msg file documents its fields):
- state embedding (/agent/state): agent_interfaces/StateEmbedding: header = the camera image's (stamp and
  frame_id), the encoder's hash (`Artifact.encoder_hash`: consumers refuse embeddings of another
  encoder), the skill state the frame was encoded with, the embedding (E,) float32.
- hybrid action (/agent/action, /opd/action, /teacher/action): agent_interfaces/HybridAction: source
  (student, teacher, safe), the contract's fingerprint (`SkillContract.fingerprint`: consumers refuse
  actions of another contract), skill id and name, params (P,) float64 over the contract's parameter
  slots; slots of skills not chosen hold their defaults, so a valid action is always inside the bounds.
  Stamp = the state it was computed from (the image stamp), or the publish time for the safe action.
- gate state (/opd/gate): agent_interfaces/GateState: source, reason, error and threshold of each OPD
  decision, and its context (decision time, newest teacher stamp held) for `agent replay`.
Two inputs that come from outside the learnt stack keep standard messages, so any task layer or
simulator can publish them without the stack's package: sensor_msgs/JointState, whose names are the
layout and are checked:
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
from agent_interfaces.msg import HybridAction, StateEmbedding
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, Imu, JointState

from policies.camera_model import CameraModel
from policies.message_fields import (  # noqa: F401  (the decoding half, re-exported for the nodes)
    IMAGE_ENCODINGS,
    SKILL_STATE_NAMES,
    SOURCES,
    MessageError,
    action_source,
    camera_info_to_model,
    checked_stamp,
    image_to_rgb,
    imu_to_sample,
    msg_to_action,
    msg_to_embedding,
    msg_to_gate,
    msg_to_privileged,
    msg_to_skill_state,
    param_names,
    privileged_names,
    stamp_to_sec,
)
from policies.skill_contract import SkillContract


def sec_to_stamp(seconds: float) -> Time:
    """Float seconds (>= 0) -> builtin_interfaces/Time, rounded to the nanosecond."""
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


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


def camera_info_msg(camera: CameraModel, stamp: float, frame_id: str = "camera") -> CameraInfo:
    """A CameraModel -> sensor_msgs/CameraInfo for the frame stamped `stamp` (no rectification: R = I,
    P = [K | 0])."""
    msg = CameraInfo(width=camera.width, height=camera.height, distortion_model=camera.distortion_model)
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), frame_id
    msg.k = [camera.fx, 0.0, camera.cx, 0.0, camera.fy, camera.cy, 0.0, 0.0, 1.0]
    msg.d = list(camera.d)
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [camera.fx, 0.0, camera.cx, 0.0, 0.0, camera.fy, camera.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


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


def embedding_to_msg(
    embedding: np.ndarray, stamp: float, frame_id: str, encoder_hash: str,
    skill_state: tuple[int, float, float],
) -> StateEmbedding:  # fmt: skip
    """State embedding (E,) of the frame at `stamp`, encoded with `skill_state` (skill, progress, step)."""
    skill, progress, step = skill_state
    msg = StateEmbedding(encoder_hash=encoder_hash, skill=int(skill), progress=float(progress),
                         step=int(step))  # fmt: skip
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), frame_id
    msg.data = array.array("f", np.asarray(embedding, dtype=np.float32).tobytes())
    return msg


class ActionCodec:
    """Hybrid action (skill id, params (P,)) <-> agent_interfaces/HybridAction, in one skill contract."""

    def __init__(self, contract: SkillContract) -> None:
        self.contract = contract
        self.fingerprint = contract.fingerprint

    def to_msg(self, skill: int, params: np.ndarray, stamp: float, source: str) -> HybridAction:
        """Encode an action that is already within the contract (see SkillContract.clip); `source` is one
        of SOURCES."""
        msg = HybridAction(source=SOURCES.index(source), contract=self.fingerprint, skill=int(skill),
                           skill_name=self.contract.names[skill])  # fmt: skip
        msg.header.stamp = sec_to_stamp(stamp)
        msg.params = array.array("d", np.asarray(params, dtype=np.float64).tobytes())
        return msg

    def from_msg(self, msg: HybridAction, bounded: bool = True) -> tuple[int, np.ndarray]:
        """Decode and check an action (`policies.message_fields.msg_to_action`)."""
        return msg_to_action(msg, self.contract, bounded)


def skill_state_to_msg(skill: int, progress: float, step: float, stamp: float) -> JointState:
    """Active skill, task progress [0, 1] and step index -> JointState (SKILL_STATE_NAMES)."""
    return _joint_msg(list(SKILL_STATE_NAMES), np.array([skill, progress, step], dtype=np.float64), stamp, "")


def privileged_to_msg(
    privileged: np.ndarray, skill: int, step: int, stamp: float, names: list[str]
) -> JointState:
    """Privileged state (Dq,), active skill and step -> JointState; `names` = privileged_names(fields)."""
    head = [float(skill), float(step)]
    values = np.concatenate([head, np.asarray(privileged, dtype=np.float64)])  # (2 + Dq,)
    return _joint_msg(names, values, stamp, "")


def odometry_to_msg(x: float, y: float, yaw: float, v: float, w: float, stamp: float) -> Odometry:
    """Planar odometry (x, y m, yaw rad in `odom`; v m/s, w rad/s in `base_link`) -> nav_msgs/Odometry."""
    msg = Odometry(child_frame_id="base_link")
    msg.header.stamp, msg.header.frame_id = sec_to_stamp(stamp), "odom"
    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    msg.twist.twist.linear.x, msg.twist.twist.angular.z = float(v), float(w)
    return msg

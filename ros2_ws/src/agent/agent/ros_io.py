"""Turn the ROS-free descriptions (graph topics and parameters, core health statuses) into rclpy objects."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from functools import cache
from typing import Any

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType
from rclpy.exceptions import InvalidHandle
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription

from agent.graph import Param, Qos
from policies.stream_stats import Status

DRAIN_MAX = 1000  # messages one callback takes at most, so a flood cannot starve the rest of its node
_RELIABILITY = {"reliable": ReliabilityPolicy.RELIABLE, "best_effort": ReliabilityPolicy.BEST_EFFORT}
_DURABILITY = {"volatile": DurabilityPolicy.VOLATILE, "transient_local": DurabilityPolicy.TRANSIENT_LOCAL}
_PARAM_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}


def qos_profile(qos: Qos) -> QoSProfile:
    """Graph QoS -> rclpy QoSProfile (KEEP_LAST)."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=qos.depth,
        reliability=_RELIABILITY[qos.reliability],
        durability=_DURABILITY[qos.durability],
    )


@cache
def msg_class(msg_type: str) -> type:
    """ "sensor_msgs/msg/Image" -> the sensor_msgs.msg.Image class."""
    pkg, kind, name = msg_type.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def param_descriptor(p: Param) -> ParameterDescriptor:
    """Descriptor with description, unit, range and choices, so `ros2 param describe` documents it."""
    text = f"{p.description} [{p.unit}]" if p.unit else p.description
    desc = ParameterDescriptor(name=p.name, type=_PARAM_TYPES[p.type], description=text)
    if p.choices:
        desc.additional_constraints = f"one of: {', '.join(p.choices)}"
    if p.low is not None and p.type is float:
        desc.floating_point_range = [
            FloatingPointRange(from_value=float(p.low), to_value=float(p.high), step=0.0)
        ]
    elif p.low is not None and p.type is int:
        desc.integer_range = [IntegerRange(from_value=int(p.low), to_value=int(p.high), step=1)]
    return desc


def diagnostic_status(name: str, status: Status, hardware_id: str = "agent") -> DiagnosticStatus:
    """Core Status -> diagnostic_msgs/DiagnosticStatus (levels share their numbers)."""
    return DiagnosticStatus(
        level=bytes([int(status.level)]),
        name=name,
        message=status.message,
        hardware_id=hardware_id,
        values=[KeyValue(key=k, value=v) for k, v in status.values.items()],
    )


def diagnostic_array(stamp: Time, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    msg = DiagnosticArray(status=statuses)
    msg.header.stamp = stamp
    return msg


def drain(sub: Subscription) -> Iterator[tuple[Any, dict]]:
    """(message, MessageInfo) of every message already queued on `sub`, taken now.

    rclpy's executors take one message per wake-up and rebuild their wait set each time, about 1 ms of
    interpreter time per message on a 2-core machine. Messages that queue up (IMU samples while the
    encoder runs a frame, a sensor driver that sends in bursts) are much cheaper taken at once from the
    callback of the first. Call it only from a callback in `sub`'s (mutually exclusive) callback group,
    which keeps the executor from taking from `sub` at the same time, or, for a subscription no executor
    takes from (`AgentNode.poll`), from one thread at a time.
    """
    try:
        with sub.handle:
            for _ in range(DRAIN_MAX):
                taken = sub.handle.take_message(sub.msg_type, sub.raw)
                if taken is None:
                    return
                yield taken
    except InvalidHandle:  # destroyed meanwhile (deactivate): nothing more to take
        return

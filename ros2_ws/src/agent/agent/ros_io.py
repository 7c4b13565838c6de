"""Turn the ROS-free descriptions (graph topics and parameters, core health statuses) into rclpy objects."""

from __future__ import annotations

import importlib
from functools import cache

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from agent.graph import Param, Qos
from policies.stream_stats import Status

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

"""The stacks visible on this ROS domain, so that an operator arms the robot they mean.

A stack is found by its arm switch: a node named like the graph's (`opd`) in any namespace, from the ROS
graph (`get_node_names_and_namespaces`) after a short discovery wait. What it is comes from its own
/diagnostics entry (`<ns>/opd: node`): lifecycle state, host and artifact (`agent.nodes.opd.OpdNode`).
Diagnostics rather than parameters: /diagnostics is global, so one subscription hears every stack at
once, and it is what an operator already reads (`ros2 topic echo /diagnostics`, rqt_robot_monitor); the
host is no setting, so it has no place among a node's parameters.

Which stacks a machine sees is DDS discovery's doing: `ROS_DOMAIN_ID` (0 by default) and
`ROS_AUTOMATIC_DISCOVERY_RANGE` (SUBNET by default: every machine on the network) decide it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from agent import graph
from agent.arming import arm_switch
from agent.ros_io import qos_profile

DIAGNOSTICS_WAIT_S = 1.5  # after discovery, for each stack's diagnostics (published once a second)
_serial = itertools.count()  # client node names stay unique within a process


@dataclass(frozen=True)
class Stack:
    """One stack on the domain, as its arm switch reports itself."""

    namespace: str  # "/robot1", or "/" for none
    host: str = "?"  # "?" while its diagnostics have not arrived
    artifact: str = "?"
    state: str = "?"  # the arm switch's lifecycle state: active = armed

    def describe(self) -> str:
        return f"{self.namespace} on host {self.host}, artifact {self.artifact}, arm switch {self.state}"


def domain() -> str:
    """This process's ROS domain and discovery range, in words, for messages about what it can see."""
    ids = os.environ.get("ROS_DOMAIN_ID") or "0 (default)"
    reach = os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") or "SUBNET (default)"
    return f"ROS_DOMAIN_ID={ids}, ROS_AUTOMATIC_DISCOVERY_RANGE={reach}"


def discover(wait_s: float, context: Context | None = None) -> list[Stack]:
    """Stacks seen within `wait_s` of discovery, sorted by namespace, each with its diagnostics where they
    arrived within DIAGNOSTICS_WAIT_S more."""
    name = arm_switch().name
    node = Node(f"agent_discover_{os.getpid()}_{next(_serial)}", context=context)
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    reports: dict[str, dict[str, str]] = {}  # namespace -> the arm switch's node entry

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            qualified, _, entry = status.name.partition(": ")
            ns, _, node_name = qualified.rpartition("/")
            if node_name == name and entry == "node":
                reports["/" + ns] = {kv.key: kv.value for kv in status.values}

    diag = graph.TOPICS["/diagnostics"]
    node.create_subscription(DiagnosticArray, diag.ros_name, on_diagnostics, qos_profile(diag.qos))
    try:
        _spin(executor, wait_s, lambda: False)
        found = sorted({ns for n, ns in node.get_node_names_and_namespaces() if n == name})
        _spin(executor, DIAGNOSTICS_WAIT_S, lambda: all(ns in reports for ns in found))
    finally:
        executor.shutdown()
        node.destroy_node()
    fields = ("host", "artifact", "state")
    return [Stack(ns, **{k: v for k, v in reports.get(ns, {}).items() if k in fields}) for ns in found]


def choose(stacks: list[Stack], namespace: str | None) -> Stack:
    """The stack to act on: the one in `namespace` ("/" or "" for none), or with None the only one visible.

    Raises RuntimeError listing what is visible when none is, or when several are and none is named. A
    named stack not (yet) visible is returned as named: the lifecycle service call then waits for it.
    """
    if namespace is not None:
        ns = "/" + namespace.strip("/")
        return next((s for s in stacks if s.namespace == ns), Stack(ns))
    if not stacks:
        raise RuntimeError(f"no stack answered: no node named {arm_switch().name!r} is visible on "
                           f"{domain()}; start one, or set those to the robot's")  # fmt: skip
    if len(stacks) > 1:
        listed = "".join(f"\n  {s.describe()}" for s in stacks)
        raise RuntimeError(f"{len(stacks)} stacks answer on {domain()}; name one with --namespace:{listed}")
    return stacks[0]


def _spin(executor: SingleThreadedExecutor, seconds: float, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not done():
        executor.spin_once(timeout_sec=0.05)

"""Arm and disarm the robot over the standard lifecycle service, as `ros2 lifecycle set` does.

The stack starts disarmed on a robot (`agent.graph.armed`): every node is configured and the arm switch, the
opd node (the one publisher of /cmd_vel), stays inactive and silent. Arming activates it; disarming
deactivates it, which sends the safe action once and leaves the base on it. This module is the client side
for machines without ros2cli (`agent arm`, `agent disarm`) and for tests; on a robot
`ros2 lifecycle set <ns>/opd activate` does the same.
"""

from __future__ import annotations

import itertools
import os
import time

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from agent import graph

TRANSITIONS = {"arm": Transition.TRANSITION_ACTIVATE, "disarm": Transition.TRANSITION_DEACTIVATE}
TARGET_STATE = {"arm": "active", "disarm": "inactive"}
_serial = itertools.count()  # client node names stay unique within a process


def arm_switch() -> graph.NodeSpec:
    """The graph node whose activation arms the robot."""
    return next(n for n in graph.NODES if n.arms)


def service_name(namespace: str, node_name: str, service: str) -> str:
    """`/ns/node/service`, with an empty namespace giving `/node/service`."""
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{ns}/{node_name}/{service}"


def set_armed(
    command: str, namespace: str = "", timeout_s: float = 10.0, context: Context | None = None
) -> str:
    """Arm or disarm (`command`) the stack in `namespace`; returns the arm switch's state afterwards.

    Uses a short-lived client node of its own in `context` (rclpy's default context if None). Raises
    RuntimeError naming the service when the node does not answer or refuses the transition (e.g. arming
    a node that failed to configure: its reason is on /diagnostics).
    """
    if command not in TRANSITIONS:
        raise ValueError(f"command {command!r}: choose one of {sorted(TRANSITIONS)}")
    name = arm_switch().name
    get_state = service_name(namespace, name, "get_state")
    client_node = Node(f"agent_{command}_{os.getpid()}_{next(_serial)}", context=context)
    executor = SingleThreadedExecutor(context=client_node.context)
    executor.add_node(client_node)
    try:
        state = _call(client_node, executor, GetState, get_state, GetState.Request(), timeout_s)
        if state.current_state.label == TARGET_STATE[command]:
            return state.current_state.label  # already there: nothing to do
        request = ChangeState.Request()
        request.transition.id = TRANSITIONS[command]
        service = service_name(namespace, name, "change_state")
        if not _call(client_node, executor, ChangeState, service, request, timeout_s).success:
            label = state.current_state.label
            raise RuntimeError(f"{service}: {command} refused in state {label!r} (see /diagnostics)")
        return _call(
            client_node, executor, GetState, get_state, GetState.Request(), timeout_s
        ).current_state.label
    finally:
        executor.shutdown()
        client_node.destroy_node()


def _call(
    node: Node, executor: SingleThreadedExecutor, srv: type, name: str, request: object, timeout_s: float
):
    client = node.create_client(srv, name)
    try:
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no such service after {timeout_s} s (is the stack running?)")
            executor.spin_once(timeout_sec=0.05)
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=max(deadline - time.monotonic(), 0.1))
        if not future.done():
            raise RuntimeError(f"{name}: no answer within {timeout_s} s")
        return future.result()
    finally:
        node.destroy_client(client)

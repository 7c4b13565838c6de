"""`agent arm` / `agent disarm`: activate or deactivate the opd node, which alone commands the base.

The same as `ros2 lifecycle set <ns>/opd activate|deactivate`, for machines without ros2cli, but it says
which robot it acts on: without --namespace it acts on the one stack visible on this ROS domain and refuses
when several answer, listing them (`agent.stack_discovery`); either way it prints the stack's namespace,
host and artifact first. Disarming sends the safe action once and leaves the robot on it.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        help="namespace of the stack (launch argument namespace; / for none); default: the only stack on "
        "this ROS domain, refused when several answer",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the node's answer")
    parser.add_argument("--discovery", type=float, default=2.0, help="seconds to look for stacks first")


def run(args: argparse.Namespace) -> int:
    import rclpy  # here, not at the top: `agent <other command>` builds this parser without loading ROS

    from agent.arming import set_armed
    from agent.stack_discovery import choose, discover

    with rclpy.init(args=[]):
        stack = choose(discover(args.discovery), args.namespace)
        print(f"{args.command}: {stack.describe()}", flush=True)
        state = set_armed(args.command, stack.namespace, args.timeout)
    print(f"{args.command}: the arm switch of {stack.namespace} is {state}")
    return 0

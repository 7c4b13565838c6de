"""`agent arm` / `agent disarm`: activate or deactivate the opd node, which alone commands the base.

The same as `ros2 lifecycle set <ns>/opd activate|deactivate`, for machines without ros2cli. Disarming sends
the safe action once and leaves the robot on it.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="", help="namespace of the stack (launch argument namespace)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the node's answer")


def run(args: argparse.Namespace) -> int:
    import rclpy  # here, not at the top: `agent <other command>` builds this parser without loading ROS

    from agent.arming import set_armed

    with rclpy.init(args=[]):
        state = set_armed(args.command, args.namespace, args.timeout)
    print(f"{args.command}: the arm switch is {state}")
    return 0

"""Hybrid action -> geometry_msgs/TwistStamped (or Twist), through the robot's own skill-to-velocity mapping.

Stamped by default: `diff_drive_controller` takes TwistStamped from Jazzy on (plain Twist is a parameter of
the opd node, `cmd_vel_stamped`, for older controllers and twist_mux).

Each robot defines that mapping once, in `sim.robots.<robot>.base_controller.BaseController.twist_command`
(what its base firmware does; every sim backend uses it too), and the contract's `robot` field picks it.
For the default diffbot: drive -> (speed, speed * curvature), turn_in_place -> (0, turn_rate),
stop -> (0, 0). Parameters without a Twist field (stop.decel) reach the robot only on the action topic.
"""

from __future__ import annotations

import importlib

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist, TwistStamped

from policies.skill_contract import SkillContract


class TwistMapping:
    """(skill, params) -> (linear.x m/s, angular.z rad/s) for the contract's robot."""

    def __init__(self, contract: SkillContract) -> None:
        module = f"sim.robots.{contract.robot}.base_controller"
        try:
            controller = importlib.import_module(module).BaseController
        except ModuleNotFoundError as err:
            expected = f"{module}.BaseController.twist_command"
            raise ValueError(f"robot {contract.robot!r} has no Twist mapping: expected {expected}") from err
        self._controller = controller(contract, num_envs=1)  # validates the contract's skills and params

    def velocity(self, skill: int, params: np.ndarray) -> tuple[float, float]:
        """Velocity command of one action; params (P,) already within the contract bounds."""
        cmd = self._controller.twist_command(np.array([skill]), np.asarray(params, dtype=np.float64)[None])
        return float(cmd.linear[0]), float(cmd.angular[0])

    def twist(self, skill: int, params: np.ndarray) -> Twist:
        msg = Twist()
        msg.linear.x, msg.angular.z = self.velocity(skill, params)
        return msg

    def twist_stamped(self, skill: int, params: np.ndarray, stamp: Time, frame_id: str) -> TwistStamped:
        """The command stamped when issued (`stamp`), in the base frame: a controller ages it from there."""
        msg = TwistStamped(twist=self.twist(skill, params))
        msg.header.stamp, msg.header.frame_id = stamp, frame_id
        return msg


def velocity_of(msg: Twist | TwistStamped) -> tuple[float, float]:
    """(linear.x, angular.z) of a base command, stamped or not (rclpy or rosbags messages alike)."""
    twist = getattr(msg, "twist", msg)
    return twist.linear.x, twist.angular.z

"""OPD node shell over real DDS: student action passed through, bad actions rejected, teacher presence."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from agent.lifecycle_node import stop_executor
from agent.messages import ActionCodec, stamp_to_sec
from agent.nodes.opd import OpdNode
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor
from rclpy.parameter import Parameter
from ros_harness import Probe, spin_for, spin_until

WARN = b"\x01"


def test_student_action_passes_through_and_bad_actions_are_rejected(
    ros_context: Context, contract_artifact: Path
) -> None:
    params = [
        Parameter("artifact_dir", value=str(contract_artifact)),
        Parameter("teacher_timeout_s", value=0.2),
    ]
    node = OpdNode(context=ros_context, parameter_overrides=params)
    probe = Probe(ros_context)
    probe.record("/opd/action", "/diagnostics")
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(probe.node)
    try:
        assert spin_until(executor, lambda: node.lifecycle_state == "active"), node.fault
        probe.advertise("/agent/action")
        assert spin_until(executor, lambda: probe.matched("/agent/action"))
        codec = ActionCodec(node.codec.contract)
        t = time.time()
        skill, params = codec.contract.action("turn_in_place", turn_rate=0.7)
        probe.publish("/agent/action", codec.to_msg(skill, params, t))
        assert spin_until(executor, lambda: len(probe.received["/opd/action"]) == 1)
        out = probe.received["/opd/action"][0]
        assert stamp_to_sec(out.header.stamp) == t
        assert codec.from_msg(out)[0] == skill and np.array_equal(codec.from_msg(out)[1], params)

        bad_params = params.copy()
        bad_params[0] = 99.0  # drive.speed far outside its bounds
        probe.publish("/agent/action", codec.to_msg(skill, bad_params, t + 0.05))
        probe.publish("/agent/action", codec.to_msg(7, params, t + 0.1))  # no skill 7
        spin_for(executor, 0.3)
        assert node.student.rejected == {"bounds": 1, "skill": 1}
        assert len(probe.received["/opd/action"]) == 1  # nothing malformed passed through

        probe.received["/diagnostics"].clear()
        assert spin_until(executor, lambda: "opd: teacher_action" in probe.diagnostics("opd"), timeout_s=3.0)
        teacher = probe.diagnostics("opd")["opd: teacher_action"]
        assert teacher.level == WARN and "nothing to distil from" in teacher.message  # no teacher: only WARN
    finally:
        stop_executor(executor)
        node.destroy_node()
        probe.node.destroy_node()

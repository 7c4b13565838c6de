"""The system clock stepped back (issue 54, fault 5): the opd node still stops the base at once.

Its watchdog timer ticks on the steady clock: on the ROS clock (the system clock without sim time) a timer
is due at a set system time, so a clock stepped back 5 s held the stop back 5.5 s. The step is made with
libfaketime in the node's process alone (the machine's clock is left as it is).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent.base_command import velocity_of
from agent.fault_graph import FAKETIME_GLOB
from agent.messages import ActionCodec
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from ros_harness import Probe, spin_for

from policies.artifact import Artifact

FAKETIME = next(iter(sorted(Path("/").glob(FAKETIME_GLOB.lstrip("/")))), None)
NS = "/clockstep"


@pytest.mark.skipif(FAKETIME is None, reason="needs libfaketime (apt install libfaketime)")
def test_a_clock_stepped_back_does_not_hold_back_the_stop(
    ros_context: Context, contract_artifact: Path, tmp_path: Path
) -> None:
    offset = tmp_path / "clock_offset"
    offset.write_text("+0\n")
    env = {**os.environ, "LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
    params = {"artifact_dir": contract_artifact, "autostart": "true", "drive": "student"}
    cmd = [sys.executable, "-m", "agent.nodes.opd", "--ros-args", "-r", f"__ns:={NS}"]
    cmd += [arg for key, value in params.items() for arg in ("-p", f"{key}:={value}")]
    codec = ActionCodec(Artifact.load(contract_artifact).contract)
    drive = codec.to_msg(*codec.contract.action("drive", speed=0.5), 0.0, "student")
    probe = Probe(ros_context, "base", namespace=NS)
    probe.record("/cmd_vel")
    probe.advertise("/agent/action")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    log = tmp_path / "opd.log"
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60.0
        while sum(velocity_of(t)[0] > 0 for t in probe.received["/cmd_vel"]) < 5:
            assert time.monotonic() < deadline, log.read_text()
            drive.header.stamp = probe.node.get_clock().now().to_msg()
            probe.publish("/agent/action", drive)
            spin_for(executor, 0.05)
        heard = len(probe.received["/cmd_vel"])
        offset.write_text("-5\n")  # the node's clock steps back 5 s, and its source falls silent
        silent_at = time.monotonic()
        stopped = lambda: any(velocity_of(t) == (0.0, 0.0) for t in probe.received["/cmd_vel"][heard:])  # noqa: E731
        while not stopped() and time.monotonic() - silent_at < 3.0:
            spin_for(executor, 0.01)
        assert stopped() and time.monotonic() - silent_at < 1.0  # input_timeout_s 0.35 s + a check, not 5.5 s
    finally:
        proc.kill()
        proc.wait()
        executor.shutdown()
        probe.node.destroy_node()

"""A node process SIGKILLed and respawned (issue 54, fault 1): the respawned opd node comes up disarmed.

The launch's lifecycle events fire once, so a node the launch respawns starts unconfigured; a lifecycle
manager (here `agent.fault_graph.configure`, right after the respawn, while the dead process's service is
still in DDS discovery) configures it, and the base hears nothing until a person arms it. That the base
stops on its own once commands stop is the sim bridge's command watchdog (test_sim_bridge_node).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from agent.arming import set_armed
from agent.base_command import velocity_of
from agent.fault_graph import configure
from agent.messages import ActionCodec
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from ros_harness import Probe, spin_for

from policies.artifact import Artifact

NS = "/respawn"


def start(artifact: Path, autostart: bool, log: Path) -> subprocess.Popen:
    params = {"artifact_dir": artifact, "autostart": str(autostart).lower(), "drive": "student"}
    cmd = [sys.executable, "-m", "agent.nodes.opd", "--ros-args", "-r", f"__ns:={NS}"]
    cmd += [arg for key, value in params.items() for arg in ("-p", f"{key}:={value}")]
    return subprocess.Popen(cmd, stdout=log.open("a"), stderr=subprocess.STDOUT)


def test_a_respawned_opd_node_moves_the_base_only_once_a_person_arms_it(
    ros_context: Context, contract_artifact: Path, tmp_path: Path
) -> None:
    codec = ActionCodec(Artifact.load(contract_artifact).contract)
    drive = codec.to_msg(*codec.contract.action("drive", speed=0.5), 0.0, "student")
    probe = Probe(ros_context, "base", namespace=NS)
    probe.record("/cmd_vel")
    probe.advertise("/agent/action")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    log = tmp_path / "opd.log"

    def propose_until(condition, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            drive.header.stamp = probe.node.get_clock().now().to_msg()
            probe.publish("/agent/action", drive)
            spin_for(executor, 0.05)
        return condition()

    def driving_after(n: int) -> bool:
        return any(velocity_of(t)[0] > 0 for t in probe.received["/cmd_vel"][n:])

    proc = start(contract_artifact, True, log)
    try:
        assert propose_until(lambda: driving_after(0), 60.0), log.read_text()
        proc.kill()
        proc.wait()
        proc = start(contract_artifact, False, log)  # respawned: nobody re-runs the launch's events
        configure(ros_context, f"{NS}/opd", 60.0)
        heard = len(probe.received["/cmd_vel"])
        assert not propose_until(lambda: len(probe.received["/cmd_vel"]) > heard, 2.0)  # configured, silent
        assert set_armed("arm", namespace=NS, context=ros_context, timeout_s=30.0) == "active"
        assert propose_until(lambda: driving_after(heard), 10.0), log.read_text()
    finally:
        proc.kill()
        proc.wait()
        executor.shutdown()
        probe.node.destroy_node()

"""Encoder, policy and opd as `ros2 run`-style processes on a real exported model, talking over DDS.

The test process feeds camera and IMU and records what comes out: the policy's proposals, and the opd
node's executed action and base command. Ctrl-C on the policy leaves its proposal on the safe action; Ctrl-C
on the opd node, which commands the base, must leave the robot on it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent.base_command import TwistMapping, velocity_of
from agent.messages import ActionCodec, stamp_to_sec
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from ros_harness import Probe, SensorFeed, spin_for, spin_until

from policies.artifact import Artifact

pytestmark = pytest.mark.slow


def start(node: str, artifact: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", f"agent.nodes.{node}", "--ros-args", "-p", f"artifact_dir:={artifact}",
           "-p", "input_timeout_s:=1.0", "-p", "inference_threads:=1", "-p", "autostart:=true",
           "-p", "drive:=student"]  # fmt: skip  # the opd node executes the proposals as they are
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)


def usec(msg: object) -> float:
    return round(stamp_to_sec(msg.header.stamp), 6)


def active(probe: Probe, node: str) -> bool:
    status = probe.diagnostics(f"{node}: ").get(f"{node}: node")
    return status is not None and {kv.key: kv.value for kv in status.values}.get("state") == "active"


def test_node_processes_turn_camera_and_imu_into_bounded_commands(
    ros_context: Context, tiny_artifact: Path, tmp_path: Path
) -> None:
    contract = Artifact.load(tiny_artifact).contract
    codec, mapping = ActionCodec(contract), TwistMapping(contract)
    procs = {n: start(n, tiny_artifact, tmp_path / f"{n}.log") for n in ("encoder", "policy", "opd")}
    probe = Probe(ros_context)
    probe.record("/agent/state", "/agent/action", "/opd/action", "/cmd_vel", "/diagnostics")
    probe.advertise("/camera/image_raw", "/imu/data")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    try:
        up = spin_until(executor, lambda: all(active(probe, n) for n in procs), timeout_s=30.0)
        assert up, {n: (tmp_path / f"{n}.log").read_text() for n in procs}
        assert spin_until(executor, lambda: probe.matched("/camera/image_raw", "/imu/data"))
        feed, stamps = SensorFeed(probe, time.time()), []
        for i in range(60):  # 3 s of camera at 20 Hz: fresh processes' first inferences may take a second
            stamps.append(time.time())
            feed.step(stamps[-1], value=4 * i)  # distinct uint8 images
            spin_for(executor, 0.05)

        image_stamps = {round(s, 6) for s in stamps}  # stamps travel with nanosecond resolution

        def from_images(topic: str) -> list:
            return [m for m in probe.received[topic] if usec(m) in image_stamps]

        def executed() -> bool:
            """10 proposals were executed, and the probe has heard each of them proposed too."""
            out = {usec(m) for m in from_images("/opd/action")}
            return len(out) >= 10 and out <= {usec(m) for m in from_images("/agent/action")}

        logs = lambda: "".join((tmp_path / f"{n}.log").read_text() for n in procs)  # noqa: E731
        assert spin_until(executor, executed, timeout_s=5.0), logs()
        states = {usec(m) for m in probe.received["/agent/state"]}
        assert states <= image_stamps and len(states) >= 10  # each embedding stamped with its image
        # drive student: the student's proposals are executed, with their image stamps.
        proposed = {usec(m): (m.skill, list(m.params)) for m in from_images("/agent/action")}
        assert all(proposed[usec(m)] == (m.skill, list(m.params)) for m in from_images("/opd/action"))
        # Every base command is the Twist of an executed action (each decodes within the contract). Their
        # one-to-one pairing is tested in test_opd_node.py, where no message can go out before discovery.
        twists = {mapping.velocity(*codec.from_msg(m)) for m in probe.received["/opd/action"]}
        assert probe.received["/cmd_vel"]
        assert all(velocity_of(t) in twists for t in probe.received["/cmd_vel"])

        n = len(probe.received["/agent/action"])
        procs["policy"].send_signal(signal.SIGINT)  # Ctrl-C: the policy's last proposal is the safe action
        assert exit_code(procs["policy"], tmp_path / "policy.log") == 0
        stop = contract.safe_skill_id
        proposed_stop = lambda: codec.from_msg(probe.received["/agent/action"][-1])[0] == stop  # noqa: E731
        assert spin_until(executor, lambda: len(probe.received["/agent/action"]) > n and proposed_stop())
        n = len(probe.received["/opd/action"])
        procs["opd"].send_signal(signal.SIGINT)  # Ctrl-C on the node that commands the base: robot stopped
        assert exit_code(procs["opd"], tmp_path / "opd.log") == 0

        def stopped() -> bool:
            last, twist = probe.received["/opd/action"][-1], probe.received["/cmd_vel"][-1]
            return codec.from_msg(last)[0] == stop and velocity_of(twist) == (0.0, 0.0)

        assert spin_until(executor, lambda: len(probe.received["/opd/action"]) > n and stopped())
        procs["encoder"].send_signal(signal.SIGINT)
        assert exit_code(procs["encoder"], tmp_path / "encoder.log") == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        executor.shutdown()
        probe.node.destroy_node()


def exit_code(proc: subprocess.Popen, log: Path, timeout_s: float = 10.0) -> int:
    """The exit code of a node stopped by a signal; its log in the failure if it does not stop in time."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{log.stem} did not stop within {timeout_s} s of the signal:\n{log.read_text()}")

"""Encoder and policy as two `ros2 run`-style processes on a real exported model, talking over DDS.

The test process feeds camera and IMU and records what comes out; then Ctrl-C on the policy process
must leave the robot on the safe action.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent.base_command import TwistMapping
from agent.messages import ActionCodec, stamp_to_sec
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from ros_harness import Probe, SensorFeed, spin_for, spin_until

from policies.artifact import Artifact

pytestmark = pytest.mark.slow


def start(node: str, artifact: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", f"agent.nodes.{node}", "--ros-args", "-p", f"artifact_dir:={artifact}",
           "-p", "input_timeout_s:=1.0", "-p", "inference_threads:=1"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)


def usec(msg: object) -> float:
    return round(stamp_to_sec(msg.header.stamp), 6)


def active(probe: Probe, node: str) -> bool:
    status = probe.diagnostics(f"{node}: ").get(f"{node}: node")
    return status is not None and {kv.key: kv.value for kv in status.values}.get("state") == "active"


def test_encoder_and_policy_processes_turn_camera_and_imu_into_bounded_commands(
    ros_context: Context, tiny_artifact: Path, tmp_path: Path
) -> None:
    contract = Artifact.load(tiny_artifact).contract
    codec, mapping = ActionCodec(contract), TwistMapping(contract)
    procs = {n: start(n, tiny_artifact, tmp_path / f"{n}.log") for n in ("encoder", "policy")}
    probe = Probe(ros_context)
    probe.record("/agent/state", "/agent/action", "/cmd_vel", "/diagnostics")
    probe.advertise("/camera/image_raw", "/imu/data")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    try:
        up = spin_until(executor, lambda: all(active(probe, n) for n in procs), timeout_s=30.0)
        assert up, {n: (tmp_path / f"{n}.log").read_text() for n in procs}
        assert spin_until(executor, lambda: probe.matched("/camera/image_raw", "/imu/data"))
        feed, stamps = SensorFeed(probe, time.time()), []
        for i in range(30):  # 1.5 s of camera at 20 Hz
            stamps.append(time.time())
            feed.step(stamps[-1], value=8 * i)
            spin_for(executor, 0.05)

        image_stamps = {round(s, 6) for s in stamps}  # stamps travel with nanosecond resolution

        def from_images() -> list:
            return [m for m in probe.received["/agent/action"] if usec(m) in image_stamps]

        assert spin_until(executor, lambda: len(from_images()) >= 10, timeout_s=5.0), (
            tmp_path / "encoder.log"
        ).read_text() + (tmp_path / "policy.log").read_text()
        states = {usec(m) for m in probe.received["/agent/state"]}
        assert states <= image_stamps and len(states) >= 10  # each embedding stamped with its image
        actions, twists = probe.received["/agent/action"], probe.received["/cmd_vel"]
        assert len(actions) == len(twists)
        for msg, twist in zip(actions, twists, strict=True):
            skill, params = codec.from_msg(msg)  # raises unless within the contract
            assert (twist.linear.x, twist.angular.z) == mapping.velocity(skill, params)

        n = len(probe.received["/agent/action"])
        procs["policy"].send_signal(signal.SIGINT)  # Ctrl-C: the robot must be left on the safe action
        assert exit_code(procs["policy"], tmp_path / "policy.log") == 0
        spin_for(executor, 0.3)
        last = probe.received["/agent/action"][n:]
        assert last and codec.from_msg(last[-1])[0] == contract.safe_skill_id
        stopped = probe.received["/cmd_vel"][-1]
        assert (stopped.linear.x, stopped.angular.z) == (0.0, 0.0)
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

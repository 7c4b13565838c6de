"""respawn:=true under the real launch (issue 54): SIGKILLed nodes come back, the opd node disarmed.

The package is built with colcon into a temporary install tree and `bringup.launch.py` run from it with
launch's LaunchService (what `ros2 launch` runs), on MuJoCo with the committed student. The encoder and the
opd node are SIGKILLed together: launch starts both again, the encoder comes back active, the opd node
configured and silent; nothing drives until a person arms it, then the student drives again. Needs the real
launch and launch_ros (not on PyPI): skipped without them, where test_respawn.py checks the disarmed
respawn against node processes restarted by hand.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent import graph
from agent.arming import set_armed
from agent.messages import SOURCES
from agent.ros_io import msg_class, qos_profile
from lifecycle_msgs.msg import TransitionEvent
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

REPO = Path(__file__).resolve().parents[2]
STUDENT = REPO / "sim" / "robots" / "diffbot" / "student"
COLCON = Path(sys.executable).with_name("colcon")
KILLED = ("encoder", "opd")
# `ros2 launch PATH ARGS` without ros2cli: the launch service ros2launch runs, with the file included.
DRIVER = """
import sys
import launch
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
path, *args = sys.argv[1:]
service = launch.LaunchService(argv=args, noninteractive=True)
included = IncludeLaunchDescription(PythonLaunchDescriptionSource(path),
                                    launch_arguments=[a.split(":=", 1) for a in args])
service.include_launch_description(launch.LaunchDescription([included]))
sys.exit(service.run())
"""


def _missing() -> list[str]:
    """launch / launch_ros when not installed: the repository's launch/ folder is a namespace package."""
    specs = {m: importlib.util.find_spec(m) for m in ("launch", "launch_ros")}
    return [m for m, s in specs.items() if s is None or s.origin is None]


class Watch:
    """Every /opd/action (sent time, source) and every lifecycle transition of the killed nodes."""

    def __init__(self, context: Context) -> None:
        self.node = Node("respawn_watch", context=context)
        self.actions: list[tuple[float, str]] = []
        self.transitions: list[tuple[float, str, str]] = []  # (sent, node, goal state)
        self.lock = threading.Lock()
        topic = graph.TOPICS["/opd/action"]
        self.node.create_subscription(msg_class(topic.msg_type), topic.name, self._on_action,
                                      qos_profile(topic.qos))  # fmt: skip
        for name in KILLED:
            self.node.create_subscription(
                TransitionEvent,
                f"/{name}/transition_event",
                lambda m, i, n=name: self._on_transition(n, m, i),
                10,
            )
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def _on_action(self, msg: object, info: dict) -> None:
        with self.lock:
            self.actions.append((info["source_timestamp"] * 1e-9, SOURCES[msg.source]))

    def _on_transition(self, name: str, msg: TransitionEvent, info: dict) -> None:
        with self.lock:
            self.transitions.append((info["source_timestamp"] * 1e-9, name, msg.goal_state.label))

    def driving(self, since: float) -> float | None:
        """When the first drive command (not the safe action) sent after `since` was sent."""
        with self.lock:
            return next((t for t, source in self.actions if t > since and source != "safe"), None)

    def reached(self, name: str, state: str, since: float) -> float | None:
        with self.lock:
            return next((t for t, n, s in self.transitions if n == name and s == state and t > since), None)

    def close(self) -> None:
        self.executor.shutdown()
        self.thread.join(5.0)
        self.node.destroy_node()


def wait_for(condition: Callable[[], object], timeout_s: float) -> object:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def node_pid(launch_pid: int, name: str) -> int | None:
    """The process of node `name` that launch started (its executable, lib/agent/<name>)."""
    found = subprocess.run(["pgrep", "-P", str(launch_pid), "-f", f"lib/{graph.PACKAGE}/{name} "],
                           capture_output=True, text=True).stdout.split()  # fmt: skip
    return int(found[0]) if found else None


def build_package(tmp_path: Path) -> Path:
    """colcon build of a copy of ros2_ws/src/agent; returns the install prefix."""
    shutil.copytree(REPO / "ros2_ws" / "src" / "agent", tmp_path / "src" / "agent",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    cmd = [str(COLCON), "--log-base", str(tmp_path / "log"), "build", "--base-paths", str(tmp_path / "src"),
           "--build-base", str(tmp_path / "build"), "--install-base", str(tmp_path / "install"),
           "--merge-install"]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / "install"


@pytest.mark.slow
@pytest.mark.skipif(
    bool(_missing()) or not COLCON.exists(),
    reason=f"{' and '.join(_missing()) or 'colcon'} not installed (launch and launch_ros come with a ROS 2 "
    "install, ros-kilted-launch-ros, not from PyPI); test_respawn.py checks a disarmed respawn without them",
)
def test_a_respawned_encoder_drives_again_and_a_respawned_opd_node_only_once_armed(
    ros_context: Context, tmp_path: Path
) -> None:
    prefix = build_package(tmp_path)
    (site,) = (prefix / "lib").glob("python3*/site-packages")  # the entry points' distribution
    env = dict(os.environ)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join([str(prefix), env.get("AMENT_PREFIX_PATH", sys.prefix)])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    args = ["sim:=mujoco", "respawn:=true", f"artifact_dir:={STUDENT}"]
    launch_file = prefix / "share" / graph.PACKAGE / "launch" / "bringup.launch.py"
    log = tmp_path / "launch.log"
    watch = Watch(ros_context)
    start = time.time()
    cmd = [sys.executable, "-c", DRIVER, str(launch_file), *args]
    launch = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        assert wait_for(lambda: watch.driving(start), 120.0), log.read_text()
        killed = {name: node_pid(launch.pid, name) for name in KILLED}
        for pid in killed.values():
            os.kill(pid, signal.SIGKILL)
        kill = time.time()

        def respawned() -> bool:
            return all(node_pid(launch.pid, n) not in (None, pid) for n, pid in killed.items())

        def back() -> bool:
            """Configured once the killed processes' services left discovery (RESPAWN_CONFIGURE_S): the
            encoder activated again, the opd node left disarmed."""
            return bool(watch.reached("encoder", "active", kill) and watch.reached("opd", "inactive", kill))

        assert wait_for(respawned, 30.0), log.read_text()
        assert wait_for(back, 120.0), log.read_text()
        time.sleep(2.0)  # the encoder's embeddings reach a disarmed opd node: still nothing drives
        assert not watch.reached("opd", "active", kill) and not watch.driving(kill), log.read_text()
        arm = time.time()
        assert set_armed("arm", context=ros_context, timeout_s=30.0) == "active"
        assert wait_for(lambda: watch.driving(arm), 30.0), log.read_text()
    finally:
        os.killpg(launch.pid, signal.SIGINT)
        try:
            launch.wait(30.0)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
        watch.close()

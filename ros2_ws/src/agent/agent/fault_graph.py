"""The graph `agent bench faults` injects faults into: its nodes as processes, and a watch on what they send.

Times are the publishers' own: DDS's source timestamp of each message (the system clock when it was
written), not its arrival here. The bench process also records every topic, and on a loaded CPU it reads
messages late: timed on arrival, a stop sent at 0.55 s read as 2 s, and a fresh command as a stale one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

from agent import graph
from agent.arming import _call
from agent.messages import SOURCES, stamp_to_sec
from agent.ros_io import msg_class, qos_profile

STALE_S = 0.5  # a non-safe command answering an input older than this when sent is unsafe (input timeout)
# Debian's and Ubuntu's libfaketime (apt install libfaketime): steps the nodes' system clock (fault 5).
FAKETIME_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"


def _sent_s(info: dict) -> float:
    return info["source_timestamp"] * 1e-9


class Watch:
    """The bench's own node: every `/opd/action` and `/diagnostics` entry, with the time it was sent."""

    def __init__(self, context: Context) -> None:
        self.node = Node("fault_bench", context=context, start_parameter_services=False)
        self.actions: list[tuple[float, str, float]] = []  # (sent, source, input stamp)
        self.diag: list[tuple[float, str, dict[str, str]]] = []  # (sent, name, values)
        self.lock = threading.Lock()
        for name, cb in (("/opd/action", self._on_action), ("/diagnostics", self._on_diag)):
            t = graph.TOPICS[name]
            self.node.create_subscription(msg_class(t.msg_type), name, cb, qos_profile(t.qos))
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        threading.Thread(target=self._spin, daemon=True).start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass  # the bench ended

    def _on_action(self, msg: object, info: dict) -> None:
        with self.lock:
            self.actions.append((_sent_s(info), SOURCES[msg.source], stamp_to_sec(msg.header.stamp)))

    def _on_diag(self, msg: object, info: dict) -> None:
        with self.lock:
            for s in msg.status:  # the status line is kept under "" beside the values
                self.diag.append(
                    (_sent_s(info), s.name, {"": s.message, **{kv.key: kv.value for kv in s.values}})
                )

    def flowing(self, since: float) -> float | None:
        """When the first fresh non-safe command after `since` was sent."""
        with self.lock:
            return next(
                (t for t, src, stamp in self.actions if t > since and src != "safe" and t - stamp < STALE_S),
                None,
            )

    def first_safe(self, since: float) -> float | None:
        with self.lock:
            return next((t for t, src, _ in self.actions if t > since and src == "safe"), None)

    def last_safe(self, since: float, until: float) -> float | None:
        """When the last safe action in (since, until] was sent."""
        with self.lock:
            stops = [t for t, src, _ in self.actions if since < t <= until and src == "safe"]
        return max(stops, default=None)

    def last_drive(self, before: float) -> float | None:
        """When the last non-safe command before `before` was sent: the one the base ran on until the stop."""
        with self.lock:
            return max((t for t, src, _ in self.actions if t < before and src != "safe"), default=None)

    def mark(self) -> int:
        """How many commands were heard so far: the ones after a mark came after it."""
        with self.lock:
            return len(self.actions)

    def between(self, start: int, end: int) -> list[tuple[float, str, float]]:
        """(sent, source, input stamp) of the commands heard between two marks."""
        with self.lock:
            return self.actions[start:end]

    def count(self, since: float, until: float, safe: bool) -> int:
        with self.lock:
            return sum(1 for t, src, _ in self.actions if since < t <= until and (src == "safe") == safe)

    def unsafe(self, since: float, until: float, disarmed_from: float | None = None) -> int:
        """Non-safe commands sent in (since, until] on stale input, or after `disarmed_from`."""
        with self.lock:
            return sum(
                1
                for t, src, stamp in self.actions
                if since < t <= until
                and src != "safe"
                and (t - stamp >= STALE_S or (disarmed_from is not None and t > disarmed_from))
            )

    def rose(self, since: float, node: str, key: str) -> float | None:
        """When the first report of `node` after `since` was sent whose counter `key` exceeded the last one
        before `since` (the sim bridge's safe_steps, the policy's refused versions). The last, not the
        largest: a restarted node counts from 0 again."""
        with self.lock:
            rows = [
                (t, int(v[key])) for t, n, v in self.diag if key in v and n.split("/")[-1].startswith(node)
            ]
        before = max(((t, c) for t, c in rows if t <= since), default=(0.0, 0))[1]
        return next((t for t, c in rows if t > since and c > before), None)

    def time_value(self, since: float, node: str, key: str) -> float | None:
        """The first time after `since` that a report of `node` gives under `key` (the sim bridge's
        `safe_since`: when its command watchdog put the base on the safe action)."""
        with self.lock:
            values = [v[key] for _, n, v in self.diag if v.get(key) and n.split("/")[-1].startswith(node)]
        return next((t for t in map(float, values) if t > since), None)

    def said(self, since: float, text: str) -> float | None:
        """When the first diagnostics entry after `since` with `text` in a key or a value was sent."""
        with self.lock:
            return next(
                (t for t, _, v in self.diag if t > since and text in " ".join([*v, *v.values()])), None
            )


class GraphProcesses:
    """The graph's nodes as processes, started and restarted as the launch file starts them."""

    def __init__(self, workdir: Path, artifact: Path, params: dict) -> None:
        self.workdir, self.artifact, self.params = workdir, artifact, params
        self.params_file = workdir / graph.PARAMS_FILE
        self.params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        self.procs: dict[str, subprocess.Popen] = {}
        # With `stepped_clock`, nodes started from then on run under libfaketime (where it is installed):
        # their system clock is offset by what this file says, read on every clock call (monotonic time is
        # left alone). It costs CPU, so only the clock faults run with it.
        self.clock_file = workdir / "clock_offset"
        self.faketime = next(iter(sorted(Path("/").glob(FAKETIME_GLOB.lstrip("/")))), None)
        self.stepped_clock = False
        self.set_clock(0.0)

    def set_clock(self, offset_s: float) -> None:
        """Step every node's system clock to true time + `offset_s` (libfaketime; no-op without it)."""
        self.clock_file.write_text(f"{offset_s:+g}\n")

    def _env(self) -> dict[str, str] | None:
        if self.faketime is None or not self.stepped_clock:
            return None
        faked = {"LD_PRELOAD": str(self.faketime), "FAKETIME_TIMESTAMP_FILE": str(self.clock_file),
                 "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
        return {**os.environ, **faked}

    def start(self, name: str, armed: bool = True) -> None:
        launch_args = {
            "artifact_dir": str(self.artifact),
            "sim": "mujoco",
            "drive": "opd",
            "backend": "onnxruntime",
        }
        spec = next(n for n in graph.NODES if n.name == name)
        declared = {p.name for p in spec.params} | {p.name for p in graph.COMMON_PARAMS}
        cmd = [
            sys.executable,
            "-m",
            f"agent.nodes.{name}",
            "--ros-args",
            "--params-file",
            str(self.params_file),
            "-p",
            f"autostart:={'true' if armed else 'false'}",
        ]
        for key, value in launch_args.items():
            if key in declared:
                cmd += ["-p", f"{key}:={value}"]
        if name == "opd" and self._env() is not None:
            # libfaketime 0.9.10 leaving the monotonic clock alone fails clock_nanosleep (time.sleep:
            # EINVAL), which the learner child rests with: the clock faults run the graph without learning.
            cmd += ["-p", "learn:=false"]
        log = (self.workdir / f"{name}.log").open("a")
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self._env()
        )

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def died(self) -> list[str]:
        """The nodes whose process has ended."""
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    def learner_pid(self) -> int | None:
        """The opd node's learner child (spawned: its command line runs `spawn_main`)."""
        opd = self.procs["opd"].pid
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == opd and b"spawn_main" in cmdline:  # not its resource tracker
                return int(stat.parent.name)
        return None


def configure(context: Context, node: str, timeout_s: float) -> None:
    """Configure the (re)started lifecycle node `node` (its full name, e.g. /opd), as the launch's configure
    event does (it does not arm).

    Its lifecycle services are asked only once the new process answers get_state: for the DDS lease after a
    SIGKILL (Fast DDS: 20 s) the dead process's service still looks ready, a request sent then goes to it
    alone (volatile: the new one never sees it), and no answer ever comes. This is what left the restarted
    opd node unconfigured for 300 s in the first runs.
    """
    client = Node("fault_bench_configure", context=context, start_parameter_services=False)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                _call(client, executor, GetState, f"{node}/get_state", GetState.Request(), 2.0)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
        request = ChangeState.Request()
        request.transition.id = Transition.TRANSITION_CONFIGURE
        left = max(deadline - time.monotonic(), 10.0)
        if not _call(client, executor, ChangeState, f"{node}/change_state", request, left).success:
            raise RuntimeError(f"{node}: configure refused (see its log)")
    finally:
        executor.shutdown()
        client.destroy_node()

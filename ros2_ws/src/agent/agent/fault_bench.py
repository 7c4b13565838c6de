"""`agent bench faults`: the graph as separate node processes, one fault at a time, and what each costs.

The five nodes run as `ros2 launch` starts them (`python -m agent.nodes.<name> --ros-args --params-file F`,
the launch arguments as parameters), on the MuJoCo default behind the real-robot proxy, the opd node driving
and learning (`learn`). This process watches them: `/opd/action` (the one command the robot follows),
`/diagnostics`, and a bag of every topic (`BagRecorder`, whose sequence-gap counts are the data lost).

Per fault: the stop latency (fault -> the first safe action on `/opd/action`; for the opd node itself, which
sends it, the sim bridge's command watchdog, read from its `safe_steps` on /diagnostics every 0.1 s), the
unsafe commands (non-safe ones answering an input older than 0.5 s when received, or sent while disarmed),
the messages lost in its window and whether a report counts them, the recovery (restart -> commands flow
again; a restarted opd node comes up disarmed and is armed by `agent.arming.set_armed`, the person), and
whether what was written can be loaded. Faults 5-7 of issue 54 (clock jumps, discovery, CPU starvation) are
not run here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from agent import graph
from agent.arming import _call, set_armed
from agent.messages import SOURCES, stamp_to_sec
from agent.recorder import BagRecorder
from agent.ros_io import msg_class, qos_profile

NODES = ("sim_bridge", "teacher", "encoder", "policy", "opd")
STALE_S = 0.5  # a non-safe command answering an input older than this is unsafe (the nodes' input timeout)
WATCH_S = 3.0  # time each fault is watched before the node is restarted, s
STEADY_TIMEOUT_S = 180.0  # commands must flow within this after a (re)start, s
PERSON_S = 3.0  # a restarted opd node is watched this long before a person arms it, s


@dataclass
class FaultResult:
    """One row of the report."""

    fault: str
    stop_ms: float | None  # fault -> the safe action; None: none was needed (see note)
    unsafe: int  # commands after the fault that were not the safe action and answered stale input
    lost: int  # messages lost in the window: sequence gaps, or not stored by the recorder
    lost_counted: bool  # every one of them is in a report a user sees (the bag's summary, metadata.yaml)
    recovery_s: float | None  # restart (or arming, for opd) -> commands flow again
    rearmed_by_person: bool | None  # the robot moved again only once armed (None: never disarmed)
    loadable: bool  # every bag, checkpoint and artifact version written can be loaded
    note: str = ""


class Watch:
    """The bench's own node: every `/opd/action` and the `/diagnostics` values, with their arrival time."""

    def __init__(self, context: Context) -> None:
        self.node = Node("fault_bench", context=context, start_parameter_services=False)
        self.actions: list[tuple[float, str, float]] = []  # (wall arrival, source, input stamp)
        self.diag: list[tuple[float, str, dict[str, str], int]] = []  # (arrival, name, values, level)
        self.lock = threading.Lock()
        for name, cb in (("/opd/action", self._on_action), ("/diagnostics", self._on_diag)):
            t = graph.TOPICS[name]
            self.node.create_subscription(msg_class(t.msg_type), name, cb, qos_profile(t.qos))
        version = graph.TOPICS["/agent/student_version"]
        self.version_pub = self.node.create_publisher(
            msg_class(version.msg_type), version.name, qos_profile(version.qos)
        )
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        threading.Thread(target=self.executor.spin, daemon=True).start()

    def _on_action(self, msg: object) -> None:
        with self.lock:
            self.actions.append((time.time(), SOURCES[msg.source], stamp_to_sec(msg.header.stamp)))

    def _on_diag(self, msg: object) -> None:
        now = time.time()
        with self.lock:
            for s in msg.status:  # the status line is kept under "" beside the values
                values = {"": s.message, **{kv.key: kv.value for kv in s.values}}
                self.diag.append((now, s.name, values, int.from_bytes(s.level)))

    def flowing(self, since: float) -> float | None:
        """Arrival of the first fresh non-safe command after `since`."""
        with self.lock:
            return next(
                (t for t, src, stamp in self.actions if t > since and src != "safe" and t - stamp < STALE_S),
                None,
            )

    def first_safe(self, since: float) -> float | None:
        with self.lock:
            return next((t for t, src, _ in self.actions if t > since and src == "safe"), None)

    def unsafe(self, since: float, until: float, disarmed_from: float | None = None) -> int:
        """Non-safe commands in (since, until] on stale input, or sent after `disarmed_from`."""
        with self.lock:
            return sum(
                1
                for t, src, stamp in self.actions
                if since < t <= until
                and src != "safe"
                and (t - stamp >= STALE_S or (disarmed_from is not None and t > disarmed_from))
            )

    def bridge_safe_at(self, since: float) -> float | None:
        """Arrival of the first sim bridge report after `since` whose `safe_steps` rose."""
        with self.lock:
            rows = [
                (t, int(v["safe_steps"]))
                for t, n, v, _ in self.diag
                if "safe_steps" in v and "sim_bridge" in n
            ]
        before = max((s for t, s in rows if t <= since), default=0)
        return next((t for t, s in rows if t > since and s > before), None)

    def said(self, since: float, text: str) -> float | None:
        """Arrival of the first diagnostics entry after `since` with `text` in a key or a value."""
        with self.lock:
            return next(
                (t for t, _, v, _ in self.diag if t > since and text in " ".join([*v, *v.values()])), None
            )


class GraphProcesses:
    """The graph's nodes as processes, started and restarted as the launch file starts them."""

    def __init__(self, workdir: Path, artifact: Path, params: dict) -> None:
        self.workdir, self.artifact = workdir, artifact
        self.params_file = workdir / graph.PARAMS_FILE
        self.params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        self.procs: dict[str, subprocess.Popen] = {}

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
        log = (self.workdir / f"{name}.log").open("a")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

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


class FaultBench:
    """Runs the faults on one graph (see the module doc); `run()` returns a row per fault."""

    def __init__(
        self, context: Context, workdir: Path, artifact: Path, params: dict, tmpfs: Path | None
    ) -> None:
        self.context, self.workdir, self.artifact, self.tmpfs = context, workdir, artifact, tmpfs
        self.graph = GraphProcesses(workdir, artifact, params)
        self.watch = Watch(context)
        self.bag = BagRecorder(workdir / "bag", graph.TOPICS.values(), context)

    def run(self, kills: tuple[str, ...] = NODES) -> list[FaultResult]:
        for name in NODES:
            self.graph.start(name)
        try:
            self._steady(time.time())
            rows = [self.kill_learner(), self.fill_disk(), self.bad_version("corrupt")]
            rows += [self.bad_version("other encoder")] + [self.kill(name) for name in kills]
        finally:
            self.graph.stop_all()
            report = self.bag.stop()
        bag_ok = _readable(self.workdir / "bag")
        for row in rows:
            row.loadable = row.loadable and bag_ok
        print(report.summary(), file=sys.stderr)
        return rows

    def _steady(self, since: float) -> float:
        deadline = time.monotonic() + STEADY_TIMEOUT_S
        while (t := self.watch.flowing(since)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no command flowed within {STEADY_TIMEOUT_S:g} s (logs in {self.workdir})"
                )
            time.sleep(0.05)
        time.sleep(2.0)  # a little driving before the next fault
        return t

    def _lost(self) -> int:
        return sum(self.bag.lost().values()) + sum(self.bag.not_stored().values())

    def kill(self, name: str) -> FaultResult:
        """SIGKILL one node mid-run; restart it as the launch would (the opd node disarmed)."""
        lost0, t0 = self._lost(), time.time()
        self.graph.kill(name)
        time.sleep(WATCH_S)
        safe = self.watch.bridge_safe_at(t0) if name == "opd" else self.watch.first_safe(t0)
        needed = name not in ("policy", "teacher")  # drive opd acts on its own copy; the student acts alone
        note = "" if needed else "no stop needed: fresh commands go on"
        if name == "opd":
            note = "stopped by the sim bridge's command watchdog"
        unsafe = self.watch.unsafe(t0, time.time())
        restart = time.time()
        self.graph.start(name, armed=name != "opd")
        rearmed, arm_at = None, restart
        if name == "opd":
            try:
                self._wait_configured(restart)
            except RuntimeError as err:  # e.g. no answer: reported in the row, the bench goes on
                return FaultResult(
                    f"SIGKILL {name}",
                    None if safe is None else (safe - t0) * 1e3,
                    unsafe,
                    self._lost() - lost0,
                    True,
                    None,
                    True,
                    True,
                    f"{note}; restart: {err}",
                )
            time.sleep(PERSON_S)
            rearmed = self.watch.flowing(restart) is None  # nothing moved before a person armed it
            arm_at = time.time()
            set_armed("arm", context=self.context, timeout_s=30.0)
        flowing = self._steady(arm_at)
        return FaultResult(
            f"SIGKILL {name}",
            None if safe is None else (safe - t0) * 1e3,
            unsafe,
            self._lost() - lost0,
            True,
            flowing - arm_at,
            rearmed,
            True,
            note,
        )

    def _wait_configured(self, since: float) -> None:
        """Configure the restarted opd node, as the launch's configure event does (it does not arm)."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.id = Transition.TRANSITION_CONFIGURE
        node = Node(f"fault_bench_configure_{os.getpid()}", context=self.context)
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(node)
        try:
            _call(node, executor, ChangeState, "/opd/change_state", request, 300.0)
        finally:
            executor.shutdown()
            node.destroy_node()

    def kill_learner(self) -> FaultResult:
        """SIGKILL the opd node's learner child (its weights may be in flight): reported, acting goes on."""
        deadline = time.monotonic() + 120.0
        while (pid := self.graph.learner_pid()) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if pid is None:
            return FaultResult(
                "SIGKILL learner child", None, 0, 0, True, None, None, True, "no learner found"
            )
        time.sleep(5.0)  # learning (weights flow back after each update)
        lost0, t0 = self._lost(), time.time()
        os.kill(pid, signal.SIGKILL)
        time.sleep(WATCH_S)
        told = self.watch.said(t0, "learner process stopped")
        note = (
            "reported on /diagnostics after "
            + (f"{(told - t0) * 1e3:.0f} ms" if told else "NEVER")
            + "; acting goes on with the last weights (no stop needed)"
        )
        return FaultResult(
            "SIGKILL learner child",
            None,
            self.watch.unsafe(t0, time.time()),
            self._lost() - lost0,
            True,
            None,
            None,
            True,  # it writes nothing itself; its versions are written atomically (fault 4, not run here)
            note,
        )

    def fill_disk(self) -> FaultResult:
        """Record onto a disk that fills (an 8 MiB tmpfs); on the failure the run parks the robot (disarm)."""
        if self.tmpfs is None:
            return FaultResult(
                "disk full while recording",
                None,
                0,
                0,
                True,
                None,
                None,
                True,
                "not run: no tmpfs (needs root to mount)",
            )
        rec = BagRecorder(self.tmpfs / "bag", graph.TOPICS.values(), self.context)
        deadline = time.monotonic() + 60.0
        while not rec.failure and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.time()
        if rec.failure:
            set_armed("disarm", context=self.context)  # as `agent run` does: RecordingStopped parks the robot
        disarmed = time.time()  # commands before this answered while armed
        time.sleep(1.0)
        report = rec.stop()
        safe = self.watch.first_safe(t0)
        ok = _readable(self.tmpfs / "bag")
        rearm_at = time.time()
        rearmed = self.watch.flowing(disarmed) is None
        set_armed("arm", context=self.context)
        flowing = self._steady(rearm_at)
        # Not its sequence gaps: started mid-run, it counts what was published before it as missing.
        lost = sum(report.not_stored.values())
        return FaultResult(
            "disk full while recording",
            None if safe is None else (safe - t0) * 1e3,
            self.watch.unsafe(t0, rearm_at, disarmed_from=disarmed),
            lost,
            bool(report.failure),
            flowing - rearm_at,
            rearmed,
            ok,
            f"{sum(report.written.values())} stored, {lost} not stored (in metadata.yaml)",
        )

    def bad_version(self, kind: str) -> FaultResult:
        """Announce a student version that is corrupt, or of another encoder: refused, the old one acts."""
        from policies.artifact import Artifact

        path = self.workdir / f"version-{kind.replace(' ', '-')}"
        if kind == "corrupt":
            shutil.copytree(self.artifact, path)
            onnx = path / "policy.onnx"
            onnx.write_bytes(onnx.read_bytes()[:-64] + bytes(64))
        else:
            from agent.sim_session import cached_artifact
            from policies.export import DEFAULT_STUDENT_CONFIG

            path, _ = cached_artifact(DEFAULT_STUDENT_CONFIG.with_name("student_small.yaml"), int8=True)
        t0 = time.time()
        msg = msg_class(graph.TOPICS["/agent/student_version"].msg_type)()
        msg.data = json.dumps({"number": 10**6 + len(kind), "path": str(path)})
        self.watch.version_pub.publish(msg)
        time.sleep(WATCH_S)
        refused = self.watch.said(t0, "refused")
        try:
            Artifact.load(self.artifact)
            base_ok = True
        except Exception:  # noqa: BLE001 - reported as not loadable
            base_ok = False
        note = "refused by the policy node" + (
            f" after {(refused - t0) * 1e3:.0f} ms" if refused else ": NOT SEEN"
        )
        return FaultResult(
            f"student version: {kind}",
            None,
            self.watch.unsafe(t0, time.time()),
            0,
            True,
            None,
            None,
            base_ok,
            note + "; the old student acts (no stop needed)",
        )


def _readable(bag: Path) -> bool:
    """Every message of the bag can be read (metadata.yaml and the MCAP summary included)."""
    from rosbags.rosbag2 import Reader

    try:
        with Reader(bag) as reader:
            return sum(1 for _ in reader.messages()) == reader.message_count
    except Exception:  # noqa: BLE001 - any failure to read is the answer
        return False


def table(rows: list[FaultResult]) -> str:
    """The report's markdown table."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} ms"

    lines = [
        "| fault | stop latency | unsafe commands | data lost (counted) | recovery | re-armed by a person "
        "| loadable | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rec = "-" if r.recovery_s is None else f"{r.recovery_s:.1f} s"
        person = "-" if r.rearmed_by_person is None else ("yes" if r.rearmed_by_person else "NO")
        lines.append(
            f"| {r.fault} | {ms(r.stop_ms)} | {r.unsafe} | {r.lost} ({'yes' if r.lost_counted else 'NO'}) "
            f"| {rec} | {person} | {'yes' if r.loadable else 'NO'} | {r.note} |"
        )
    return "\n".join(lines)


def as_json(rows: list[FaultResult]) -> list[dict]:
    return [asdict(r) for r in rows]

"""`agent bench faults`: the graph as separate node processes, one fault at a time, and what each costs.

The nodes `ros2 launch` starts for drive opd (encoder, opd, sim bridge: the OPD core runs the student's
head and the teacher) run as it starts them (`agent.fault_graph`), on the MuJoCo default behind the
real-robot proxy, the opd node driving and learning (`learn`). This process watches `/opd/action` (the one
command the robot follows) and `/diagnostics`, timed by when they were sent, and records a bag of every
topic (`BagRecorder`, whose sequence-gap counts are the data lost).

Per fault: the stop latency (fault -> the first safe action sent on `/opd/action`), the unsafe commands
(non-safe ones answering an input older than 0.5 s when sent, or sent once disarmed), the messages lost in
its window and whether a report counts them, the recovery (restart -> commands flow again; a restarted opd
node comes up disarmed and is armed by `agent.arming.set_armed`, the person), and whether what was written
can be loaded. Two nodes need no stop of their own: the sim bridge is the robot (its world stops with its
process, as a real base's firmware watchdog stops it when its driver dies), and the opd node is the one that
sends stops (the sim bridge's command watchdog stops the base then: its first safe step's time,
`safe_since` on /diagnostics). The clock steps (fault 5) come last, on the graph restarted under libfaketime.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rclpy.context import Context

from agent import graph
from agent.arming import set_armed
from agent.fault_graph import STALE_S, GraphProcesses, Watch, configure
from agent.recorder import BagRecorder

NODES = tuple(n.name for n in graph.nodes_for("mujoco", "opd"))  # as the launch starts them
WATCH_S = 3.0  # time each fault is watched before the node is restarted, s
STEADY_TIMEOUT_S = 180.0  # commands must flow within this after a (re)start, s
PERSON_S = 3.0  # a restarted opd node is watched this long before a person arms it, s
PAUSE_S = 25.0  # a publisher gone this long leaves DDS discovery (Fast DDS's lease: 20 s), s
JUMP_S = 5.0  # the nodes' system clock stepped by this, and back after CLOCK_HELD_S (fault 5), s
CLOCK_HELD_S = 10.0
LOAD_S = 10.0  # every core saturated this long by another process (fault 7), s
_SPIN = (
    "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass"
)


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


class FaultBench:
    """Runs the faults on one graph (see the module doc); `run()` returns a row per fault."""

    def __init__(
        self, context: Context, workdir: Path, artifact: Path, params: dict, tmpfs: Path | None
    ) -> None:
        self.context, self.workdir, self.artifact, self.tmpfs = context, workdir, artifact, tmpfs
        self.graph = GraphProcesses(workdir, artifact, params)
        self.watch = Watch(context)
        self.bag = BagRecorder(workdir / "bag", graph.TOPICS.values(), context)

    def run(self, kills: tuple[str, ...] = (*sorted(set(NODES) - {"opd"}), "opd")) -> list[FaultResult]:
        rows = self.killed_writes()
        for name in NODES:
            self.graph.start(name)
        try:
            self._steady(time.time())
            rows += [self.kill_learner(), self.fill_disk(), self.bad_version("corrupt")]
            rows += [self.bad_version("other encoder"), self.saturate_cpu()]
            rows += [self.pause("sim_bridge")] + [self.kill(name) for name in kills] + self.clock_steps()
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

    def _stop_note(self, t0: float, safe: float | None) -> str:
        """When the base's last drive command was sent and how long it ran on it before the stop."""
        if safe is None:
            return "NO safe action"
        last = self.watch.last_drive(safe)
        if last is None:
            return ""
        when = f"{abs(last - t0) * 1e3:.0f} ms {'after' if last > t0 else 'before'} the fault"
        return f"the last drive command {when}, the stop {(safe - last) * 1e3:.0f} ms after that command"

    def kill(self, name: str) -> FaultResult:
        """SIGKILL one node mid-run; restart it as the launch would (the opd node disarmed)."""
        lost0, t0 = self._lost(), time.time()
        self.graph.kill(name)
        time.sleep(WATCH_S)
        safe = self.watch.first_safe(t0)
        stop_ms = None if safe is None else (safe - t0) * 1e3
        if name == "sim_bridge":
            note = f"the base is this process: it stops with it; the opd node's stop {stop_ms:.0f} ms later"
            stop_ms = 0.0
        elif name == "opd":
            base = self.watch.time_value(t0, "sim_bridge", "safe_since")
            stop_ms = None if base is None else (base - t0) * 1e3
            timeout = self.graph.params["sim_bridge"]["ros__parameters"]["command_timeout_s"]
            note = f"stopped by the sim bridge's command watchdog (command_timeout_s {timeout:g} s)"
        else:
            note = self._stop_note(t0, safe)
        restart = time.time()
        unsafe = self.watch.unsafe(t0, restart)
        self.graph.start(name, armed=name != "opd")
        rearmed, arm_at = None, restart
        if name == "opd":
            configure(self.context, "/opd", STEADY_TIMEOUT_S)
            time.sleep(PERSON_S)
            rearmed = self.watch.flowing(restart) is None  # nothing moved before a person armed it
            arm_at = time.time()
            set_armed("arm", context=self.context, timeout_s=30.0)
        flowing = self._steady(arm_at)
        return FaultResult(
            f"SIGKILL {name}",
            stop_ms,
            unsafe,
            self._lost() - lost0,
            True,
            flowing - arm_at,
            rearmed,
            True,
            note,
        )

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
            True,
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
        disarmed = time.time()
        time.sleep(1.0)
        report = rec.stop()
        # The opd node's stop on deactivation: the last command before the disarm returned (a stop of its
        # watchdog's on a late frame may come before it, and drive commands after that one).
        safe = self.watch.last_safe(t0, disarmed)
        ok = _readable(self.tmpfs / "bag")
        rearm_at = time.time()
        rearmed = safe is not None and self.watch.flowing(safe) is None
        set_armed("arm", context=self.context)
        flowing = self._steady(rearm_at)
        # Not its sequence gaps: started mid-run, it counts what was published before it as missing.
        lost = sum(report.not_stored.values())
        return FaultResult(
            "disk full while recording",
            None if safe is None else (safe - t0) * 1e3,
            self.watch.unsafe(t0, rearm_at, disarmed_from=safe if safe is not None else t0),
            lost,
            bool(report.failure),
            flowing - rearm_at,
            rearmed,
            ok,
            f"{sum(report.written.values())} stored, {lost} not stored (in metadata.yaml)",
        )

    def bad_version(self, kind: str) -> FaultResult:
        """A student version that is corrupt, or of another encoder, through the opd node's own loader.

        With drive opd versions reach the node only from its learner child, so the bench cannot hand it
        one: the loader it calls on each (`opd.live.loading.acting_version`) is run here on the bad one;
        the node logs the refusal and acts on with its current student (tests/opd/distill/test_onnx_acting).
        """
        from opd.live.loading import acting_version
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
        base = Artifact.load(self.artifact)
        try:
            acting_version(path, base)
            note = "ACCEPTED by the opd node's loader"
        except ValueError as err:  # what take_version refuses
            reason = str(err).split(": ", 1)[-1].split("; ")[0]  # without the path and the advice
            note = f"refused by the opd node's loader ({reason}); the current one acts"
        return FaultResult(f"student version: {kind}", None, 0, 0, True, None, None, True, note)

    def saturate_cpu(self) -> FaultResult:
        """Every core busy with another process (one spinning process per core, nice 0) for LOAD_S."""
        cores = len(os.sched_getaffinity(0))
        lost0, t0 = self._lost(), time.time()
        hogs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(LOAD_S)]) for _ in range(cores)]
        for hog in hogs:
            hog.wait()
        t1 = time.time()
        flowing = self._steady(t1)
        died = self.graph.died()
        safe = self.watch.first_safe(t0)
        stops, drives = self.watch.count(t0, t1, safe=True), self.watch.count(t0, t1, safe=False)
        note = (
            f"{cores} cores for {LOAD_S:g} s: {drives} drive commands and {stops} safe actions meanwhile; "
            + (f"nodes DIED: {died}" if died else "no node died")
        )
        return FaultResult(
            f"every core saturated {LOAD_S:g} s",
            None if safe is None or safe > t1 else (safe - t0) * 1e3,
            self.watch.unsafe(t0, time.time()),
            self._lost() - lost0,
            True,
            flowing - t1,
            None,
            not died,
            note,
        )

    def pause(self, name: str) -> FaultResult:
        """Fault 6: a node's publishers vanish (SIGSTOP) past the DDS lease, then come back (SIGCONT) and
        are discovered again; nothing restarts, nobody re-arms. With drive opd the camera's (the sim
        bridge's) is the one: the teacher runs inside the opd node."""
        lost0, t0 = self._lost(), time.time()
        proc = self.graph.procs[name]
        proc.send_signal(signal.SIGSTOP)
        time.sleep(PAUSE_S)
        back = time.time()
        proc.send_signal(signal.SIGCONT)
        safe = self.watch.first_safe(t0)
        stop_ms = None if safe is None or safe > back else (safe - t0) * 1e3
        # The sim bridge publishes the camera and is the base: the base freezes with it, and the stop is the
        # opd node's, on its silent camera.
        note = f"the base is this process: frozen with it; {self._stop_note(t0, safe)}"
        try:
            recovery = self._steady(back) - back
        except RuntimeError as err:
            recovery, note = None, f"{note}; NOT BACK: {err}"
        return FaultResult(f"{name} gone {PAUSE_S:g} s (SIGSTOP), back", stop_ms,
                           self.watch.unsafe(t0, time.time()), self._lost() - lost0, True, recovery, None,
                           True, note)  # fmt: skip

    def clock_steps(self) -> list[FaultResult]:
        """Fault 5, back and forward, on the graph restarted under libfaketime (not run without it)."""
        if self.graph.faketime is None:
            note = "not run: needs libfaketime (apt install libfaketime)"
            return [FaultResult(f"clock stepped {way}", None, 0, 0, True, None, None, True, note)
                    for way in ("back", "forward")]  # fmt: skip
        self.graph.stop_all()
        self.graph.stepped_clock = True
        for name in NODES:
            self.graph.start(name)
        try:
            self._steady(time.time())
        except RuntimeError:  # every clock call of every node reads a file: a loaded host lags
            note = f"not run: the graph under libfaketime never drove within {STEADY_TIMEOUT_S:g} s"
            return [FaultResult(f"clock stepped {way}", None, 0, 0, True, None, None, True, note)
                    for way in ("back", "forward")]  # fmt: skip
        return [self.step_clock(-JUMP_S), self.step_clock(JUMP_S)]

    def step_clock(self, step_s: float) -> FaultResult:
        """Fault 5: every node's system clock stepped by `step_s` (as NTP or chrony steps a host's clock),
        and back to true time CLOCK_HELD_S later.

        Sent times are read on the stepped clock then, and taken back to true time here. Input stamps follow
        the step from the sim bridge's next observation on (as a camera driver's do), so a command's input
        age is sent - stamp, or (sent - step_s) - stamp for an input stamped before the step (`_true_age`).
        """
        fault = f"clock stepped {'back' if step_s < 0 else 'forward'} {abs(step_s):g} s, {CLOCK_HELD_S:g} s"
        lost0, mark, t0 = self._lost(), self.watch.mark(), time.time()
        self.graph.set_clock(step_s)
        time.sleep(CLOCK_HELD_S)
        stepped, t1 = self.watch.between(mark, self.watch.mark()), time.time()
        self.graph.set_clock(0.0)
        stops = [t - step_s for t, src, _ in stepped if src == "safe" and t - step_s > t0]
        drives = [(t - step_s, _true_age(t - stamp, step_s)) for t, src, stamp in stepped if src != "safe"]
        unsafe = sum(1 for _, age in drives if age >= STALE_S) + self.watch.unsafe(t1, time.time())
        # The clock is not stepped back on a robot: what counts is driving again while it stays stepped.
        resumed = [t for t, age in drives if stops and t > stops[0] and age < STALE_S]
        flowing = self._steady(t1)
        died = self.graph.died()
        again = (f"driving again {resumed[0] - t0:.1f} s after the step" if resumed
                 else f"driving again {flowing - t1:.1f} s after the clock came back")  # fmt: skip
        note = f"{len(drives)} drive commands and {len(stops)} safe actions while stepped; {again}; " + (
            f"nodes DIED: {died}" if died else "no node died"
        )
        stop_ms = (stops[0] - t0) * 1e3 if stops else None
        recovery = resumed[0] - t0 if resumed else flowing - t1
        return FaultResult(fault, stop_ms, unsafe, self._lost() - lost0, True, recovery, None, not died, note)

    def killed_writes(self) -> list[FaultResult]:
        """Fault 4: a checkpoint, a student version and an export each killed mid-write (no graph needed)."""
        from opd.benchmark.killed_writes import run_all
        from policies.artifact import Artifact

        rows = []
        for k in run_all(self.workdir / "writes", Artifact.load(self.artifact)):
            rows.append(
                FaultResult(f"SIGKILL mid-write: {k.write}", None, 0, 0, True, None, None, k.loadable, k.note)
            )
        return rows


def _true_age(apparent_s: float, step_s: float) -> float:
    """A command's input age, sent and stamped on a clock stepped by `step_s` in between or not: of
    `apparent_s` (both on one side of the step) and `apparent_s - step_s` (stamped before it, sent after), the
    one an answer can have, the smaller that is not negative."""
    return min((a for a in (apparent_s, apparent_s - step_s) if a >= 0.0), default=apparent_s)


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

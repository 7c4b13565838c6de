"""Stop signals on a node process: the robot is stopped first, whatever signals arrive and in what order.

A terminal's Ctrl-C under `ros2 launch` gives each node two signals within milliseconds (the terminal's,
then launch's own), and a SIGTERM 5 s later if it is still up. The armed opd node runs here as the launch
starts it, one process per run in a namespace of its own, executing the test's drive proposals (drive
student) while the test listens on /cmd_vel as a base would. After a second signal at gaps that land it in
each phase of the shutdown, the last command the base hears must be the stop, and the process must exit 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from agent.base_command import velocity_of
from agent.messages import ActionCodec, stamp_to_sec
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from ros_harness import Probe, spin_for

from policies.artifact import Artifact

pytestmark = pytest.mark.slow

RUNS = 20
AT_ONCE = 10  # processes side by side: their start-up (imports) is most of a run's time
# Second signal after the first, s: at once (a terminal and launch), then into the spin's poll, the
# executor's drain, the safe action's acknowledgement, and after the exit.
GAPS_S = (0.0, 0.002, 0.01, 0.03, 0.06, 0.1, 0.2)
HANDLER_S = 0.02  # from sending a signal to its handler running in the node, at most, s
SECOND = (signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGTERM)  # SIGTERM: launch's escalation


@dataclass
class Run:
    index: int
    gap_s: float
    second: signal.Signals
    log: Path
    proc: subprocess.Popen | None = None
    probe: Probe | None = None
    driven: list = field(default_factory=list)  # /cmd_vel heard before the first signal
    signalled_at: float = 0.0  # wall time of the first signal, s

    @property
    def namespace(self) -> str:
        return f"/stop{self.index}"


def start(run: Run, artifact: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "agent.nodes.opd", "--ros-args", "-r", f"__ns:={run.namespace}",
           "-p", f"artifact_dir:={artifact}", "-p", "autostart:=true", "-p", "drive:=student"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=run.log.open("w"), stderr=subprocess.STDOUT)


def test_every_stop_signal_sequence_leaves_the_base_on_the_stop_and_exits_0(
    ros_context: Context, contract_artifact: Path, tmp_path: Path
) -> None:
    contract = Artifact.load(contract_artifact).contract
    codec = ActionCodec(contract)
    drive, params = contract.action("drive", speed=0.5)  # full speed ahead
    runs = [Run(k, GAPS_S[k % len(GAPS_S)], SECOND[k % len(SECOND)], tmp_path / f"opd{k}.log")
            for k in range(RUNS)]  # fmt: skip
    executor = SingleThreadedExecutor(context=ros_context)
    failures: list[str] = []
    try:
        for batch in (runs[i : i + AT_ONCE] for i in range(0, RUNS, AT_ONCE)):
            for run in batch:
                run.probe = Probe(ros_context, f"base{run.index}", namespace=run.namespace)
                run.probe.record("/cmd_vel", "/opd/action")
                run.probe.advertise("/agent/action")
                executor.add_node(run.probe.node)
                run.proc = start(run, contract_artifact)

            deadline = time.monotonic() + 60.0
            while not all(driving(r) for r in batch) and time.monotonic() < deadline:
                propose(batch, codec.to_msg(drive, params, time.time(), "student"))
                spin_for(executor, 0.05)
            assert all(driving(r) for r in batch), {r.index: r.log.read_text() for r in batch}
            for run in batch:  # one after the other, proposals flowing between
                run.driven = list(run.probe.received["/cmd_vel"])
                run.signalled_at = time.time()
                run.proc.send_signal(signal.SIGINT)
                if run.gap_s:
                    time.sleep(run.gap_s)
                run.proc.send_signal(run.second)
                propose(batch, codec.to_msg(drive, params, time.time(), "student"))
                spin_for(executor, 0.05)
            while any(r.proc.poll() is None for r in batch) and time.monotonic() < deadline + 30.0:
                propose(batch, codec.to_msg(drive, params, time.time(), "student"))
                spin_for(executor, 0.05)
            spin_for(executor, 0.3)  # what is still in flight
            for run in batch:
                failures += check(run, codec, contract.safe_skill_id)
    finally:
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
        executor.shutdown()
        for run in runs:
            if run.probe is not None:
                run.probe.node.destroy_node()
    assert not failures, "\n".join(failures)


def propose(batch: list[Run], msg: object) -> None:
    """A drive proposal from every run's 'policy', still sending after the signals, as a policy may."""
    for run in batch:
        run.probe.publish("/agent/action", msg)


def driving(run: Run) -> bool:
    return sum(velocity_of(t)[0] > 0 for t in run.probe.received["/cmd_vel"]) >= 5


def check(run: Run, codec: ActionCodec, stop: int) -> list[str]:
    """What went wrong in one run (SIGINT, then `second` after `gap_s`); empty when nothing did."""
    what = f"run {run.index} (SIGINT, then {run.second.name} after {run.gap_s * 1e3:.0f} ms)"
    code = run.proc.poll()
    if code is None:
        return [f"{what}: still running 30 s after the signals:\n{run.log.read_text()}"]
    out = []
    if code != 0:
        out.append(f"{what}: exit code {code}:\n{run.log.read_text()}")
    commands, actions = run.probe.received["/cmd_vel"], run.probe.received["/opd/action"]
    if len(commands) <= len(run.driven):
        out.append(f"{what}: no command reached the base after the signal")
    elif velocity_of(commands[-1]) != (0.0, 0.0) or codec.from_msg(actions[-1])[0] != stop:
        out.append(f"{what}: the base was left on {velocity_of(commands[-1])}, not the stop")
    # Commands are stamped when issued: none but the stop may be issued once the signal is in (the node
    # halts in the signal handler; HANDLER_S allows for the handler's scheduling on a busy host).
    late = [velocity_of(c) for c in commands if stamp_to_sec(c.header.stamp) > run.signalled_at + HANDLER_S
            and velocity_of(c) != (0.0, 0.0)]  # fmt: skip
    if late:
        out.append(f"{what}: {len(late)} drive command(s) issued after the signal: {late[:3]}")
    return out

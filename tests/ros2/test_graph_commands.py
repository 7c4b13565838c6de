"""`agent run` and `agent bench graph` as subprocesses: the whole graph on MuJoCo, a bag, the figures."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from agent import graph
from agent.base_command import velocity_of
from agent.host_steal import read_steal_s
from agent.messages import action_source, msg_to_action

from opd.replay.bags.reader import typestore
from policies.artifact import Artifact

AGENT = Path(sys.executable).with_name("agent")
pytestmark = pytest.mark.slow


def agent(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([str(AGENT), *args], capture_output=True, text=True, timeout=timeout)


def test_run_records_a_bag_that_rosbags_reads_and_leaves_the_robot_stopped(
    tiny_artifact: Path, tiny_teacher: Path, tmp_path: Path
) -> None:
    from rosbags.highlevel import AnyReader

    bag = tmp_path / "bag"
    out = agent("run", "--artifact", str(tiny_artifact), "--teacher", str(tiny_teacher), "--drive", "teacher",
                "--duration", "6", "--record", str(bag))  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "robot left on the safe action (skill 2: stop)" in out.stdout
    assert f"to {bag} (rosbag2, MCAP)" in out.stdout

    # The resolved configuration rides with the data (rosbag2 custom_data, which rosbags does not expose).
    custom = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]["custom_data"]
    assert json.loads(custom["agent.launch_args"])["drive"] == "teacher"
    contract = Artifact.load(tiny_artifact).contract
    with AnyReader([bag], default_typestore=typestore()) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            t.name: t.msg_type for t in graph.TOPICS.values()
        }
        last: dict[str, object] = {}
        counts: dict[str, int] = {}
        actions: dict[str, dict[tuple[int, int], list[float]]] = {"/teacher/action": {}, "/opd/action": {}}
        for conn, _, raw in reader.messages():
            last[conn.topic] = msg = reader.deserialize(raw, conn.msgtype)
            counts[conn.topic] = counts.get(conn.topic, 0) + 1
            if conn.topic in actions:
                actions[conn.topic][msg.header.stamp.sec, msg.header.stamp.nanosec] = [msg.skill, *msg.params]
    for topic in ("/camera/image_raw", "/imu/data", "/sim/privileged_state", "/teacher/action", "/clock"):
        assert counts.get(topic, 0) > 10, (topic, counts)
    assert counts["/imu/data"] > 5 * counts["/camera/image_raw"]  # 200 Hz vs 20 Hz
    teacher = last["/teacher/action"]
    skill, params = msg_to_action(teacher, contract)  # the contract's, within its bounds
    assert action_source(teacher) == "teacher" and teacher.skill_name == contract.names[skill]
    # --drive teacher: the robot executed the teacher's actions, each with the stamp of the state it answers
    # (the safe action, stamped when sent, only while the teacher had not acted yet).
    teacher_actions = actions["/teacher/action"]
    answers = {k: v for k, v in actions["/opd/action"].items() if k in teacher_actions}
    assert len(answers) > 10 and all(teacher_actions[k] == v for k, v in answers.items())
    others = [v for k, v in actions["/opd/action"].items() if k not in teacher_actions]
    assert all(int(v[0]) == contract.safe_skill_id for v in others)
    # The opd node's last word before the graph stopped: the safe action, and a zero Twist.
    final = last["/opd/action"]
    assert final.skill == contract.safe_skill_id and action_source(final) == "safe"
    assert velocity_of(last["/cmd_vel"]) == (0.0, 0.0)


def test_run_with_the_teacher_driving_and_no_checkpoint_fails_with_one_clear_line(tmp_path: Path) -> None:
    out = agent("run", "--drive", "teacher", "--teacher", str(tmp_path / "none.pt"), "--duration", "1")
    assert out.returncode == 2
    assert f"needs a teacher checkpoint: none at {tmp_path / 'none.pt'}" in out.stderr
    assert "agent train teacher" in out.stderr and "Traceback" not in out.stderr


def test_bench_graph_prints_its_figures_as_json(tiny_artifact: Path) -> None:
    out = agent("bench", "graph", "--artifact", str(tiny_artifact), "--drive", "student", "--proxy",
                "--warmup", "1", "--duration", "4", "--json")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["duration_s"] >= 4.0 and result["backend"] == "onnxruntime" and result["drive"] == "student"
    assert result["cycles"] > 0 and result["control_rate_hz"] > 0
    for key in ("missed_cycles", "dropped_messages"):
        assert isinstance(result[key], int) and result[key] >= 0
    lat = result["latency_ms"]
    assert lat["p50"] is not None and 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    assert result["jitter_ms"]["p50"] <= result["jitter_ms"]["p99"]
    assert result["image_hw"] == [32, 32] and result["targets"]["latency_p99_ms"] == 40.0
    host = result["host"]  # None where the host reports no steal time (not Linux)
    if read_steal_s() is not None:
        assert host["steal_ms"] >= 0.0 and 0.0 <= host["steal_share"] <= 1.0
        assert 0 <= host["missed_during_steal"] <= result["missed_cycles"]
        calm = host["latency_outside_steal_ms"]  # a subset of the answers: never above the raw figures
        assert calm["answers"] >= 0 and (calm["max"] is None or calm["max"] <= lat["max"])
    else:
        assert host is None
    assert "learner" not in result  # nothing learns beside a plain student
    # Where the time goes: the frame's stages along its path add up to the tick -> action latency.
    stages, total = result["stages_ms"], result["stages_total_ms"]
    assert list(stages)[:4] == ["robot thread wake", "publish", "camera hop to encoder", "encoder callback"]
    assert list(stages)[-1] == "publish /opd/action" and "policy decision" in stages
    assert total["frames"] > 0 and all(0 <= s["p50"] <= s["p99"] for s in stages.values())
    assert total["p50"] == pytest.approx(lat["p50"], rel=0.25, abs=1.0)
    assert 0.5 * total["p50"] <= sum(s["p50"] for s in stages.values()) <= 1.5 * total["p50"]
    # The true latency: the proxy's camera (120 ms behind, then the tick that releases the frame) on top.
    age, true = result["image_age_at_release_ms"], result["image_to_command_ms"]
    assert result["proxy_camera"]["latency_ms"] == 120.0 and 120.0 <= age["p50"] <= 200.0
    assert true["p50"] == pytest.approx(lat["p50"] + age["p50"], abs=5.0)
    cpu = result["cpu"]
    assert cpu["per_cycle_ms"] > 0 and 0.0 < cpu["process_share"] <= 1.0
    assert {"encoder", "policy", "opd", "sim_bridge robot thread"} <= set(cpu["threads"])
    for share in cpu["threads"].values():
        assert 0.0 <= share["core_share"] <= 1.0 and 0.0 <= share["process_share"] <= 1.0


def test_bench_graph_with_learning_reports_the_learners_updates(tiny_artifact: Path) -> None:
    """`--learn` benchmarks the control loop beside the opd node's learner thread: the figures say how much
    it learnt meanwhile, so a quiet loop cannot come from a learner that never ran."""
    out = agent("bench", "graph", "--artifact", str(tiny_artifact), "--drive", "opd", "--learn", "--warmup",
                "2", "--duration", "6", "--json")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["drive"] == "opd" and result["cycles"] > 0
    learner = result["learner"]
    # Both figures are rounded to 0.01 (the rate and the seconds), so compare within 1%: a wrong window
    # (e.g. warm-up included) is off by a third.
    assert learner["updates"] > 0 and learner["updates_per_s"] == pytest.approx(
        learner["updates"] / result["duration_s"], rel=0.01
    )


def test_run_stops_on_sigterm_with_the_robot_on_the_safe_action_whatever_signals_follow(
    tiny_artifact: Path, tiny_teacher: Path, tmp_path: Path
) -> None:
    """Like Ctrl-C: the graph is stopped while ROS is still up, so the safe action still goes out; a Ctrl-C
    and another SIGTERM during that stop (a supervisor's escalation) are ignored, not a cut-short stop."""
    err = tmp_path / "stderr.log"
    cmd = [str(AGENT), "run", "--artifact", str(tiny_artifact), "--teacher", str(tiny_teacher)]
    with err.open("w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            first = proc.stdout.readline()  # the first progress line (every node runs): the graph is up
            assert first.startswith("[opd] robot:") and " time: " in first, first + err.read_text()
            for sig, wait_s in ((signal.SIGTERM, 0.02), (signal.SIGINT, 0.2), (signal.SIGTERM, 0.0)):
                proc.send_signal(sig)
                time.sleep(wait_s)
            rest, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, rest + err.read_text()
    assert "stopping (interrupted)" in rest and "robot left on the safe action (skill 2: stop)" in rest
    assert "Traceback" not in err.read_text()


def test_the_main_job_runs_the_committed_opd_student_on_the_proxy_with_the_gate(tmp_path: Path) -> None:
    """`bash bootstrap.sh run`'s command, shortened: the committed student drives, the OPD gate reports;
    with --video, an MP4 of the run (the camera beside a camera following the robot, 10 frames a second)."""
    import imageio.v3 as iio

    from opd.live.loading import PROJECT_ROOT

    student = PROJECT_ROOT / "sim/robots/diffbot/student"
    video = tmp_path / "run.mp4"
    out = agent("run", "--sim", "mujoco", "--proxy", "--drive", "opd", "--artifact", str(student),
                "--duration", "8", "--video", str(video))  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    last = [line for line in out.stdout.splitlines() if line.startswith("[opd]")][-1]
    assert "OPD gate: teacher on" in last and "decisions" in last  # the gate decided, and says how
    assert "robot left on the safe action (skill 2: stop)" in out.stdout
    frames = iio.imread(video)  # (F, H, W, 3): the file is whole and plays
    assert f"video: {len(frames)} frames in {video}" in out.stdout
    assert len(frames) >= 20 and frames.shape[2] > frames.shape[1]  # the two views side by side
    assert frames[:, :, : frames.shape[2] // 2].std() > 5  # a picture, not a blank


class _StartingSession:
    """A session whose learner process has made no update and stops (error) on the given spin."""

    def __init__(self, fails_on_spin: int | None) -> None:
        self.spins, self.fails_on_spin = 0, fails_on_spin

    def learner_updates(self) -> int:
        return 0

    def learner_error(self) -> BaseException | None:
        failed = self.fails_on_spin is not None and self.spins >= self.fails_on_spin
        return RuntimeError("Traceback ... ImportError: torch") if failed else None

    def spin(self, seconds: float) -> None:
        self.spins += 1


def test_bench_warm_up_fails_at_once_with_why_when_the_learner_process_stopped() -> None:
    from agent.commands.bench import wait_for_learning

    session = _StartingSession(fails_on_spin=2)
    with pytest.raises(RuntimeError, match="stopped before its first update: .*ImportError: torch"):
        wait_for_learning(session, timeout_s=600.0)
    assert session.spins == 2  # not the whole warm-up
    with pytest.raises(RuntimeError, match="made no update in 0 s"):
        wait_for_learning(_StartingSession(fails_on_spin=None), timeout_s=0.0)

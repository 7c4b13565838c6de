"""OPD node over real DDS: the one source of the executed action and of the base command, for every drive.

The probe subscribes before the node is activated (autostart off), so it hears everything the node sends:
/opd/action and /cmd_vel then pair up message by message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from agent import graph
from agent.base_command import TwistMapping, velocity_of
from agent.executors import MultiThreadedExecutor, stop_executor
from agent.messages import (
    SOURCES,
    ActionCodec,
    embedding_to_msg,
    privileged_names,
    privileged_to_msg,
    stamp_to_sec,
)
from agent.nodes.opd import OpdNode
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from ros_harness import Probe, record_sent, spin_for, spin_until, tick_while_an_action_executes

WARN, ERROR = b"\x01", b"\x02"
STUDENT, TEACHER, ACTION, CMD_VEL = "/agent/action", "/teacher/action", "/opd/action", "/cmd_vel"
STATE, PRIVILEGED, GATE = "/agent/state", "/sim/privileged_state", "/opd/gate"
Rig = tuple[OpdNode, Probe, MultiThreadedExecutor, ActionCodec]
Start = Callable[..., Rig]


@pytest.fixture
def start_opd(ros_context: Context, contract_artifact: Path) -> Iterator[Start]:
    """Starts an active OPD node with extra parameters; everything it sends is recorded from activation on.

    By default it executes the student's actions (drive student): the OPD core has tests of its own below.
    Frames here are fed slower than real time, stamped up to 1 s back, so the age limit on what is sent
    (`max_input_age_s`) is lifted unless a test sets it: it has a test of its own.
    """
    started: list[tuple[OpdNode, Probe, MultiThreadedExecutor]] = []

    def start(artifact: Path = contract_artifact, fused: bool = False, **params: object) -> Rig:
        """`fused`: as `agent.bringup` runs the node beside the encoder, on one single-threaded executor
        (here the test's thread), without its /agent/state subscription (the test calls `take_state`)."""
        values = {"artifact_dir": str(artifact), "autostart": False, "drive": "student",
                  "max_input_age_s": 60.0, **params}  # fmt: skip
        overrides = [Parameter(name, value=value) for name, value in values.items()]
        node = OpdNode(context=ros_context, parameter_overrides=overrides)
        node.states_in_process = fused
        probe = Probe(ros_context)
        probe.record(ACTION, CMD_VEL, GATE, "/diagnostics")
        probe.advertise(STUDENT, TEACHER, STATE, PRIVILEGED)
        executor = (SingleThreadedExecutor if fused else MultiThreadedExecutor)(context=ros_context)
        executor.add_node(node)
        executor.add_node(probe.node)
        started.append((node, probe, executor))
        node.trigger_configure()
        assert node.lifecycle_state == "inactive", node.fault

        def connected() -> bool:
            pubs = (node.pub_action, node.pub_cmd)
            return all(p.get_subscription_count() > 0 for p in pubs) and probe.hears(ACTION, CMD_VEL)

        assert spin_until(executor, connected)
        node.trigger_activate()
        assert node.lifecycle_state == "active", node.fault
        assert spin_until(executor, lambda: probe.matched(STUDENT, TEACHER, by=node))
        return node, probe, executor, ActionCodec(node.contract)

    yield start
    for node, probe, executor in started:
        stop_executor(executor)
        node.finalize()  # as the bringup closes: a learner process stops with the node
        node.destroy_node()
        probe.node.destroy_node()


def executed(probe: Probe, codec: ActionCodec) -> list[tuple[float, int, np.ndarray]]:
    """(stamp, skill, params) of every /opd/action received, in order (decoding checks the contract)."""
    return [(stamp_to_sec(m.header.stamp), *codec.from_msg(m)) for m in probe.received[ACTION]]


def acted(probe: Probe, codec: ActionCodec) -> list[tuple[float, int, np.ndarray]]:
    """The executed actions other than the safe action."""
    return [a for a in executed(probe, codec) if a[1] != codec.contract.safe_skill_id]


def assert_commands_pair_up(probe: Probe, codec: ActionCodec, executor: MultiThreadedExecutor) -> None:
    """Each /cmd_vel is the TwistMapping of the /opd/action that went out with it, in order."""
    mapping = TwistMapping(codec.contract)
    both = lambda: len(probe.received[CMD_VEL]) == len(probe.received[ACTION]) > 0  # noqa: E731
    assert spin_until(executor, both), (len(probe.received[ACTION]), len(probe.received[CMD_VEL]))
    for (_, skill, params), twist in zip(executed(probe, codec), probe.received[CMD_VEL], strict=True):
        assert velocity_of(twist) == mapping.velocity(skill, params)


@pytest.mark.parametrize("drive", ["student", "teacher"])
def test_the_robot_executes_the_drive_sources_action_and_cmd_vel_is_its_twist(
    start_opd: Start, drive: str
) -> None:
    node, probe, executor, codec = start_opd(drive=drive)
    contract = codec.contract
    sent: dict[str, list] = {STUDENT: [], TEACHER: []}  # the messages each source sent
    proposals = {
        STUDENT: contract.action("turn_in_place", turn_rate=0.7),
        TEACHER: contract.action("drive", speed=0.4, curvature=-1.0),
    }
    t0 = time.time()
    for i in range(4):  # both sources act at 20 Hz, each action stamped with the input it answers
        for k, topic in enumerate((STUDENT, TEACHER)):
            stamp = t0 + 0.05 * i + 0.01 * k
            sent[topic].append(codec.to_msg(*proposals[topic], stamp, "student" if k == 0 else "teacher"))
            probe.publish(topic, sent[topic][-1])
        spin_for(executor, 0.05)
    source = graph.DRIVE_SOURCES[drive]
    safe = contract.safe_skill_id
    out = lambda: [m for m in probe.received[ACTION] if codec.from_msg(m)[0] != safe]  # noqa: E731
    assert spin_until(executor, lambda: len(out()) == len(sent[source]))
    for got, want in zip(out(), sent[source], strict=True):  # the source's actions, with their stamps
        assert got.header.stamp == want.header.stamp and got.source == want.source
        assert (got.skill, list(got.params)) == (want.skill, list(want.params))
    assert_commands_pair_up(probe, codec, executor)
    # the other source is checked, not executed; its last message may land after the driving source's output
    assert spin_until(executor, lambda: node.student.accepted == node.teacher.accepted == 4)


def test_the_base_command_is_twist_stamped_when_issued_in_the_base_frame(start_opd: Start) -> None:
    node, probe, executor, codec = start_opd()
    before = time.time()
    probe.publish(
        STUDENT,
        codec.to_msg(*codec.contract.action("drive", speed=0.4, curvature=0.5), before - 0.2, "student"),
    )
    assert spin_until(executor, lambda: len(probe.received[CMD_VEL]) > 0)
    cmd = probe.received[CMD_VEL][0]
    assert cmd.header.frame_id == "base_link"
    assert before <= stamp_to_sec(cmd.header.stamp) <= time.time()  # issued now, not the image's stamp


def test_plain_twist_is_a_parameter(ros_context: Context, contract_artifact: Path) -> None:
    overrides = [Parameter("artifact_dir", value=str(contract_artifact)), Parameter("drive", value="student"),
                 Parameter("cmd_vel_stamped", value=False)]  # fmt: skip
    node = OpdNode(context=ros_context, parameter_overrides=overrides)
    try:
        node.trigger_configure()
        assert node.lifecycle_state == "inactive", node.fault
        types = {i.topic_type for i in node.get_publishers_info_by_topic(CMD_VEL) if i.node_name == "opd"}
        assert types == {"geometry_msgs/msg/Twist"}
    finally:
        node.destroy_node()


def test_an_integer_for_a_float_parameter_is_taken_as_a_float(
    ros_context: Context, contract_artifact: Path, tmp_path: Path
) -> None:
    """Review defect: `-p teacher_timeout_s:=2` crashed the node at start-up with a traceback."""
    params_file = tmp_path / "params.yaml"
    params_file.write_text("opd:\n  ros__parameters:\n    safe_keepalive_hz: 2\n")
    cli = ["--ros-args", "-p", "teacher_timeout_s:=2", "-p", f"artifact_dir:={contract_artifact}",
           "-p", "drive:=student", "--params-file", str(params_file)]  # fmt: skip
    node = OpdNode(context=ros_context, cli_args=cli)
    try:
        assert node.get_parameter("teacher_timeout_s").value == 2.0
        assert node.get_parameter("safe_keepalive_hz").value == 2.0
        assert isinstance(node.get_parameter("teacher_timeout_s").value, float)
        node.trigger_configure()
        assert node.lifecycle_state == "inactive", node.fault
    finally:
        node.destroy_node()


def test_malformed_actions_are_rejected_and_never_executed(start_opd: Start) -> None:
    node, probe, executor, codec = start_opd(teacher_timeout_s=0.2)
    t = time.time()
    skill, params = codec.contract.action("turn_in_place", turn_rate=0.7)
    probe.publish(STUDENT, codec.to_msg(skill, params, t, "student"))
    assert spin_until(executor, lambda: len(acted(probe, codec)) == 1)

    bad_params = params.copy()
    bad_params[0] = 99.0  # drive.speed far outside its bounds
    probe.publish(STUDENT, codec.to_msg(skill, bad_params, t + 0.05, "student"))
    no_skill = codec.to_msg(skill, params, t + 0.1, "student")
    no_skill.skill = 7  # no skill 7
    probe.publish(STUDENT, no_skill)
    assert spin_until(executor, lambda: sum(node.student.rejected.values()) == 2)
    assert node.student.rejected == {"bounds": 1, "skill": 1}
    spin_for(executor, 0.2)  # nothing more is coming: what was executed is final
    assert len(acted(probe, codec)) == 1

    probe.received["/diagnostics"].clear()
    assert spin_until(executor, lambda: "opd: teacher_action" in probe.diagnostics("opd"), timeout_s=3.0)
    teacher = probe.diagnostics("opd")["opd: teacher_action"]
    assert teacher.level == WARN and "nothing to distil from" in teacher.message  # no teacher: only WARN


def test_drive_teacher_without_a_teacher_sends_the_safe_action_and_reports_error(start_opd: Start) -> None:
    """As with sim:=none: no teacher runs; the robot is held on the safe action, not moved by the student."""
    node, probe, executor, codec = start_opd(drive="teacher", safe_keepalive_hz=2.0)
    contract = codec.contract
    skill, params = contract.action("turn_in_place", turn_rate=0.7)
    t0 = time.time()
    for i in range(20):  # the student acts for 1 s
        probe.publish(STUDENT, codec.to_msg(skill, params, t0 + 0.05 * i, "student"))
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: node.student.accepted == 20)
    assert spin_until(executor, lambda: len(executed(probe, codec)) >= 2)
    for _, sent_skill, sent_params in executed(probe, codec):
        assert sent_skill == contract.safe_skill_id and np.array_equal(sent_params, contract.layout.defaults)
    assert_commands_pair_up(probe, codec, executor)
    assert all(velocity_of(t) == (0.0, 0.0) for t in probe.received[CMD_VEL])

    probe.received["/diagnostics"].clear()
    assert spin_until(executor, lambda: "opd: executed_action" in probe.diagnostics("opd"), timeout_s=3.0)
    diag = probe.diagnostics("opd")
    status = diag["opd: executed_action"]
    assert status.level == ERROR and diag["opd: node"].level == ERROR
    assert "drive teacher: no teacher action yet" in status.message and "safe action (stop)" in status.message


def test_a_silent_student_gets_the_safe_action_once_then_at_the_keepalive_rate(start_opd: Start) -> None:
    timeout_s, keepalive_hz = 0.3, 2.0
    node, probe, executor, codec = start_opd(input_timeout_s=timeout_s, safe_keepalive_hz=keepalive_hz)
    safe = codec.contract.safe_skill_id
    skill, params = codec.contract.action("turn_in_place", turn_rate=0.7)
    for _ in range(10):  # the student acts at 20 Hz, then goes silent
        last = time.time()
        probe.publish(STUDENT, codec.to_msg(skill, params, last, "student"))
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: len(acted(probe, codec)) == 10)
    seen = time.time()  # the last student action has been executed by now (delivery can lag its stamp)
    n = max(i for i, (_, k, _) in enumerate(executed(probe, codec)) if k != safe) + 1  # after the last

    def stops() -> list[float]:
        return [stamp for stamp, k, _ in executed(probe, codec)[n:] if k == safe]

    assert spin_until(executor, lambda: len(stops()) >= 3, timeout_s=5.0)
    assert all(k == safe for _, k, _ in executed(probe, codec)[n:])  # only safe actions since
    first, period = stops()[0], 1.0 / keepalive_hz
    # decisive: at the first check past the timeout. Bounded from both sides in the direction delivery lag
    # cannot break: no earlier than the timeout after the last send, no later than 0.5 s past the timeout
    # after the node had executed it (seen here after DDS delivered both ways; a loaded CI host once
    # delivered the last student action 1.4 s after it was sent).
    assert first - last >= timeout_s and first - seen < timeout_s + 0.5, (first - last, first - seen)
    gaps = np.diff(stops()[:3])  # stamped when sent: the keep-alive period, not a 20 Hz tick
    assert np.all(gaps >= period - 1e-3) and np.all(gaps < period + 0.3), gaps

    # the student is back: acting resumes
    probe.publish(STUDENT, codec.to_msg(skill, params, time.time(), "student"))
    assert spin_until(executor, lambda: len(acted(probe, codec)) == 11)
    assert not node.fallback.stopped
    assert_commands_pair_up(probe, codec, executor)


def test_an_action_executed_while_the_watchdog_waits_is_not_followed_by_a_stop(start_opd: Start) -> None:
    """The watchdog judges silence when it holds the lock: it read the time before, so on a loaded host a
    student action executed while it waited looked like a clock gone back, and a stop reached the base right
    after that action."""
    node, probe, executor, codec = start_opd()
    record_sent(node)
    tick_while_an_action_executes(node)
    assert node.sent == [] and not node.fallback.stopped


def test_deactivate_leaves_the_robot_on_the_safe_action(start_opd: Start) -> None:
    node, probe, executor, codec = start_opd()
    skill, params = codec.contract.action("turn_in_place", turn_rate=0.7)
    probe.publish(STUDENT, codec.to_msg(skill, params, time.time(), "student"))
    assert spin_until(executor, lambda: len(acted(probe, codec)) == 1)
    node.trigger_deactivate()
    assert spin_until(executor, lambda: executed(probe, codec)[-1][1] == codec.contract.safe_skill_id)
    assert_commands_pair_up(probe, codec, executor)
    assert velocity_of(probe.received[CMD_VEL][-1]) == (0.0, 0.0)


def opd_config(tmp_path: Path, **gate: object) -> str:
    """An `opd:` config whose gate has the given settings (the skill-disagreement override off), patient
    enough that a slow test machine does not turn the teacher or old frames stale."""
    path = tmp_path / "opd.yaml"
    cfg = {"teacher_timeout_s": 60.0, "student_timeout_s": 60.0, "align": {"max_age_s": 60.0},
           "gate": {"disagree_s": 0.0, **gate}}  # fmt: skip
    path.write_text(yaml.safe_dump({"opd": cfg}))
    return str(path)


def feed_opd(
    probe: Probe,
    executor: MultiThreadedExecutor,
    node: OpdNode,
    artifact: Path,
    frames: int,
    teacher: bool = True,
) -> list[tuple]:
    """The sim twin's privileged state at 20 Hz and, 0.12 s later, a state embedding of each frame (what the
    encoder sends); returns (embedding message, privileged state, active skill) of each frame."""
    from policies.artifact import Artifact

    art = Artifact.load(artifact)
    fields = art.model("predictor")["fields"]
    dim = art.manifest["config"]["student"]["encoder"]["embed_dim"]
    rng = np.random.default_rng(0)
    t0, out = time.time() - 1.0, []
    for i in range(frames):
        stamp = t0 + 0.05 * i
        state = rng.normal(size=len(fields)).astype(np.float32)
        if teacher:
            probe.publish(PRIVILEGED, privileged_to_msg(state, 0, i, stamp, privileged_names(fields)))
            # one at a time: a reliable writer keeps 10, and a loaded machine must not see a burst of more
            assert spin_until(executor, lambda i=i: node.privileged.accepted == i + 1)
        values = rng.normal(size=dim).astype(np.float32)
        emb = embedding_to_msg(values, stamp, "", art.encoder_hash, (0, 0.0, i))
        out.append((emb, state, 0))
    return out


@pytest.mark.parametrize("who", ["teacher", "student"])
def test_drive_opd_executes_the_gates_choice_with_cmd_vel_and_reports_it(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path, who: str
) -> None:
    from opd.live.loading import DEFAULT_TEACHER
    from policies.runtime import load_student
    from policies.teacher_policy import load_teacher, teacher_features

    threshold = 1e-9 if who == "teacher" else 1e9  # the predictor's error always above / below it
    cfg = opd_config(tmp_path, threshold_start=threshold, threshold_end=threshold, schedule="constant")
    node, probe, executor, codec = start_opd(tiny_artifact, drive="opd", opd_config=cfg)
    assert spin_until(executor, lambda: probe.matched(STATE, PRIVILEGED, by=node))
    frames = feed_opd(probe, executor, node, tiny_artifact, 12)
    assert spin_until(executor, lambda: node.privileged.accepted == 12)
    for i, (emb, _, _) in enumerate(frames):  # each arrives after the teacher has passed its stamp
        probe.publish(STATE, emb)  # /agent/state keeps the newest only: one at a time
        assert spin_until(executor, lambda i=i: len(probe.received[GATE]) == i + 1)
    stamps = [stamp_to_sec(e.header.stamp) for e, _, _ in frames]
    out = [o for o in executed(probe, codec) if o[0] in stamps]  # the rest: safe actions before the frames
    assert [o[0] for o in out] == stamps  # one answer to each frame, stamped with it
    student = load_student(tiny_artifact, backend="torch")
    teacher = load_teacher(DEFAULT_TEACHER)
    k = codec.contract.num_skills
    for (_, skill, params), (emb, _, active), gate in zip(out, frames, probe.received[GATE], strict=True):
        if who == "student":
            _, want_skill, want_params = student.act(np.array(emb.data, np.float32))
        else:  # the teacher acts on the newest privileged state it has seen
            want_skill, want_params = teacher.act(teacher_features(frames[-1][1][None], [active], k))
            want_skill, want_params = int(want_skill[0]), want_params[0]
        assert SOURCES[gate.source] == who and gate.header.stamp == emb.header.stamp and gate.reason
        assert skill == want_skill and np.allclose(params, want_params, atol=1e-4)
    assert_commands_pair_up(probe, codec, executor)


def test_an_action_on_an_input_too_old_is_not_sent_and_the_watchdog_stops_the_base(start_opd: Start) -> None:
    """A starved graph decides late: an action answering an image older than `max_input_age_s` when it would
    go out is counted, not sent, and is no sign of life; the safe action follows once nothing fresher came
    for `input_timeout_s`, and a fresh action drives again."""
    node, probe, executor, codec = start_opd(max_input_age_s=0.3, input_timeout_s=0.2)
    safe = codec.contract.safe_skill_id
    drive = codec.contract.action("drive", speed=0.4, curvature=0.0)
    driving = lambda: [m for m in probe.received[ACTION] if codec.from_msg(m)[0] != safe]  # noqa: E731
    probe.publish(STUDENT, codec.to_msg(*drive, time.time(), "student"))
    assert spin_until(executor, lambda: len(driving()) == 1)
    stops = len(probe.received[ACTION]) - 1
    for _ in range(4):  # each answers an image 0.6 s old: none goes out, the watchdog stops the base
        probe.publish(STUDENT, codec.to_msg(*drive, time.time() - 0.6, "student"))
        spin_for(executor, 0.1)
    assert spin_until(executor, lambda: node.stale == 4 and len(probe.received[ACTION]) > stops + 1)
    assert len(driving()) == 1 and node.fallback.stopped
    assert codec.from_msg(probe.received[ACTION][-1])[0] == safe
    probe.publish(STUDENT, codec.to_msg(*drive, time.time(), "student"))
    assert spin_until(executor, lambda: len(driving()) == 2 and not node.fallback.stopped)
    reported = lambda: {  # noqa: E731
        kv.value for m in probe.received["/diagnostics"] for st in m.status for kv in st.values
        if kv.key == "stale_not_sent"
    }  # fmt: skip
    assert spin_until(executor, lambda: "4" in reported())  # a user sees the count


def test_drive_opd_without_a_teacher_lets_the_student_act_alone(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path
) -> None:
    """sim:=none: no privileged state ever arrives; the gate says so and the student drives."""
    node, probe, executor, codec = start_opd(tiny_artifact, drive="opd", opd_config=opd_config(tmp_path))
    assert spin_until(executor, lambda: probe.matched(STATE, by=node))
    for i, (emb, _, _) in enumerate(feed_opd(probe, executor, node, tiny_artifact, 5, teacher=False)):
        probe.publish(STATE, emb)  # /agent/state keeps the newest only: one at a time
        assert spin_until(executor, lambda i=i: len(probe.received[GATE]) == i + 1)
    assert {g.reason for g in probe.received[GATE]} == {"teacher_unavailable"}
    assert all(SOURCES[g.source] == "student" for g in probe.received[GATE])
    assert_commands_pair_up(probe, codec, executor)


def test_fused_the_privileged_states_join_before_the_frame_that_follows_them(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path
) -> None:
    """Fused with the encoder (its callback hands the node each embedding: `take_state`), the opd node
    takes the privileged states at the start of each decision, not in callbacks of their own (no executor
    wakes for them): a state published just before a frame is joined before it, as its /opd/gate says
    (`teacher_upto`, what `agent replay` feeds before the frame); while no frame comes the watchdog takes
    them."""
    from policies.artifact import Artifact

    cfg = opd_config(tmp_path)
    node, probe, executor, _ = start_opd(tiny_artifact, fused=True, drive="opd", opd_config=cfg)
    assert spin_until(executor, lambda: probe.matched(PRIVILEGED, by=node))
    assert "agent/state" not in {s.topic_name.lstrip("/") for s in node.subscriptions}
    sub = node.privileged_sub
    assert sub is not None and not sub.callback_group.can_execute(sub)
    fields = Artifact.load(tiny_artifact).model("predictor")["fields"]
    names, state = privileged_names(fields), np.zeros(len(fields), np.float32)
    frames = feed_opd(probe, executor, node, tiny_artifact, 4, teacher=False)
    first = stamp_to_sec(frames[0][0].header.stamp) - 0.05
    probe.publish(PRIVILEGED, privileged_to_msg(state, 0, 0, first, names))  # no frame follows it yet
    assert spin_until(executor, lambda: node.privileged.accepted == 1)
    for i, (emb, _, _) in enumerate(frames):
        stamp = stamp_to_sec(emb.header.stamp)
        probe.publish(PRIVILEGED, privileged_to_msg(state, 0, i + 1, stamp, names))
        node.take_state(emb)  # at once, as the encoder's callback does: no spin between the two
        assert spin_until(executor, lambda i=i: len(probe.received[GATE]) == i + 1)
        assert probe.received[GATE][i].teacher_upto == pytest.approx(stamp, abs=1e-6)
    assert node.privileged.accepted == len(frames) + 1 and node.stream.refusals == {}


def test_a_frame_stamped_ahead_is_dropped_without_blocking_the_frames_after_it(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path
) -> None:
    """One embedding stamped 0.5 s ahead is refused by the OPD buffer before its stamp is recorded: the
    frames after it are no "stamp went backwards", and each still gets its decision (it used to silence the
    student for up to a second, and the watchdog stopped the robot)."""
    from policies.artifact import Artifact

    node, probe, executor, codec = start_opd(tiny_artifact, drive="opd", opd_config=opd_config(tmp_path))
    assert spin_until(executor, lambda: probe.matched(STATE, by=node))
    art = Artifact.load(tiny_artifact)
    dim = art.manifest["config"]["student"]["encoder"]["embed_dim"]
    ahead = embedding_to_msg(np.zeros(dim, np.float32), time.time() + 0.5, "", art.encoder_hash, (0, 0.0, 0))
    probe.publish(STATE, ahead)
    assert spin_until(executor, lambda: node.state.dropped["refused"] == 1)
    frames = feed_opd(probe, executor, node, tiny_artifact, 5, teacher=False)
    for i, (emb, _, _) in enumerate(frames):
        probe.publish(STATE, emb)  # /agent/state keeps the newest only: one at a time
        assert spin_until(executor, lambda i=i: len(probe.received[GATE]) == i + 1)
    assert node.state.rejected == {} and node.stream.refusals == {"future": 1}
    assert [g.header.stamp for g in probe.received[GATE]] == [e.header.stamp for e, _, _ in frames]


def test_a_novelty_gate_without_learning_is_warned_about(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An artifact holds no novelty ensemble: without `learn` nothing trains one, and the user is told."""
    for switch, warned in (("novelty", True), ("predictor", False)):
        path = tmp_path / f"{switch}.yaml"
        path.write_text(yaml.safe_dump({"opd": {"switch": switch}}))
        start_opd(tiny_artifact, drive="opd", opd_config=str(path))
        assert ("the gate reads an untrained ensemble" in capfd.readouterr().err) == warned


def test_learning_online_publishes_student_versions(
    start_opd: Start, tiny_artifact: Path, tmp_path: Path
) -> None:
    """With `learn`, the learnt student is written as artifact versions (hashes, atomic), acts in ONNX from
    the next frame on, and is announced with the stamp of the first frame it decided."""
    from policies.artifact import Artifact

    cfg = opd_config(tmp_path)
    versions = str(tmp_path / "versions")
    node, probe, executor, _ = start_opd(tiny_artifact, drive="opd", opd_config=cfg, learn=True,
                                         version_every_s=0.2, versions_dir=versions)  # fmt: skip
    probe.record("/agent/student_version")
    art = Artifact.load(tiny_artifact)
    values = np.zeros(art.embed_dim, np.float32)
    stamps, deadline = [], time.monotonic() + 180.0  # the export runs at nice 10: on a busy machine it waits
    while not probe.received["/agent/student_version"] and time.monotonic() < deadline:
        stamps.append(time.time())  # frames at ~10 Hz: a version is announced once one has decided
        skill_state = (0, 0.0, len(stamps))
        probe.publish(STATE, embedding_to_msg(values, stamps[-1], "", art.encoder_hash, skill_state))
        spin_until(executor, lambda: False, timeout_s=0.1)
    assert probe.received["/agent/student_version"]
    note = json.loads(probe.received["/agent/student_version"][-1].data)
    version = Artifact.load(note["path"])  # every hash verified
    assert note["number"] >= 1 and version.manifest["version"]["number"] == note["number"]
    assert min(abs(note["stamp"] - t) for t in stamps) < 1e-6  # a frame's stamp, to the ns of its message
    assert node.learner.acting_version >= note["number"]
    assert Path(note["path"]).parent == tmp_path / "versions"
    assert version.sha256("encoder.onnx") == Artifact.load(tiny_artifact).sha256("encoder.onnx")


def test_a_learning_node_destroyed_without_shutdown_stops_its_learner_process(
    ros_context: Context, tiny_artifact: Path, tmp_path: Path
) -> None:
    """A caller that destroys an active node (no lifecycle shutdown first, e.g. its context already gone)
    leaves no learner process behind, nor a thread announcing versions on destroyed publishers."""
    import os

    values = {"artifact_dir": str(tiny_artifact), "autostart": False, "drive": "opd", "learn": True,
              "opd_config": opd_config(tmp_path), "versions_dir": str(tmp_path / "versions")}  # fmt: skip
    overrides = [Parameter(name, value=value) for name, value in values.items()]
    node = OpdNode(context=ros_context, parameter_overrides=overrides)
    node.trigger_configure()
    node.trigger_activate()
    assert node.lifecycle_state == "active", node.fault
    process = node.learner_process
    pid = process.pid
    assert pid is not None and os.waitpid(pid, os.WNOHANG) == (0, 0)  # the child runs
    node.destroy_node()
    assert process.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: gone

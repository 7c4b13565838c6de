"""Teacher node over real DDS: actions stamped with their state, held for action_repeat, bad input counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from agent.executors import MultiThreadedExecutor, stop_executor
from agent.messages import ActionCodec, privileged_names, privileged_to_msg, stamp_to_sec
from agent.nodes.teacher import TeacherNode
from rclpy.context import Context
from rclpy.parameter import Parameter
from ros_harness import Probe, spin_for, spin_until

from policies.teacher_policy import load_teacher, teacher_features

ERROR = b"\x02"
STATE, ACTION = "/sim/privileged_state", "/teacher/action"
Rig = tuple[TeacherNode, Probe, MultiThreadedExecutor]


def start_teacher(ctx: Context, checkpoint: Path) -> Rig:
    params = [
        Parameter("checkpoint", value=str(checkpoint)),
        Parameter("input_timeout_s", value=0.3),
        Parameter("autostart", value=True),
    ]
    node = TeacherNode(context=ctx, parameter_overrides=params)
    probe = Probe(ctx)
    probe.record(ACTION, "/diagnostics")
    executor = MultiThreadedExecutor(context=ctx)
    executor.add_node(node)
    executor.add_node(probe.node)
    return node, probe, executor


@pytest.fixture
def teacher(ros_context: Context, tiny_teacher: Path) -> Iterator[Rig]:
    node, probe, executor = start_teacher(ros_context, tiny_teacher)
    assert spin_until(executor, lambda: node.lifecycle_state == "active", timeout_s=30.0), node.fault
    probe.advertise(STATE)
    assert spin_until(executor, lambda: probe.matched(STATE, by=node))
    yield node, probe, executor
    stop_executor(executor)
    node.destroy_node()
    probe.node.destroy_node()


def states(node: TeacherNode, n: int, t0: float, seed: int = 0) -> list[tuple[float, int, int, np.ndarray]]:
    """n consecutive (stamp, skill, step, privileged (Dq,)) of a made-up episode, 50 ms apart."""
    rng = np.random.default_rng(seed)
    k = node.contract.num_skills
    return [(t0 + 0.05 * i, i % k, i, rng.normal(size=node.state_dim).astype(np.float32)) for i in range(n)]


def send(probe: Probe, node: TeacherNode, stamp: float, skill: int, step: float, x: np.ndarray) -> None:
    probe.publish(STATE, privileged_to_msg(x, skill, step, stamp, node.names))


def test_actions_are_the_teachers_stamped_with_their_state_and_held_for_action_repeat(
    teacher: Rig, tiny_teacher: Path
) -> None:
    node, probe, executor = teacher
    codec, reference = ActionCodec(node.contract), load_teacher(tiny_teacher)
    assert node.repeat == 2
    episode = states(node, 6, time.time() - 0.5)  # stamped by now: none ahead of the node's clock
    for s in episode:
        send(probe, node, *s)
    assert spin_until(executor, lambda: len(probe.received[ACTION]) == len(episode), timeout_s=10.0)
    for msg, (stamp, _, step, _) in zip(probe.received[ACTION], episode, strict=True):
        assert stamp_to_sec(msg.header.stamp) == pytest.approx(stamp, abs=1e-6)  # the state's stamp
        got_skill, got_params = codec.from_msg(msg)  # raises unless within the contract bounds
        decided = episode[step - step % node.repeat]  # the decision in force at this step
        want_skill, want_params = reference.act(teacher_features(decided[3][None], np.array([decided[1]]),
                                                                 node.contract.num_skills))  # fmt: skip
        assert got_skill == int(want_skill[0])
        np.testing.assert_allclose(got_params, want_params[0], atol=1e-6)


def test_bad_states_are_counted_and_rejected_and_staleness_is_an_error(teacher: Rig) -> None:
    node, probe, executor = teacher
    t = time.time()
    x = np.zeros(node.state_dim, dtype=np.float32)
    send(probe, node, t, 0, 0, x)
    assert spin_until(executor, lambda: len(probe.received[ACTION]) == 1)
    k = node.contract.num_skills
    wrong_names = privileged_to_msg(
        x, 0, 1, t + 0.01, privileged_names([f"f{i}" for i in range(node.state_dim)])
    )
    short = privileged_to_msg(x, 0, 1, t + 0.02, node.names)
    short.position = short.position[:-1]
    bad = {
        "layout": wrong_names,
        "size": short,
        "nonfinite": privileged_to_msg(np.full_like(x, np.nan), 0, 1, t + 0.03, node.names),
        "skill": privileged_to_msg(x, k, 1, t + 0.04, node.names),
        "range": privileged_to_msg(x, 0, 1.5, t + 0.05, node.names),
        "stamp": privileged_to_msg(x, 0, 1, t - 0.1, node.names),  # backwards
    }
    for msg in bad.values():
        probe.publish(STATE, msg)
    assert spin_until(executor, lambda: sum(node.state_in.rejected.values()) == len(bad), timeout_s=10.0)
    assert node.state_in.rejected == dict.fromkeys(bad, 1)
    assert len(probe.received[ACTION]) == 1  # nothing answered a bad state
    # ahead of the node's clock: refused before its stamp is recorded (it used to be acted on, and to make
    # every good state after it look like a clock going back)
    probe.publish(STATE, privileged_to_msg(x, 0, 1, t + 5.0, node.names))
    assert spin_until(executor, lambda: node.state_in.rejected["stamp"] == 2, timeout_s=10.0)
    assert len(probe.received[ACTION]) == 1
    send(probe, node, t + 0.1, 0, 1, x)
    assert spin_until(executor, lambda: len(probe.received[ACTION]) == 2)  # still running

    # No state for input_timeout_s (0.3 s): the teacher says so on /diagnostics.
    spin_for(executor, 0.4)
    probe.received["/diagnostics"].clear()
    entry = "teacher: privileged_state"
    assert spin_until(executor, lambda: entry in probe.diagnostics("teacher: "), timeout_s=5.0)
    assert probe.diagnostics("teacher: ")[entry].level == ERROR


def test_a_missing_checkpoint_fails_configure_and_says_how_to_get_one(
    ros_context: Context, tmp_path: Path
) -> None:
    node, probe, executor = start_teacher(ros_context, tmp_path / "none.pt")
    try:
        assert spin_until(executor, lambda: bool(node.fault), timeout_s=10.0)
        assert node.lifecycle_state == "unconfigured"
        assert f"no teacher checkpoint at {tmp_path / 'none.pt'}" in node.fault
        assert "agent train teacher" in node.fault
        assert spin_until(executor, lambda: "teacher: node" in probe.diagnostics("teacher: "), timeout_s=5.0)
        assert probe.diagnostics("teacher: ")["teacher: node"].level == ERROR
    finally:
        stop_executor(executor)
        node.destroy_node()
        probe.node.destroy_node()


def test_without_a_checkpoint_the_node_runs_the_teacher_its_student_learnt_from(tmp_path: Path) -> None:
    """As the opd node's learner does (opd.live.loading.default_teacher): both act on one teacher."""
    import json
    import shutil

    from agent.nodes.teacher import DEFAULT_TEACHER, default_checkpoint

    from opd.live.loading import teacher_record
    from policies.artifact import ARTIFACT_FORMAT, MANIFEST

    teacher = tmp_path / "teacher.pt"
    shutil.copy(DEFAULT_TEACHER, teacher)
    manifest = {"format": ARTIFACT_FORMAT, "files": {}, "models": {}, "skill_contract": {}, "config": {}}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert default_checkpoint("") == DEFAULT_TEACHER
    assert default_checkpoint(str(tmp_path)) == DEFAULT_TEACHER  # an artifact without a record
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "teacher": teacher_record(teacher)}))
    assert default_checkpoint(str(tmp_path)) == teacher

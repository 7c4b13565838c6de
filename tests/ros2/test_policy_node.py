"""Policy node over real DDS: commands within the contract, safe action on stale inputs, bad input."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import numpy as np
import pytest
from agent.executors import MultiThreadedExecutor, stop_executor
from agent.messages import ActionCodec, embedding_to_msg, sec_to_stamp, stamp_to_sec
from agent.nodes.policy import PolicyNode
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidProtobuf
from rclpy.context import Context
from rclpy.parameter import Parameter
from ros_harness import (
    FAKE_ENCODER,
    FakeRuntime,
    Probe,
    record_sent,
    spin_for,
    spin_until,
    tick_while_an_action_executes,
)
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String

from policies.artifact import ArtifactError
from policies.skill_contract import SkillContract

ERROR = b"\x02"
EMBED_DIM = 16  # FakeRuntime.embed_dim


Rig = tuple[PolicyNode, Probe, MultiThreadedExecutor]
PolicyRig = tuple[PolicyNode, Probe, MultiThreadedExecutor, ActionCodec]


def delivered(probe: Probe, node: PolicyNode) -> bool:
    return len(probe.received["/agent/action"]) >= len(node.sent)


def start_policy(ctx: Context, loader: Callable[..., FakeRuntime], *extra: Parameter) -> Rig:
    params = [
        Parameter("artifact_dir", value="fake"),
        Parameter("input_timeout_s", value=0.3),
        Parameter("autostart", value=True),
        *extra,
    ]
    node = PolicyNode(runtime_loader=loader, context=ctx, parameter_overrides=params)
    record_sent(node)
    probe = Probe(ctx)
    probe.record("/agent/action", "/cmd_vel", "/diagnostics")
    executor = MultiThreadedExecutor(context=ctx)
    executor.add_node(node)
    executor.add_node(probe.node)
    assert spin_until(executor, lambda: node.lifecycle_state == "active"), node.fault
    probe.advertise("/agent/state")
    connected = lambda: probe.matched("/agent/state", by=node) and probe.hears("/agent/action")  # noqa: E731
    assert spin_until(executor, connected)
    return node, probe, executor


@pytest.fixture
def policy(
    ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract: SkillContract
) -> Iterator[PolicyRig]:
    # The model proposes `drive` far outside the bounds: every command must still be within them.
    fake_loader.runtime.skill = contract.skill_id("drive")
    fake_loader.runtime.params = np.array([5.0, -9.0, 0.0, 1.5], dtype=np.float32)
    node, probe, executor = start_policy(ros_context, fake_loader)
    yield node, probe, executor, ActionCodec(contract)
    stop_executor(executor)
    node.destroy_node()
    probe.node.destroy_node()


def state(values: np.ndarray, stamp: float, encoder: str = FAKE_ENCODER):
    return embedding_to_msg(values, stamp, "camera", encoder, (0, 0.0, 0))


def send_state(probe: Probe, stamp: float, value: float = 0.5) -> None:
    probe.publish("/agent/state", state(np.full(EMBED_DIM, value), stamp))


def act_until(executor: MultiThreadedExecutor, probe: Probe, condition: Callable[[], bool]) -> bool:
    """Send a fresh state every 0.25 s until `condition()` holds (5 s at most): on a busy host a first
    message can be lost while the probe and the node are still discovering each other."""
    for _ in range(20):
        send_state(probe, time.time())
        if spin_until(executor, condition, timeout_s=0.25):
            return True
    return condition()


def assert_within_contract(probe: Probe, codec: ActionCodec) -> None:
    """Every action decodes under the contract (ActionCodec checks the bounds)."""
    assert probe.received["/agent/action"]
    for msg in probe.received["/agent/action"]:
        codec.from_msg(msg)


def skills(probe: Probe, codec: ActionCodec) -> list[int]:
    return [codec.from_msg(m)[0] for m in probe.received["/agent/action"]]


def test_stale_inputs_give_the_safe_action_and_an_error_then_acting_resumes(policy: PolicyRig) -> None:
    node, probe, executor, codec = policy
    drive, stop = codec.contract.skill_id("drive"), codec.contract.safe_skill_id
    spin_for(executor, 0.3)
    assert set(skills(probe, codec)) == {stop}  # no state yet: held at the safe action
    for _ in range(6):
        send_state(probe, time.time())
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: drive in skills(probe, codec))
    acted = [m for m in probe.received["/agent/action"] if codec.from_msg(m)[0] == drive]
    _, params = codec.from_msg(acted[-1])
    layout = codec.contract.layout
    assert params[0] == layout.high[0] and params[1] == layout.low[1]  # clipped to the bounds
    assert node.clipped >= 1

    # Inputs stop: after the last action, a decisive stop, then a 1 Hz keep-alive, not a 20 Hz flood.
    last_drive = lambda: max(i for i, (s, _) in enumerate(node.sent) if s == drive)  # noqa: E731
    stops = lambda: [t for s, t in node.sent[last_drive() + 1 :] if s == stop]  # noqa: E731
    assert spin_until(executor, lambda: len(stops()) >= 2)
    i = last_drive()
    assert {s for s, _ in node.sent[i + 1 :]} == {stop}
    assert stops()[0] - node.sent[i][1] >= node.input_timeout_s - 0.01
    assert np.diff(stops()).min() >= 1.0 - 0.01  # safe_keepalive_hz: 1
    assert spin_until(executor, lambda: delivered(probe, node)) and skills(probe, codec)[-1] == stop
    probe.received["/diagnostics"].clear()
    assert spin_until(executor, lambda: "policy: state" in probe.diagnostics("policy: "))
    diag = probe.diagnostics("policy: ")
    assert diag["policy: state"].level == ERROR and diag["policy: node"].level == ERROR
    assert "safe action" in diag["policy: state"].message

    n = len(probe.received["/agent/action"])
    for _ in range(4):
        send_state(probe, time.time())
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: drive in skills(probe, codec)[n:])  # resumed
    assert_within_contract(probe, codec)


@pytest.mark.parametrize("unusable", ["nonfinite", "model_refuses"])
def test_unusable_embeddings_do_not_keep_the_watchdog_quiet(policy: PolicyRig, unusable: str) -> None:
    """Review defect: embeddings finite as float64 but not as float32 were counted fresh before the model
    refused them, so 40 of them over 2 s sent no safe action. Only an embedding the model used is fresh
    (float32 messages now carry the overflow as Inf)."""
    node, probe, executor, codec = policy
    drive, stop = codec.contract.skill_id("drive"), codec.contract.safe_skill_id
    assert act_until(executor, probe, lambda: drive in skills(probe, codec))
    value = np.inf
    if unusable == "model_refuses":
        value = 0.5

        def refuse(embedding: np.ndarray) -> tuple:
            raise ValueError("embedding: refused by the model")

        node.runtime.act = refuse
    reason = "nonfinite" if unusable == "nonfinite" else "model_input"
    # Each counted before the next is sent (depth 1 drops some on a busy host): refused, or handled over
    # input_timeout_s after it was stamped and dropped as late (the model never saw those either).
    counted = lambda: node.state_in.rejected[reason] + node.state_in.dropped["late"]  # noqa: E731
    start, first = time.monotonic(), time.time()  # every state stamped from `first` on is unusable
    for _ in range(40):  # 20 Hz for 2 s
        before = counted()
        send_state(probe, time.time(), value)
        assert spin_until(executor, lambda b=before: counted() > b)
        spin_for(executor, 0.05)
    assert time.monotonic() - start >= 2.0
    # an action carries its state's stamp: none came from an unusable one, and the safe action went out
    assert {s for s, t in node.sent if t >= first} == {stop}
    assert spin_until(executor, lambda: delivered(probe, node)) and skills(probe, codec)[-1] == stop
    assert node.state_in.rejected[reason] >= 20
    assert node.fallback.stopped
    assert spin_until(
        executor,
        lambda: (
            probe.diagnostics("policy: ").get("policy: state") is not None
            and probe.diagnostics("policy: ")["policy: state"].level == ERROR
        ),
    )


def test_the_policy_proposes_and_never_commands_the_base(policy: PolicyRig) -> None:
    """The opd node alone publishes /cmd_vel, from the executed action; the policy's action is a proposal."""
    node, probe, executor, codec = policy
    for _ in range(4):
        send_state(probe, time.time())
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: codec.contract.skill_id("drive") in skills(probe, codec))
    # Queried by topic: a node-name query can answer for a same-named node of an earlier test.
    publishers = lambda topic: {i.node_name for i in node.get_publishers_info_by_topic(topic)}  # noqa: E731
    assert spin_until(executor, lambda: "policy" in publishers("/agent/action"))
    assert "policy" not in publishers("/cmd_vel") and probe.received["/cmd_vel"] == []


def test_malformed_state_is_counted_and_rejected(policy: PolicyRig) -> None:
    node, probe, executor, codec = policy
    t = time.time()
    send_state(probe, t)
    spin_for(executor, 0.1)
    bad = [
        state(np.zeros(EMBED_DIM + 1), t + 0.01),  # size
        state(np.full(EMBED_DIM, np.nan), t + 0.02),  # NaN
        state(np.zeros(EMBED_DIM), t + 0.03, encoder="0" * 64),  # another encoder's
        state(np.zeros(EMBED_DIM), 0.0),  # zero stamp
        state(np.zeros(EMBED_DIM), t - 0.1),  # backwards
        state(np.zeros(EMBED_DIM), t - 5.0),  # far too old to act on
        state(np.zeros(EMBED_DIM), t + 30.0),  # from the future: recorded, it made the next ones "backwards"
    ]
    seen = lambda: sum(node.state_in.rejected.values()) + sum(node.state_in.dropped.values())  # noqa: E731
    for msg in bad:  # one at a time: the state topic keeps only the latest message (depth 1)
        before = seen()
        for _ in range(3):  # resent only if not handled in 2 s: a first message can be lost in discovery
            probe.publish("/agent/state", msg)
            if spin_until(executor, lambda b=before: seen() > b, timeout_s=2.0):
                break
        assert seen() > before
    assert node.state_in.rejected == {"size": 1, "nonfinite": 1, "encoder": 1, "stamp": 3}
    assert node.state_in.last_stamp == pytest.approx(t, abs=1e-3)  # the future stamp was never recorded
    assert node.state_in.dropped["late"] == 1
    n = len(probe.received["/agent/action"])
    send_state(probe, time.time())
    drive = codec.contract.skill_id("drive")
    assert spin_until(executor, lambda: drive in skills(probe, codec)[n:])  # still acting
    assert_within_contract(probe, codec)


def test_deactivate_leaves_the_robot_on_the_safe_action(policy: PolicyRig) -> None:
    node, probe, executor, codec = policy
    assert act_until(executor, probe, lambda: codec.contract.skill_id("drive") in skills(probe, codec))
    node.trigger_deactivate()
    assert node.sent[-1][0] == codec.contract.safe_skill_id
    assert spin_until(executor, lambda: delivered(probe, node))
    assert skills(probe, codec)[-1] == codec.contract.safe_skill_id
    n, sent = len(probe.received["/agent/action"]), len(node.sent)
    send_state(probe, time.time())
    spin_for(executor, 0.3)
    assert len(node.sent) == sent and len(probe.received["/agent/action"]) == n  # inactive: silent


def test_an_action_computed_while_deactivating_is_not_sent(policy: PolicyRig) -> None:
    """A multi-threaded executor runs the deactivate transition beside a state callback: once deactivate
    has sent the safe action (and waits for it to be acknowledged), a callback that finishes then must not
    send its model action after it."""
    node, probe, executor, codec = policy
    assert act_until(executor, probe, lambda: codec.contract.skill_id("drive") in skills(probe, codec))
    sent: list[int] = []  # skills the node sends from here on, in order
    node.publish = lambda skill, params, stamp, source="student": sent.append(skill)
    node.deactivate()  # the transition's first step: safe action out, publishers still active
    node.on_state(state(np.full(EMBED_DIM, 0.5, dtype=np.float32), time.time()))
    assert sent == [codec.contract.safe_skill_id]


def test_an_action_executed_while_the_watchdog_waits_is_not_followed_by_a_stop(policy: PolicyRig) -> None:
    """The watchdog judges silence when it holds the lock: it read the time before, so on a loaded host an
    action executed while it waited looked like a clock gone back, and a stop followed that action."""
    node, probe, executor, codec = policy
    assert spin_until(executor, lambda: node.fallback.stopped)  # no state yet: held at the safe action
    sent = len(node.sent)
    tick_while_an_action_executes(node)
    assert len(node.sent) == sent and not node.fallback.stopped


def test_staleness_follows_sim_time(
    ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract: SkillContract
) -> None:
    """With use_sim_time the watchdog runs on /clock: sim time standing still is not staleness."""
    node, probe, executor = start_policy(ros_context, fake_loader, Parameter("use_sim_time", value=True))
    codec = ActionCodec(contract)
    stop = contract.safe_skill_id

    def clock(t: float) -> None:
        probe.publish("/clock", Clock(clock=sec_to_stamp(t)))

    probe.advertise("/clock")
    assert spin_until(executor, lambda: probe.matched("/clock"))
    clock(100.0)
    assert spin_until(executor, lambda: abs(node.now_s() - 100.0) < 1e-6)
    spin_for(executor, 0.1)
    drive = contract.skill_id("drive")
    send_state(probe, 100.0)
    # A safe action from a tick before the state arrived may still be in flight: wait for the first drive.
    assert spin_until(executor, lambda: drive in skills(probe, codec))
    n = skills(probe, codec).index(drive)
    acted = probe.received["/agent/action"][n]
    assert stamp_to_sec(acted.header.stamp) == 100.0
    spin_for(executor, 0.5)  # wall time passes, sim time does not: no safe action
    assert stop not in skills(probe, codec)[n:]
    clock(100.5)  # 0.5 s of sim time > input_timeout_s
    for t in np.arange(100.55, 100.8, 0.05):
        clock(float(t))
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: stop in skills(probe, codec)[n:])
    safe = [m for m in probe.received["/agent/action"][n:] if codec.from_msg(m)[0] == stop]
    assert 100.3 < stamp_to_sec(safe[0].header.stamp) < 101.0  # stamped in sim time
    stop_executor(executor)
    node.destroy_node()
    probe.node.destroy_node()


def test_new_student_versions_are_swapped_in_and_bad_ones_refused(
    ros_context: Context, contract: SkillContract
) -> None:
    """The opd node announces versions learnt online; the policy verifies each and swaps between two
    actions. A corrupt version, or one that does not fit (another encoder: it reads other embeddings), is
    refused, as is one ONNX Runtime cannot load: the old one acts."""
    drive, turn = contract.skill_id("drive"), contract.skill_id("turn_in_place")
    deployed, learnt = FakeRuntime(contract, skill=drive), FakeRuntime(contract, skill=turn)
    narrow = FakeRuntime(contract, skill=turn)
    narrow.artifact = SimpleNamespace(encoder_hash="0" * 64)

    def load(path: str, backend: str = "onnxruntime", **options: object) -> FakeRuntime:
        if path == "corrupt":
            raise ArtifactError(f"{path}/policy.onnx: SHA-256 does not match the manifest's")
        if path == "garbled":  # hashes fine, the graph not: ONNX Runtime's errors subclass only Exception
            raise InvalidProtobuf(f"Load model from {path}/policy.onnx failed: Protobuf parsing failed.")
        return {"fake": deployed, "v3": learnt, "narrow": narrow}[path]

    node, probe, executor = start_policy(ros_context, load)
    codec = ActionCodec(contract)
    probe.advertise("/agent/student_version")
    assert spin_until(executor, lambda: probe.matched("/agent/student_version"))

    def announce(data: str) -> None:
        before = node.versions.handled
        probe.publish("/agent/student_version", String(data=data))
        assert spin_until(executor, lambda: node.versions.handled > before, timeout_s=5.0)

    def acts_with() -> int:
        n = len(probe.received["/agent/action"])
        send_state(probe, time.time())
        # the first model action after n: the watchdog's safe action may follow it before the check
        acted = lambda: [s for s in skills(probe, codec)[n:] if s != contract.safe_skill_id]  # noqa: E731
        assert spin_until(executor, lambda: bool(acted()))
        return acted()[0]

    assert acts_with() == drive
    announce('{"number": 1, "path": "corrupt"}')
    announce('{"number": 2, "path": "narrow"}')
    announce("not json")
    announce('{"number": Infinity, "path": "v3"}')  # JSON as Python reads it; int() of it overflows
    announce('{"number": 4, "path": "garbled"}')
    assert node.versions.rejected == {"refused": 3, "format": 2} and node.version == 0
    assert acts_with() == drive  # the deployed student still acts
    announce('{"number": 3, "path": "v3"}')
    assert node.version == 3 and acts_with() == turn  # swapped between two actions
    announce('{"number": 2, "path": "v3"}')
    assert node.versions.dropped["old"] == 1 and node.version == 3
    stop_executor(executor)
    node.destroy_node()
    probe.node.destroy_node()


class RememberingRuntime(FakeRuntime):
    """A head with memory of two frames: turn_in_place when the window holds a frame before the newest,
    drive when it holds the newest alone."""

    memory = 2

    def act_window(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        frames = np.asarray(frames, dtype=np.float32)
        assert frames.shape[1:] == (2, self.embed_dim)
        held = frames[:, 0].any(axis=1)
        skill = np.where(held, self.contract.skill_id("turn_in_place"), self.contract.skill_id("drive"))
        params = np.tile(self.contract.layout.defaults, (len(frames), 1))
        return np.zeros((len(frames), self.contract.num_skills), np.float32), skill, params


def test_the_head_acts_on_its_window_which_a_new_episode_or_a_gap_empties(
    ros_context: Context, contract: SkillContract
) -> None:
    """On sim time, so that the gaps are the test's: a loaded host's pauses between sends are none."""
    runtime = RememberingRuntime(contract)
    sim_time = Parameter("use_sim_time", value=True)
    node, probe, executor = start_policy(ros_context, lambda *a, **k: runtime, sim_time)
    codec = ActionCodec(contract)
    drive, turn = contract.skill_id("drive"), contract.skill_id("turn_in_place")
    probe.advertise("/clock")
    try:
        assert spin_until(executor, lambda: probe.matched("/clock"))
        t = [100.0]

        def send(step: int, after_s: float = 0.05) -> list[int]:
            """A state `after_s` after the last one (the clock moves there first), with its actions."""
            t[0] += after_s
            probe.publish("/clock", Clock(clock=sec_to_stamp(t[0])))
            assert spin_until(executor, lambda: abs(node.now_s() - t[0]) < 1e-6)
            n = len(probe.received["/agent/action"])
            msg = embedding_to_msg(np.full(EMBED_DIM, 0.5), t[0], "camera", FAKE_ENCODER, (0, 0.0, step))
            probe.publish("/agent/state", msg)
            acted = lambda: any(s != contract.safe_skill_id for s in skills(probe, codec)[n:])  # noqa: E731
            assert spin_until(executor, acted)
            return [s for s in skills(probe, codec)[n:] if s != contract.safe_skill_id]

        assert send(0) == [drive]  # the episode's first frame: nothing before it
        assert send(1) == [turn] and send(2) == [turn]
        assert send(0) == [drive]  # the step went back: a new episode
        assert send(1) == [turn]
        gap = node.input_timeout_s + 0.1  # longer than input_timeout_s: the frames before are no history
        assert send(2, after_s=gap) == [drive]
    finally:
        stop_executor(executor)
        node.destroy_node()
        probe.node.destroy_node()

"""Sim bridge over real DDS on the MuJoCo default: honest stamps out, commands in, bad and stale commands."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from agent.executors import MultiThreadedExecutor, stop_executor
from agent.messages import ActionCodec, privileged_names, stamp_to_sec
from agent.nodes.sim_bridge import SimBridgeNode
from rclpy.context import Context
from rclpy.parameter import Parameter
from ros_harness import Probe, spin_for, spin_until

ERROR = b"\x02"
CAMERA, IMU, ODOM, CLOCK = "/camera/image_raw", "/imu/data", "/odom", "/clock"
SKILL, PRIVILEGED, COMMAND = "/agent/active_skill", "/sim/privileged_state", "/opd/action"
OUTPUTS = (CLOCK, SKILL, PRIVILEGED, ODOM, IMU, CAMERA)
Rig = tuple[SimBridgeNode, Probe, MultiThreadedExecutor]


@pytest.fixture
def bridge(ros_context: Context, request: pytest.FixtureRequest) -> Iterator[Rig]:
    """An active sim bridge following /opd/action; the probe plays the opd node, executing the student's
    action (drive student: each command answers a camera image), or another `drive` given indirectly."""
    params = [
        Parameter("autostart", value=True),
        Parameter("drive", value=getattr(request, "param", "student")),
        Parameter("command_deadline_s", value=0.2),  # generous: the test answers from Python on a busy CPU
        Parameter("command_timeout_s", value=0.4),
        Parameter("camera_width", value=64),  # a wide frame, as a wide-camera student's artifact asks
        Parameter("camera_height", value=32),
    ]
    node = SimBridgeNode(context=ros_context, parameter_overrides=params)
    probe = Probe(ros_context)
    probe.record(*OUTPUTS, "/diagnostics")
    probe.advertise(COMMAND)
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(probe.node)
    assert spin_until(executor, lambda: node.lifecycle_state == "active", timeout_s=60.0), node.fault
    yield node, probe, executor
    stop_executor(executor)
    node.finalize()
    node.destroy_node()
    probe.node.destroy_node()


def answer_images(node: SimBridgeNode, probe: Probe, executor: MultiThreadedExecutor, n: int,
                  skill: int, params: np.ndarray, inputs: str = CAMERA) -> None:  # fmt: skip
    """Answer the next `n` camera frames (or other `inputs`), each with a command stamped with its stamp."""
    codec = ActionCodec(node.robot_spec.contract)
    done = len(probe.received[inputs])
    target = done + n
    while done < target:
        assert spin_until(executor, lambda d=done: len(probe.received[inputs]) > d, timeout_s=10.0)
        for msg in probe.received[inputs][done:]:
            probe.publish(COMMAND, codec.to_msg(skill, params, stamp_to_sec(msg.header.stamp), "student"))
        done = len(probe.received[inputs])


def stamps(probe: Probe, topic: str) -> np.ndarray:
    key = (lambda m: m.clock) if topic == CLOCK else (lambda m: m.header.stamp)
    return np.array([stamp_to_sec(key(m)) for m in probe.received[topic]])


def test_outputs_carry_honest_stamps_and_commands_drive_the_robot_within_the_contract(bridge: Rig) -> None:
    node, probe, executor = bridge
    contract = node.robot_spec.contract
    drive = contract.skill_id("drive")
    too_fast = contract.layout.defaults.copy()
    too_fast[0] = contract.layout.high[0] + 1.0  # drive.speed beyond its bound: the robot clips it
    answer_images(node, probe, executor, 20, drive, too_fast)
    assert spin_until(executor, lambda: node.loop.stats().cycles >= 20, timeout_s=10.0)
    seen = lambda: node.commands.accepted + sum(node.commands.dropped.values())  # noqa: E731
    assert spin_until(executor, lambda: seen() >= 20, timeout_s=10.0)  # every answer arrived
    received_at = time.time()

    clock, images, imu = stamps(probe, CLOCK), stamps(probe, CAMERA), stamps(probe, IMU)
    spec = node.robot_spec

    def on_grid(t: np.ndarray, rate_hz: float) -> bool:
        """Stamps lie on the sensor's tick grid of the one time base (start wall time + simulated time)."""
        k = (t - clock[0]) * rate_hz
        return bool(np.allclose(k, np.round(k), atol=1e-3))

    # Nothing is stamped in the future, and the time base is the wall clock's (real time).
    assert np.all(np.diff(clock) > 0) and clock[-1] <= received_at
    # (the sim's time lags the wall clock by the periods it waited for a command past the answered ones:
    # each waits command_deadline_s, 4 periods, and a busy CI host spins slowly; 22 s was seen)
    assert 0.0 < received_at - images[-1] < 120.0
    assert on_grid(clock, spec.control_hz) and on_grid(images, spec.camera_hz)
    assert on_grid(stamps(probe, ODOM), spec.control_hz) and on_grid(
        stamps(probe, PRIVILEGED), spec.control_hz
    )
    # The IMU is best effort: consecutive samples that did arrive are one IMU period apart.
    assert on_grid(imu, spec.imu_hz) and np.all(np.diff(imu) > 0) and imu[-1] <= received_at
    assert np.diff(imu).min() == pytest.approx(1 / spec.imu_hz, abs=1e-6)
    assert list(probe.received[PRIVILEGED][-1].name) == privileged_names(spec.privileged_fields)
    frame = probe.received[CAMERA][-1]
    assert (frame.height, frame.width, len(frame.data)) == (32, 64, 32 * 64 * 3)  # rendered at that size

    stats = node.loop.stats()
    # Answers were matched to their frames. Not all 20: on a loaded CPU the first cycles of a fresh loop can
    # overrun, and an answer that misses its deadline counts as a missed cycle instead (bench graph measures).
    assert stats.commands >= 10 and stats.latency_s
    assert sum(stats.clipped.values()) > 0  # out of bounds: clipped by the robot
    assert max(m.twist.twist.linear.x for m in probe.received[ODOM]) > 0.05  # applied: the base drives
    assert node.commands.accepted >= 10 and not node.commands.rejected

    node.halt()  # what the in-process bringup does first when it stops: the robot before the controllers
    parked, cycles = node.parked, node.loop.stats().cycles
    assert parked is not None and int(parked.skill[0]) == contract.safe_skill_id
    spin_for(executor, 0.3)
    assert node.loop.stats().cycles == cycles  # parked: no period runs while the rest of the graph stops
    node.trigger_deactivate()
    assert node.parked is parked  # deactivate found it parked and left it so


@pytest.mark.parametrize("bridge", ["teacher"], indirect=True)
def test_with_the_teacher_driving_the_robot_follows_opd_action_answering_the_privileged_state(
    bridge: Rig,
) -> None:
    """`drive` changes what a command answers, not what the robot follows: always the executed action."""
    node, probe, executor = bridge
    assert node.command_sub.topic_name == COMMAND and node.loop.cfg.answer_stamp == "state"
    contract = node.robot_spec.contract
    answer_images(node, probe, executor, 20, contract.skill_id("drive"), contract.layout.defaults, PRIVILEGED)
    assert spin_until(executor, lambda: node.commands.accepted >= 20, timeout_s=10.0)
    assert node.loop.stats().latency_s  # answers matched to the privileged states they answer


def test_malformed_commands_are_counted_and_rejected(bridge: Rig) -> None:
    node, probe, executor = bridge
    contract = node.robot_spec.contract
    codec = ActionCodec(contract)
    assert spin_until(executor, lambda: len(probe.received[CAMERA]) > 0, timeout_s=10.0)
    t = stamp_to_sec(probe.received[CAMERA][-1].header.stamp)
    defaults = contract.layout.defaults
    nan = codec.to_msg(0, defaults, t, "student")
    nan.params[1] = float("nan")
    other = codec.to_msg(0, defaults, t, "student")
    other.contract = "0" * 16  # written in another contract
    no_skill = codec.to_msg(0, defaults, t, "student")
    no_skill.skill = contract.num_skills
    bad = {
        "nonfinite": nan,
        "contract": other,
        "skill": no_skill,
        "stamp": codec.to_msg(0, defaults, 0.0, "student"),
    }
    before = node.loop.stats().commands
    for msg in bad.values():
        probe.publish(COMMAND, msg)
    assert spin_until(executor, lambda: sum(node.commands.rejected.values()) == len(bad), timeout_s=10.0)
    assert node.commands.rejected == dict.fromkeys(bad, 1)
    assert node.loop.stats().commands == before  # none reached the robot
    assert node.loop.error is None and node.loop.running


def test_without_commands_the_robot_brakes_and_reports_an_error_then_resumes(bridge: Rig) -> None:
    node, probe, executor = bridge
    contract = node.robot_spec.contract
    drive, cruise = contract.skill_id("drive"), contract.layout.defaults  # 0.3 m/s straight on

    def speed() -> float:
        return probe.received[ODOM][-1].twist.twist.linear.x if probe.received[ODOM] else 0.0

    def drive_until_moving() -> bool:
        for _ in range(100):  # frames
            answer_images(node, probe, executor, 1, drive, cruise)
            if speed() > 0.1:
                return True
        return False

    assert drive_until_moving()
    # The controller goes quiet: after command_timeout_s (0.4 s) the robot steps on the safe action (stop).
    quiet = lambda: node.loop.stats().safe_steps >= 3 and speed() < 0.02  # noqa: E731
    assert spin_until(executor, quiet, timeout_s=10.0), (node.loop.stats().safe_steps, speed())
    probe.received["/diagnostics"].clear()
    entry = "sim_bridge: robot"
    assert spin_until(executor, lambda: entry in probe.diagnostics("sim_bridge: "), timeout_s=5.0)
    robot = probe.diagnostics("sim_bridge: ")[entry]
    assert robot.level == ERROR and "safe action" in robot.message
    assert drive_until_moving()  # commands are back: the robot follows them again


def test_a_controller_repeating_an_old_answer_parks_the_robot_and_is_named(bridge: Rig) -> None:
    """A controller stuck on one frame (its input frozen) that keeps re-sending that answer is no sign of
    life: the robot reaches the safe action as for silence, and /diagnostics says the answer repeats."""
    node, probe, executor = bridge
    contract = node.robot_spec.contract
    codec = ActionCodec(contract)
    answer_images(node, probe, executor, 3, contract.skill_id("drive"), contract.layout.defaults)
    frame = probe.received[CAMERA][-1].header.stamp
    stuck = codec.to_msg(contract.skill_id("drive"), contract.layout.defaults, stamp_to_sec(frame), "student")

    def repeat_until(done) -> bool:  # the same message every 20 ms, spinning between
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            probe.publish(COMMAND, stuck)
            if spin_until(executor, done, timeout_s=0.02):
                return True
        return False

    assert repeat_until(lambda: node.loop.stats().safe_steps >= 3), node.loop.stats()
    assert node.loop.stats().repeated > 10
    probe.received["/diagnostics"].clear()
    entry = "sim_bridge: robot"
    assert repeat_until(lambda: entry in probe.diagnostics("sim_bridge: "))
    robot = probe.diagnostics("sim_bridge: ")[entry]
    assert robot.level == ERROR and "repeats an old answer" in robot.message, robot.message


def test_a_disarmed_arm_switch_is_followed_and_its_silence_is_no_missed_cycle(bridge: Rig) -> None:
    """Under a launch no session tells the bridge about arming: it asks the arm switch (the opd node) its
    state and follows its transition events, so the periods an operator disarmed are counted as disarmed,
    not missed (issue 57: `agent disarm` under a launch made 2 missed cycles 120 in 5 s)."""
    from lifecycle_msgs.msg import State, TransitionEvent
    from lifecycle_msgs.srv import GetState

    node, probe, executor = bridge

    def inactive(_: GetState.Request, response: GetState.Response) -> GetState.Response:
        response.current_state = State(id=State.PRIMARY_STATE_INACTIVE, label="inactive")
        return response

    probe.node.create_service(GetState, "/opd/get_state", inactive)  # the arm switch, disarmed at start
    assert spin_until(executor, lambda: not node.controller_armed)
    events = probe.node.create_publisher(TransitionEvent, "/opd/transition_event", 10)
    assert spin_until(executor, lambda: events.get_subscription_count() > 0)
    events.publish(TransitionEvent(goal_state=State(id=State.PRIMARY_STATE_ACTIVE, label="active")))
    assert spin_until(executor, lambda: node.controller_armed)  # armed: silence is missed cycles again
    unanswered = lambda: (s := node.loop.stats()).missed + s.overruns  # noqa: E731  # deadline > period here
    assert spin_until(executor, lambda: unanswered() >= 3)
    events.publish(
        TransitionEvent(goal_state=State(id=State.TRANSITION_STATE_DEACTIVATING, label="deactivating"))
    )
    assert spin_until(executor, lambda: not node.controller_armed)
    spin_for(executor, 0.5)  # the period waiting when the event came, and the releases it made late
    missed, disarmed = unanswered(), node.loop.stats().disarmed
    spin_for(executor, 1.0)
    assert unanswered() == missed
    assert node.loop.stats().disarmed - disarmed >= 10  # 20 periods a second, none answered, none missed

"""The real-time loop against a controller that answers, and one that does not."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sim_doubles import CONTRACT, DummyRobot

from sim import realtime_loop
from sim.realtime_loop import LoopConfig, RealtimeLoop, Release
from sim.robot_interface import Observation, Outcome

DRIVE = CONTRACT.skill_id("drive")


class StallingRobot(DummyRobot):
    """A dummy robot whose `stall_at`-th step takes `stall_s` wall seconds: the next release comes late.

    Its IMU window holds more than the 10 samples of a control period, as a real robot's does.
    """

    WINDOW = 16

    def __init__(self, stall_at: int = -1, stall_s: float = 0.0) -> None:
        super().__init__(num_envs=1)
        self.steps, self.stall_at, self.stall_s = 0, stall_at, stall_s

    def step(self) -> Observation:
        self.steps += 1
        if self.steps == self.stall_at:
            time.sleep(self.stall_s)
        return super().step()


def run_loop(
    cfg: LoopConfig, answer: bool, seconds: float, robot: DummyRobot | None = None
) -> tuple[RealtimeLoop, DummyRobot, list[Release]]:
    """Run a loop on a one-env dummy robot for `seconds` (wall); the controller answers every new frame at
    once when `answer`, else never."""
    robot = robot or DummyRobot(num_envs=1)
    releases: list[Release] = []
    loop: RealtimeLoop

    def emit(release: Release) -> None:
        releases.append(release)
        if answer and release.new_image and not release.imu_only:
            params = CONTRACT.layout.defaults.copy()
            params[0] = 0.2
            loop.offer(DRIVE, params, float(release.obs.image_stamp_s[0]), time.time())

    loop = RealtimeLoop(robot, cfg, emit)
    loop.open()
    try:
        loop.start()
        time.sleep(seconds)
        parked = loop.stop()
    finally:
        loop.close()
    assert int(parked.skill[0]) == CONTRACT.safe_skill_id  # left on the safe action either way
    assert loop.error is None
    return loop, robot, releases


def test_a_controller_that_answers_at_once_misses_nothing() -> None:
    loop, robot, releases = run_loop(LoopConfig(), answer=True, seconds=1.0)
    s = loop.stats()
    assert s.cycles >= 10 and s.commands >= 5
    assert s.missed == 0 and s.safe_steps == 0
    assert len(s.missed_at_s) == s.overruns  # only releases the host made late, if any
    # Published after it was due: the due wall times come from a (monotonic, wall) pair read as one instant.
    assert len(s.latency_s) == s.commands and min(s.latency_s) > -1e-4
    # each answered frame's age at its release (capture -> the tick after it): this camera has no latency
    assert len(s.image_age_s) == len(s.latency_s) and all(0 <= a < loop.period_s for a in s.image_age_s)
    offsets = [r.due_wall_s - r.due_mono_s for r in releases if not r.imu_only]  # one instant, two clocks
    assert np.ptp(offsets) < 1e-6
    assert robot.x[0] > 0.0  # the commands were applied: the base drove
    frames = [r for r in releases if r.new_image]
    assert np.all(np.diff([r.obs.image_stamp_s[0] for r in frames]) > 0)


def test_a_command_stamped_after_every_release_answers_none_and_the_loop_keeps_waiting_for_answers() -> None:
    """A command stamped an hour ahead (a bad clock) used to become the newest answer: from then on the
    loop never waited for an observation's own answer, every step applying the last period's command. It
    is applied (as a safe action stamped when sent must be) but answers no release."""
    robot = DummyRobot(num_envs=1)
    applied: list[tuple[int, int]] = []  # (release being stepped, release its command answered)
    released = [-1]
    send = robot.send_action

    def send_action(skill: np.ndarray, params: np.ndarray) -> object:
        applied.append((released[0], round(float(params[0][1]) * 1000)))
        return send(skill, params)

    robot.send_action = send_action  # type: ignore[method-assign]
    loop: RealtimeLoop

    def emit(release: Release) -> None:
        if release.imu_only:
            return
        released[0] += 1
        k, stamp = released[0], float(release.obs.time_s[0])
        params = CONTRACT.layout.defaults.copy()
        params[1] = 0.001 * (k % 50)  # which release this answers, read back from the applied command
        if k == 10:
            threading.Timer(0.005, loop.offer, (DRIVE, params.copy(), stamp + 3600.0, time.time())).start()
        threading.Timer(0.015, loop.offer, (DRIVE, params, stamp, time.time())).start()  # the controller

    loop = RealtimeLoop(robot, LoopConfig(answer_stamp="state", command_deadline_s=0.04), emit)
    loop.open()
    try:
        loop.start()
        time.sleep(2.0)
        loop.stop()
    finally:
        loop.close()
    assert loop.error is None and loop.stats().ahead == 1
    late = [(j, k) for j, k in applied[12:-2] if k != j % 50]  # steps that applied an older answer
    assert len(late) <= 2, late  # each release waits for its own answer, after the glitch too


def test_a_stop_between_releases_releases_nothing_ahead_of_its_time() -> None:
    """Stopped half a period after a release, the loop must not release the next observation early."""
    robot = DummyRobot(num_envs=1)
    emitted: list[tuple[float, Release]] = []  # (wall time of the emit, release)
    loop = RealtimeLoop(robot, LoopConfig(), lambda r: emitted.append((time.time(), r)))
    loop.open()
    try:
        loop.start()
        time.sleep(0.5 + 0.5 * robot.spec.control_period_s)
        loop.stop()
    finally:
        loop.close()
    assert len(emitted) >= 5
    late_by = [wall - r.due_wall_s for wall, r in emitted]  # IMU-only releases included
    assert min(late_by) > -1e-4, late_by


class RecordingRobot(DummyRobot):
    """A dummy robot that records the wall time of each step and the skill it was stepped on; its
    episodes end (success) after `episode_steps` steps."""

    def __init__(self, episode_steps: int = 10**9) -> None:
        super().__init__(num_envs=1)
        self.episode_steps, self.steps_in_episode = episode_steps, 0
        self.stepped: list[tuple[float, int]] = []  # (wall time, skill applied)

    def reset(self, seed: int | None = None, envs: object = None) -> Observation:
        self.steps_in_episode = 0
        return super().reset(seed, envs)

    def step(self) -> Observation:
        self.stepped.append((time.time(), int(self.skill[0])))
        self.steps_in_episode += 1
        obs = super().step()
        if self.steps_in_episode >= self.episode_steps:
            obs.task.outcome[:] = Outcome.SUCCESS
        return obs


def test_a_stop_while_waiting_for_an_answer_steps_nothing_early() -> None:
    """Unanswered, a period with a new frame steps at its deadline (one without, when due); a stop inside
    that wait must not step at once."""
    cfg = LoopConfig()
    robot = RecordingRobot()
    releases: list[Release] = []
    stopper: list[threading.Timer] = []
    loop: RealtimeLoop

    def emit(release: Release) -> None:
        releases.append(release)
        if release.new_image and not release.imu_only and release.obs.time_s[0] > 0.5 and not stopper:
            timer = threading.Timer(0.4 * cfg.command_deadline_s, loop.stop)  # amid the wait
            timer.start()
            stopper.append(timer)  # once started: the test thread joins it as soon as it sees it

    loop = RealtimeLoop(robot, cfg, emit)
    loop.open()
    try:
        loop.start()
        deadline = time.monotonic() + 10.0
        while not stopper and time.monotonic() < deadline:
            time.sleep(0.01)
        stopper[0].join()
    finally:
        loop.close()
    observations = [r for r in releases if not r.imu_only]
    stepped = robot.stepped[:-1]  # the last step parks the robot
    assert len(stepped) >= 5 and len(stepped) <= len(observations)
    for (wall, _), release in zip(stepped, observations, strict=False):  # step k follows release k
        wait = cfg.command_deadline_s if release.new_image else 0.0
        assert wall >= release.due_wall_s + wait - 1e-3, (release.obs.time_s, wall - release.due_wall_s)


def test_an_answer_to_an_ended_episode_is_not_applied_after_the_reset() -> None:
    """The controller answers each episode's last frame late, after the reset: the next episode must not
    start on that command (it would also keep the command-timeout watchdog from stopping the robot)."""
    robot = RecordingRobot(episode_steps=4)
    loop: RealtimeLoop
    timers: list[threading.Timer] = []

    def emit(release: Release) -> None:
        if not release.imu_only and release.obs.task.done[0]:
            params = CONTRACT.layout.defaults.copy()
            params[0] = 0.2
            answer = (DRIVE, params, float(release.obs.time_s[0]), time.time())
            late = threading.Timer(0.01, loop.offer, answer)
            timers.append(late)
            late.start()

    loop = RealtimeLoop(robot, LoopConfig(answer_stamp="state"), emit)
    loop.open()
    try:
        loop.start()
        time.sleep(0.8)
        loop.stop()
    finally:
        loop.close()
        for t in timers:
            t.join()
    assert loop.stats().episodes >= 2 and loop.stats().commands >= 2
    assert {skill for _, skill in robot.stepped} == {CONTRACT.safe_skill_id}


def test_imu_samples_stream_on_their_own_as_they_are_taken() -> None:
    loop, robot, releases = run_loop(LoopConfig(), answer=True, seconds=1.0, robot=StallingRobot())
    stamps = np.concatenate([r.imu_stamps_s for r in releases])
    dt = 1.0 / DummyRobot.IMU_HZ
    assert np.allclose(np.diff(stamps), dt)  # each sample once, in order, none lost
    for r in releases[1:]:
        if r.imu_only:  # released when it was taken, not before (stamps are epoch + simulated time)
            assert r.due_wall_s >= r.epoch_s + r.imu_stamps_s.max() - 1e-3
        else:  # an observation brings only the sample taken at its own time
            assert list(r.imu_stamps_s) in ([], [r.obs.time_s[0]])
    assert sum(len(r.imu_stamps_s) for r in releases if r.imu_only) > 0.8 * len(stamps)


def test_a_silent_controller_costs_missed_cycles_then_the_safe_action() -> None:
    cfg = LoopConfig(command_deadline_s=0.01, command_timeout_s=0.2)
    start, start_wall = time.monotonic(), time.time()
    robot = StallingRobot(stall_at=4, stall_s=0.12)  # the 5th release comes more than a period late
    loop, robot, releases = run_loop(cfg, answer=False, seconds=1.0, robot=robot)
    s = loop.stats()
    frames = sum(r.new_image and not r.imu_only for r in releases)
    assert s.commands == 0 and not s.latency_s
    # Every period that released a new frame waited for its answer until the deadline, in vain; a period
    # released late is counted once, as an overrun.
    assert s.overruns >= 1 and s.missed >= 5
    assert frames - 1 <= s.missed + s.overruns <= frames + s.overruns  # the last wait may be cut by stop
    assert len(s.missed_at_s) == s.missed + s.overruns
    missed_at = np.sort(s.missed_at_s)
    assert start < missed_at[0] and missed_at[-1] < time.monotonic() and np.all(np.diff(missed_at) > 0)
    # No command for command_timeout_s: stepped on the safe action, as a base's watchdog does, and when it
    # began is reported (the fault bench times the base's stop by it).
    assert s.safe_steps >= 1 and robot.x[0] == 0.0
    assert s.safe_since_s is not None and start_wall + cfg.command_timeout_s <= s.safe_since_s < time.time()
    # Missing answers do not stall real time: about 20 periods per wall second.
    assert s.cycles >= 10


def test_stamps_follow_a_stepped_wall_clock_and_commands_flow_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's clock stepped forward 5 s, then back (NTP, chrony): the time base of the stamps follows
    each step, as a camera driver stamping with the system time does, so nodes reading the stepped clock see
    fresh frames; the controller's answers (matched in simulated time) keep flowing, and no safe step."""
    offset = [0.0]
    real_time = time.time
    monkeypatch.setattr(realtime_loop.time, "time", lambda: real_time() + offset[0])
    steps = [
        threading.Timer(0.4, offset.__setitem__, (0, 5.0)),
        threading.Timer(0.8, offset.__setitem__, (0, 0.0)),
    ]
    for timer in steps:
        timer.start()
    loop, _, releases = run_loop(LoopConfig(), answer=True, seconds=1.2)
    s = loop.stats()
    epochs = [r.epoch_s for r in releases if not r.imu_only]
    shifts = np.round(np.diff(epochs), 2)
    assert sorted(shifts[shifts != 0].tolist()) == [-5.0, 5.0] and s.clock_steps == 2
    assert s.safe_steps == 0 and s.commands >= 8 and s.missed <= 2  # an answer in flight at a step may miss


def test_clock_pair_keeps_the_reading_taken_without_pre_emption(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try is pre-empted for 10 ms between its monotonic and wall reads; the pair must not be."""
    mono = iter([100.0, 100.010, 100.020, 100.020001, 100.03, 100.030002, 100.04, 100.040001, 100.05, 100.05])
    wall = iter([1000.010, 1000.020, 1000.03, 1000.04, 1000.05])
    monkeypatch.setattr(realtime_loop.time, "monotonic", lambda: next(mono))
    monkeypatch.setattr(realtime_loop.time, "time", lambda: next(wall))
    assert realtime_loop.clock_pair(tries=5) == pytest.approx((100.05, 1000.05))  # the zero-gap try


def test_a_robot_that_fails_to_connect_leaves_no_thread_behind() -> None:
    class Unreachable(DummyRobot):
        def connect(self) -> None:
            raise ConnectionError("no GL stack")

    loop = RealtimeLoop(Unreachable(num_envs=1), LoopConfig(), lambda r: None)
    with pytest.raises(ConnectionError, match="no GL stack"):
        loop.open()
    assert not loop._thread.is_alive()  # a retried configure does not pile up robot threads
    loop.close()  # and closing it is still safe


def test_periods_while_the_controller_is_disarmed_are_not_missed_ones() -> None:
    """Disarmed on purpose, a silent controller costs no missed cycles: the periods count as disarmed (the
    live line says so); armed again, an unanswered period is a miss again."""
    loop = RealtimeLoop(DummyRobot(num_envs=1), LoopConfig(command_deadline_s=0.01), lambda r: None)
    loop.open()
    try:
        loop.set_armed(False)
        loop.start()
        time.sleep(0.5)
        disarmed = loop.stats()
        loop.set_armed(True)
        time.sleep(0.3)
        armed = loop.stats()
        loop.stop()
    finally:
        loop.close()
    assert disarmed.missed == 0 and disarmed.cycles >= 5
    assert disarmed.cycles <= disarmed.disarmed <= disarmed.cycles + 1  # the period under way counted too
    assert armed.missed >= 3 and armed.disarmed <= disarmed.disarmed + 1


def test_a_controller_repeating_its_answer_to_one_observation_reaches_the_safe_action() -> None:
    """A controller stuck on one observation (its input frozen) that re-sends that answer every 10 ms used
    to count as alive until the repeats stopped: the base drove on for as long. Repeats are counted, not
    applied, and are no sign of life: the safe action follows within command_timeout_s."""
    robot = DummyRobot(num_envs=1)
    cfg = LoopConfig(answer_stamp="state", command_timeout_s=0.3)
    first: list[float] = []
    loop: RealtimeLoop

    def emit(release: Release) -> None:
        if release.imu_only or first:
            return
        first.append(float(release.obs.time_s[0]))

    def repeat() -> None:  # the same answer, again and again, as the loop runs
        while not done.is_set():
            if first:
                loop.offer(DRIVE, CONTRACT.layout.defaults.copy(), first[0], time.time())
            time.sleep(0.01)

    done = threading.Event()
    loop = RealtimeLoop(robot, cfg, emit)
    loop.open()
    repeater = threading.Thread(target=repeat)
    try:
        loop.start()
        repeater.start()
        time.sleep(1.5)
        loop.stop()
    finally:
        done.set()
        repeater.join()
        loop.close()
    s = loop.stats()
    assert loop.error is None
    assert s.repeated > 50  # every re-send after the first, counted
    assert s.safe_steps >= s.cycles // 2  # on the safe action from 0.3 s on, of 1.5 s

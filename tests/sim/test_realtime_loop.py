"""The real-time loop against a controller that answers, and one that does not."""

from __future__ import annotations

import time

import numpy as np
from sim_doubles import CONTRACT, DummyRobot

from sim.realtime_loop import LoopConfig, RealtimeLoop, Release

DRIVE = CONTRACT.skill_id("drive")


def run_loop(cfg: LoopConfig, answer: bool, seconds: float) -> tuple[RealtimeLoop, DummyRobot, list[Release]]:
    """Run a loop on a one-env dummy robot for `seconds` (wall); the controller answers every new frame at
    once when `answer`, else never."""
    robot = DummyRobot(num_envs=1)
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
    assert len(s.latency_s) == s.commands and min(s.latency_s) >= 0.0  # published after it was due
    assert robot.x[0] > 0.0  # the commands were applied: the base drove
    frames = [r for r in releases if r.new_image]
    assert np.all(np.diff([r.obs.image_stamp_s[0] for r in frames]) > 0)


def test_a_silent_controller_costs_missed_cycles_then_the_safe_action() -> None:
    cfg = LoopConfig(command_deadline_s=0.01, command_timeout_s=0.2)
    start = time.monotonic()
    loop, robot, releases = run_loop(cfg, answer=False, seconds=1.0)
    s = loop.stats()
    frames = sum(r.new_image and not r.imu_only for r in releases)
    assert s.commands == 0 and not s.latency_s
    # Every period that released a new frame waited for its answer until the deadline, in vain.
    assert s.missed >= 5 and s.missed in (frames, frames - 1)  # the last frame's wait may be cut by stop
    assert len(s.missed_at_s) == s.missed + s.overruns
    missed_at = np.sort(s.missed_at_s)
    assert start < missed_at[0] and missed_at[-1] < time.monotonic() and np.all(np.diff(missed_at) > 0)
    # No command for command_timeout_s: stepped on the safe action, as a base's watchdog does.
    assert s.safe_steps >= 1 and robot.x[0] == 0.0
    # Missing answers do not stall real time: about 20 periods per wall second.
    assert s.cycles >= 10

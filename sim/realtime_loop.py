"""A robot interface played in real time (or faster) for a controller that answers asynchronously.

The simulator stands in for the robot of a control stack that runs elsewhere (the ROS 2 graph, through the
sim bridge node): each control period the loop releases an observation at the wall time it describes,
waits for the command that answers it, applies that command for the next period and steps. Everything
runs on one thread of its own ("robot"), so the GL context of an offscreen renderer stays current there.

Timing, for a real-time factor r > 0 (r = 1: real time):
- the observation at simulated time t is released at wall time w0 + (t - t0) / r, never earlier, so no
  sensor sample is seen before it was taken; t0 and w0 are taken when the loop starts;
- the command answering it carries the stamp of the input it was computed from: the newest new image
  (`answer_stamp: image`, the student) or the observation time (`answer_stamp: state`, the teacher);
- the robot steps once that command arrives, or `command_deadline_s` after the observation's wall time on
  its last command (a missed cycle); the next release then waits for its own wall time. A controller that
  is too slow thus costs missed cycles, never real time: a late release shortens its own deadline;
- IMU samples are released on their own as they reach the controller (at their capture time; later by
  the transport latency behind the real-robot proxy), between observations, not as a burst with the next
  one; that includes the settling window after a reset, simulated before the new episode's first
  observation;
- with r = 0 (lockstep) releases are not paced: the loop runs as fast as the controller answers;
- no command for `command_timeout_s` (wall time, e.g. a controller that died): the robot steps on the
  contract's safe action until the next command arrives, as a real base's command watchdog does. A command
  that answers no newer observation than one already answered (a controller repeating itself on a frozen
  input, or an old answer come late) is counted as `repeated` and neither applied nor taken as a sign of
  life (the safe action excepted: it always applies): a controller stuck on one observation reaches the
  safe action as a silent one does, within `command_timeout_s`. Not sooner: the camera's own gaps (a
  frame dropped, the proxy's latency jitter) leave a live controller without a new observation for a
  period or two, and the per-period deadline already counts those as missed;
- while the controller is disarmed (`set_armed(False)`: an operator stopped it on purpose) nothing answers:
  the robot steps on its last command (the safe action disarming sent) without waiting for an answer, and
  the period counts as disarmed, neither missed nor overrun.
A finished episode is counted and the next one starts from seed + episode index. The robot starts on
the contract's safe action and is left on it (`stop` parks it).

All robot calls, including connect and close, run on the robot thread; the other methods are thread-safe.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from pydantic import Field

from policies.config import Config
from sim.robot_interface import AppliedAction, Observation, Outcome, RobotInterface, clip_actions

log = logging.getLogger(__name__)

MATCH_US = 1e6  # answer stamps are matched to the microsecond (sensor stamps are whole physics ticks)
HISTORY = 100_000  # latency and release samples kept for percentiles (83 min at 20 Hz)
_RECENT_ANSWERS = 64  # released observations whose answer may still arrive
CLOCK_STEP_S = 0.1  # the wall clock moved this far against the monotonic one: a step (NTP slews far slower)


class LoopConfig(Config):
    """Pacing and command handling of the real-time loop."""

    real_time_factor: float = Field(1.0, ge=0.0)  # simulated seconds per wall second; 0 = lockstep, 1
    command_deadline_s: float = Field(0.04, gt=0.0)  # wall time a release waits for its answer, s
    command_timeout_s: float = Field(0.35, gt=0.0)  # no command for this long (wall) -> the safe action, s
    answer_stamp: Literal["image", "state"] = "image"  # stamp the answering command carries (see above)
    seed: int = Field(0, ge=0)  # episode i draws its layout from seed + i


@dataclass(frozen=True)
class Release:
    """One observation as released to the controller: env 0 of `obs`, and what is new in it.

    Shapes: imu (S, 6) and imu_stamps_s (S,) hold the S samples taken since the previous release.
    """

    obs: Observation
    imu: np.ndarray
    imu_stamps_s: np.ndarray
    new_image: bool  # the frame (obs.image[0]) was not released before
    new_proprio: bool  # likewise the odometry
    episode: int  # index of the episode the observation belongs to
    due_wall_s: float  # wall (system clock) time the observation describes, s
    due_mono_s: float  # the same instant on the monotonic clock (the graph's stage marks use it), s
    epoch_s: float  # time base of the run: stamps are epoch_s + simulated time, s (wall time at the start)
    imu_only: bool = False  # only IMU samples that arrive before `obs` (see RealtimeLoop._stream_imu)


@dataclass
class LoopStats:
    """Counters of the loop since the last `reset_stats`; `latency_s` and `lateness_s` are in seconds."""

    cycles: int = 0  # control periods stepped
    missed: int = 0  # periods stepped on the last command: no answer within the deadline (overruns aside)
    overruns: int = 0  # releases more than one control period (wall) after their due time
    commands: int = 0  # commands offered
    ahead: int = 0  # commands stamped after every released observation: applied, answering none
    repeated: int = 0  # commands answering no newer observation than one answered already: not applied
    safe_steps: int = 0  # periods stepped on the safe action because no command came for command_timeout_s
    safe_since_s: float | None = None  # wall time the current run of safe steps began; None: commanded
    clock_steps: int = 0  # steps of the wall clock the stamps followed (see `_follow_clock_step`)
    disarmed: int = 0  # periods stepped while the controller was disarmed: unanswered, not counted as missed
    resetting_s: float = 0.0  # wall time between an episode's end and the next one's first release, s
    episodes: int = 0  # episodes finished
    successes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # finished episodes by outcome name
    clipped: Counter[str] = field(default_factory=Counter)  # applied actions that differ from the command
    latency_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # answer published - due
    # Of each latency's release: its wall time - its answer stamp's (the image's capture: behind the proxy,
    # its camera latency and the wait for the tick that released it; 0 for a state), s
    image_age_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    # Monotonic time each latency was taken (its answer came), s: lines latencies up with the host's stalls.
    latency_at_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    lateness_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # release - due
    # Monotonic due time of each missed or overrun period, s: lines misses up with the host's stalls.
    missed_at_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    progress: float = 0.0  # of the running episode, [0, 1]
    step: int = 0  # control steps of the running episode
    started_mono_s: float = 0.0  # monotonic time of the last reset_stats, s
    sim_time_s: float = 0.0  # time of the last released observation, s


def clock_pair(tries: int = 5) -> tuple[float, float]:
    """(monotonic, wall) time of one instant, s. Read between two monotonic reads, keeping the closest of a
    few tries: a thread pre-empted between the two reads would shift every due wall time, and so every
    latency of the run, by the length of the pre-emption."""
    best = (math.inf, 0.0, 0.0)
    for _ in range(tries):
        before, wall, after = time.monotonic(), time.time(), time.monotonic()
        best = min(best, (after - before, (before + after) / 2, wall))
    return best[1], best[2]


class RealtimeLoop:
    """Runs one env of `robot` against commands offered from other threads.

    Args:
        robot: a built, unconnected robot with `spec.num_envs == 1`.
        cfg: pacing and command handling.
        emit: publishes a release (called on the robot thread).
        ready: polled before the first release; the loop (and simulated time) waits until it holds, e.g.
            until the controller is connected.
    """

    def __init__(
        self,
        robot: RobotInterface,
        cfg: LoopConfig,
        emit: Callable[[Release], None],
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        if robot.spec.num_envs != 1:
            raise ValueError(f"the real-time loop drives one env, the robot has {robot.spec.num_envs}")
        self.robot, self.cfg, self._emit, self._ready = robot, cfg, emit, ready
        self.applied: AppliedAction | None = None  # what the robot stepped on last (robot thread)
        self.period_s = robot.spec.control_period_s
        contract = robot.spec.contract
        self._safe = (contract.safe_skill_id, contract.layout.defaults.copy())
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._command = self._safe  # (skill, params (P,)) applied from the next step on
        self._answered: int | None = None  # stamp (us) of the newest command
        self._released = -1  # stamp (us) of the newest observation released
        self._stale = -1  # commands stamped at or before this (us) predate a reset or park: not applied
        self._command_mono = time.monotonic()  # when the last command was offered (monotonic), s
        # answer stamp (us) -> (due wall time, the release's image age: LoopStats.image_age_s), s
        self._due: OrderedDict[int, tuple[float, float]] = OrderedDict()
        self._overrun = False  # the last release came more than a period late (counted as its miss)
        self._armed = True  # the controller answers releases (see set_armed)
        self._stats = LoopStats(started_mono_s=time.monotonic())
        self._episode = 0  # index of the running episode (not reset with the stats: it picks the seed)
        self._reset_once = False  # the robot has an episode, so it can be stepped (parked)
        self.error: BaseException | None = None  # what ended the last run, if anything did
        self._calls: queue.Queue[tuple[Callable[[], Any], Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="robot", daemon=True)
        self._running: Future | None = None

    # ---- control, from any thread ---------------------------------------------------------------------
    def open(self) -> None:
        """Start the robot thread and connect the robot there; raises what connect raised, thread ended."""
        self._thread.start()
        try:
            self._call(self.robot.connect).result()
        except BaseException:
            self._calls.put(None)
            self._thread.join()
            raise

    def start(self) -> None:
        """Begin episodes on the robot thread (returns at once)."""
        self._stopping.clear()
        self.error = None
        self._running = self._call(self._run)

    def stop(self) -> AppliedAction:
        """End the run, then park the robot: the safe action, applied for one control period.

        Returns what was applied (the contract's safe action).
        """
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._running is not None:
            self._running.exception()  # waits; an error is already in `self.error`
            self._running = None
        return self._call(self._park).result()

    def close(self) -> None:
        """Close the robot on its thread and end the thread; safe to call twice."""
        if not self._thread.is_alive():
            return
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self._call(self.robot.close).result()
        self._calls.put(None)
        self._thread.join()

    @property
    def running(self) -> bool:
        running = self._running  # read once: stop() clears it from another thread
        return running is not None and not running.done()

    def set_armed(self, armed: bool) -> None:
        """Whether the controller is armed: only then is a period without its answer a missed one."""
        with self._cond:
            self._armed = armed
            self._cond.notify_all()

    def command_age_s(self) -> float:
        """Wall time since the last command was offered (or since the run started), s."""
        with self._cond:
            return time.monotonic() - self._command_mono

    def offer(self, skill: int, params: np.ndarray, stamp_s: float, published_wall_s: float) -> None:
        """A command from the controller: applied from the next step on; answers the release it is stamped
        with. Params (P,) are clipped to the contract when applied.

        Args:
            stamp_s: the (simulated) stamp of the input it was computed from, s.
            published_wall_s: wall (system clock) time it was published, s, for the latency.
        """
        key = round(stamp_s * MATCH_US)
        with self._cond:
            self._stats.commands += 1
            if key <= self._stale:  # e.g. the answer to an episode's last frame, come after the reset
                return
            # Nothing newer than applied already. A safe action always goes through: stamped when sent, it
            # may carry the very stamp of the newest answer (lockstep, a camera without latency).
            if self._answered is not None and key <= self._answered and int(skill) != self._safe[0]:
                self._stats.repeated += 1
                return
            self._command = (int(skill), np.asarray(params, dtype=np.float64))
            self._command_mono = time.monotonic()
            if key > self._released:
                # Stamped after every release: a safe action stamped when sent, or a bad clock. Applied, but
                # it answers no release: taken as the newest answer, one an hour ahead made the loop stop
                # waiting for every later release's own answer.
                self._stats.ahead += 1
            else:
                self._answered = key
            due = self._due.pop(key, None)
            if due is not None:
                self._stats.latency_s.append(published_wall_s - due[0])
                self._stats.image_age_s.append(due[1])
                self._stats.latency_at_s.append(self._command_mono)
            self._cond.notify_all()

    def stats(self) -> LoopStats:
        """A copy of the counters."""
        with self._cond:
            s = self._stats
            return replace(s, outcomes=s.outcomes.copy(), clipped=s.clipped.copy(),
                           latency_s=s.latency_s.copy(), latency_at_s=s.latency_at_s.copy(),
                           image_age_s=s.image_age_s.copy(),
                           lateness_s=s.lateness_s.copy(),
                           missed_at_s=s.missed_at_s.copy())  # fmt: skip

    def reset_stats(self) -> None:
        """Start counting afresh (e.g. after a warm-up); the running episode's progress is kept."""
        with self._cond:
            old = self._stats
            self._stats = LoopStats(progress=old.progress, step=old.step, sim_time_s=old.sim_time_s,
                                    started_mono_s=time.monotonic())  # fmt: skip

    # ---- the robot thread -----------------------------------------------------------------------------
    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as err:  # handed to the caller through the future
                    future.set_exception(err)

    def _call(self, fn: Callable[[], Any]) -> Future:
        if not self._thread.is_alive():
            raise RuntimeError("the robot thread is not running: call open() first")
        future: Future = Future()
        self._calls.put((fn, future))
        return future

    def _run(self) -> None:
        try:
            self._episodes()
        except BaseException as err:
            self.error = err
            log.exception("real-time loop stopped by an error")
            raise

    def _episodes(self) -> None:
        with self._cond:
            self._forget_commands()
            episode = self._episode
        obs = self.robot.reset(seed=self.cfg.seed + episode)
        self._reset_once = True
        while not self._ready():
            if self._stopping.wait(0.05):
                return
        self._t0 = float(obs.time_s[0])
        self._mono0, self._wall0 = clock_pair()
        with self._cond:
            self._command_mono = self._mono0  # the robot starts on the safe action: not stale yet
            if self._stats.cycles == 0:  # count rates from the first release, not from waiting for `ready`
                self._stats.started_mono_s = self._mono0
        self._epoch = round(self._wall0 - self._t0, 3)  # whole milliseconds: stamps stay readable
        self._last_imu = -np.inf
        self._last_image = self._last_proprio = -np.inf
        released = self._release(obs, episode)
        while not self._stopping.is_set():
            if obs.task.done[0]:
                episode = self._finish(obs)
                ended = time.monotonic()
                obs = self.robot.reset(seed=self.cfg.seed + episode)
                released = self._release(obs, episode)  # after the robot settled (simulated time)
                with self._cond:
                    self._stats.resetting_s += time.monotonic() - ended
                continue
            awaited = self._awaited(obs, released)
            command = self._wait_for_answer(awaited, self._due_mono + self.cfg.command_deadline_s)
            if self._stopping.is_set():  # cut short by stop: no unpaced step on an unanswered command
                break
            applied = self.robot.send_action(np.array([command[0]]), command[1][None])
            self.applied = applied  # read on this thread, by the emit that follows (a video's overlay)
            obs = self.robot.step()
            with self._cond:
                self._stats.cycles += 1
                if applied.clipped[0]:
                    self._stats.clipped[applied.reasons[0]] += 1
            released = self._release(obs, episode)

    def _awaited(self, obs: Observation, release: Release) -> int | None:
        """Stamp (us) of the command that answers `release`, or None when none will (no new frame)."""
        if self.cfg.answer_stamp == "state":
            return round(float(obs.time_s[0]) * MATCH_US)
        if not release.new_image:
            return None
        return round(float(obs.image_stamp_s[0]) * MATCH_US)

    def _wait_for_answer(self, awaited: int | None, deadline: float) -> tuple[int, np.ndarray]:
        """The command to apply: the answer to `awaited` once it came, else the last one at the deadline;
        the safe action when the last one is older than `command_timeout_s`."""
        with self._cond:
            if not self._armed:
                self._stats.disarmed += 1
            while awaited is not None and self._armed and not self._stopping.is_set():
                if self._answered is not None and self._answered >= awaited:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # a late release was counted as its period's miss already; disarmed, nothing answers
                    if not self._overrun and self._armed:
                        self._stats.missed += 1
                        self._stats.missed_at_s.append(self._due_mono)
                    break
                self._cond.wait(remaining)
            if time.monotonic() - self._command_mono > self.cfg.command_timeout_s:
                self._stats.safe_steps += 1
                if self._stats.safe_since_s is None:
                    self._stats.safe_since_s = time.time()
                return self._safe
            self._stats.safe_since_s = None
            return self._command

    def _release(self, obs: Observation, episode: int) -> Release:
        """Wait until `obs` is due (paced runs), then emit it with what is new since the last release."""
        t = float(obs.time_s[0])
        rtf = self.cfg.real_time_factor
        self._follow_clock_step()
        due_mono = self._mono0 + (t - self._t0) / rtf if rtf > 0 else time.monotonic()
        self._due_mono = due_mono
        if rtf > 0:
            self._stream_imu(obs, episode, t)
        stopped = self._stopping.wait(max(0.0, due_mono - time.monotonic()))
        now = time.monotonic()
        stamps = obs.imu_stamps_s[0]
        new = stamps > self._last_imu
        release = Release(
            obs=obs,
            imu=obs.imu[0, new],  # (S, 6)
            imu_stamps_s=stamps[new],  # (S,)
            new_image=obs.image is not None and obs.image_stamp_s[0] > self._last_image,
            new_proprio=obs.proprio_stamp_s[0] > self._last_proprio,
            episode=episode,
            due_wall_s=self._wall0 + (due_mono - self._mono0),
            due_mono_s=due_mono,
            epoch_s=self._epoch,
        )
        if stopped:  # stopped before it was due: `obs` lies ahead of real time, so it is never released
            return release
        if new.any():
            self._last_imu = float(stamps[-1])
        if release.new_image:
            self._last_image = float(obs.image_stamp_s[0])
        self._last_proprio = float(obs.proprio_stamp_s[0])
        with self._cond:
            s = self._stats
            s.lateness_s.append(now - due_mono)
            self._overrun = rtf > 0 and now - due_mono > self.period_s / rtf
            if self._overrun:
                s.overruns += 1
                s.missed_at_s.append(due_mono)
            s.progress, s.step, s.sim_time_s = float(obs.task.progress[0]), int(obs.task.step[0]), t
            self._released = round(t * MATCH_US)
            if not obs.task.done[0]:
                awaited = self._awaited(obs, release)
                if awaited is not None:
                    age = (t - awaited / MATCH_US) / rtf if rtf > 0 else 0.0  # sim -> wall time
                    self._due[awaited] = (release.due_wall_s, age)
                    while len(self._due) > _RECENT_ANSWERS:
                        self._due.popitem(last=False)
        self._emit(release)
        return release

    def _follow_clock_step(self) -> None:
        """Stamps follow a stepped wall clock (NTP or chrony stepping the host's clock), as a camera driver
        stamping each frame with the system time does: the run's time base moves with it. Paced by the
        monotonic clock alone, they kept the time base of the run's start, so the nodes, reading the stepped
        clock, saw every frame 5 s old (or ahead) until the clock came back, and the base stayed stopped."""
        if abs((time.time() - time.monotonic()) - (self._wall0 - self._mono0)) < CLOCK_STEP_S:
            return  # one read a release: a pre-emption between the two is far under a step
        mono, wall = clock_pair()  # the step itself from a pair read as one instant
        step = (wall - mono) - (self._wall0 - self._mono0)
        self._wall0 += step
        self._epoch = round(self._wall0 - self._t0, 3)
        with self._cond:
            self._stats.clock_steps += 1
        log.warning("the wall clock stepped by %+.3f s: stamps follow it from this observation on", step)

    def _stream_imu(self, obs: Observation, episode: int, before_s: float) -> None:
        """Release the new IMU samples of `obs` that reach the controller before `before_s` (the time of
        `obs`) as each arrives, in IMU-only releases; the rest go with `obs`.

        A real IMU streams at its own rate. Held back for the next observation, a control period's samples
        (a reset's settling window: 100 of them) would reach the controller as one burst just when it needs
        its inputs, each up to a period late.
        """
        rtf = self.cfg.real_time_factor
        stamps = obs.imu_stamps_s[0]  # (W,)
        arrivals = stamps if obs.imu_arrival_s is None else obs.imu_arrival_s[0]  # (W,) non-decreasing
        early = (stamps > self._last_imu) & (arrivals < before_s - 1e-9)  # (W,) the sample at before_s waits
        while early.any() and not self._stopping.is_set():
            now_s = self._t0 + (time.monotonic() - self._mono0) * rtf  # simulated time due now
            due = early & (arrivals <= now_s)
            if not due.any():
                self._stopping.wait((arrivals[early].min() - now_s) / rtf)
                continue
            mono = time.monotonic()
            self._emit(Release(
                obs=obs, imu=obs.imu[0, due], imu_stamps_s=stamps[due], new_image=False,
                new_proprio=False, episode=episode, due_wall_s=self._wall0 + mono - self._mono0,
                due_mono_s=mono, epoch_s=self._epoch, imu_only=True,
            ))  # fmt: skip
            self._last_imu = float(stamps[due][-1])
            early &= ~due

    def _finish(self, obs: Observation) -> int:
        """Count the finished episode; return the index of the next one."""
        outcome = Outcome(int(obs.task.outcome[0])).name.lower()
        with self._cond:
            s = self._stats
            s.episodes += 1
            s.successes += outcome == "success"
            s.outcomes[outcome] += 1
            self._forget_commands()
            self._episode += 1
        log.info("episode %d: %s (progress %.2f)", self._episode, outcome, float(obs.task.progress[0]))
        return self._episode

    def _forget_commands(self) -> None:
        """Back to the safe action, deaf to answers still on their way (called under `_cond`)."""
        self._command, self._answered, self._stale = self._safe, None, self._released

    def _park(self) -> AppliedAction:
        """The safe action, applied for one control period (no release): the robot is left braking."""
        with self._cond:
            self._forget_commands()
        skill, params = np.array([self._safe[0]]), self._safe[1][None]
        if not self._reset_once:  # no episode yet: the robot is at rest
            return clip_actions(self.robot.spec.contract, skill, params, 1)
        applied = self.robot.send_action(skill, params)
        self.robot.step()
        return applied

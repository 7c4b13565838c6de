"""The OPD core on one stream, as messages arrive: teacher states in, student frames in, one decision each.

The live `opd` node and `agent replay` both run this class, so a recorded run replays through exactly the
code that decided it. Per student frame it returns the gate's decision with its context: the frame's stamp,
the time it was decided (`now`) and the newest teacher stamp the buffer held (`teacher_upto`). The context
is what a decision depends on besides the messages themselves, which arrive in an order no bag keeps to
the microsecond; the live node publishes it on /opd/gate (agent_interfaces/GateState, float64 fields:
exact), and replay feeds teacher states up to
`teacher_upto` and decides at `now`, so the replayed decision sees what the live one saw.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from opd.distill.learner import Decision, OnlineDistillation

if TYPE_CHECKING:
    import torch

    from opd.distill.onnx_acting import OnnxActing


@dataclass(frozen=True)
class StreamDecision:
    """One decision of a one-env learner and what it saw."""

    stamp: float  # the student frame's stamp (its image's), s
    now: float  # when it was decided, s
    teacher_upto: float  # newest teacher stamp held when deciding, s (NaN: none)
    decision: Decision  # N = 1
    version: int = -1  # the student version that acted in ONNX (0: the deployed artifact; -1: torch)

    @property
    def source(self) -> str:
        """Who decided the executed action: the safe action when neither the student nor the teacher could."""
        if self.reason == "no_input_safe_action":
            return "safe"
        return "teacher" if self.decision.use_teacher[0] else "student"

    @property
    def reason(self) -> str:
        return self.decision.reason[0]


class DecisionStream:
    """One-env OPD: `on_teacher` for each privileged state, `on_frame` for each state embedding."""

    def __init__(self, learner: OnlineDistillation) -> None:
        if learner.num_envs != 1:
            raise ValueError(f"a decision stream drives one env, the learner has {learner.num_envs}")
        self.learner = learner
        self.last_step = -1  # step of the last teacher state: a smaller one starts a new episode
        self.episodes: list[dict] = []  # summaries of finished episodes (`EpisodeMetrics.summary`)
        self._offered: tuple[OnnxActing, dict[str, torch.Tensor] | None] | None = None
        self._offer_lock = threading.Lock()

    def offer(self, acting: OnnxActing, novelty: dict[str, torch.Tensor] | None = None) -> None:
        """A student version to act with from the next frame on (any thread: the learner's receiver).
        Taken at the start of a frame, so each decision names the one version it used (`version`), which
        the node announces and replay swaps in at the same frame."""
        with self._offer_lock:
            self._offered = (acting, novelty)

    def on_teacher(self, stamp: float, skill: int, step: int, state: np.ndarray, now: float) -> bool:
        """The sim twin's true state (Dq,) at `stamp`: the frozen teacher acts on it and its entry joins the
        buffer. A step below the last one is a new episode: no frame stamped at or before the ended one's
        newest teacher state may pair in it. False: refused (stale, future, duplicate, non-finite, the last
        episode's; counted in the buffer). A state refused for its stamp is refused before its step is read:
        it neither ends the episode nor moves the step on. The one exception: a step that goes back with a
        stamp before the ended episode's states is a clock that restarted, and begins the next episode."""
        learner, t = self.learner, np.array([now])
        buffer = learner.buffers[0]
        reason = buffer.refusal(stamp, now)
        restarted = reason == "previous_episode" and step < self.last_step
        if reason is not None and not restarted:
            buffer.counts[reason] += 1
            return False
        if step < self.last_step:
            newest = buffer.newest_teacher  # NaN: none held
            self.episodes += learner.process_step(t, np.array([True]))
            # what came before the ended episode's newest state is that episode's (unless the clock went
            # back: then nothing is)
            learner.begin_episode(0, after=newest if newest < stamp else -np.inf)
        self.last_step = step
        return bool(learner.observe_teacher(np.array([stamp]), state[None], np.array([skill]), t)[0])

    def on_frame(self, stamp: float, embedding: np.ndarray, now: float) -> StreamDecision | None:
        """A state embedding (E,) measured at `stamp`: join the buffer, let the gate choose. None when the
        buffer refuses the frame (late, duplicate, non-finite: counted there)."""
        learner, t = self.learner, np.array([now])
        with self._offer_lock:
            offered, self._offered = self._offered, None
        if offered is not None:
            learner.act_in_onnx(*offered)
        frame = {"embedding": embedding[None]}  # (1, E)
        if not learner.observe_student(np.array([0]), np.array([stamp]), frame, t)[0]:
            return None
        upto = learner.buffers[0].newest_teacher
        decision = learner.act(t)
        learner.process_step(t, np.array([False]))
        return StreamDecision(float(stamp), float(now), upto, decision, learner.acting_version)

    def finish(self, now: float) -> None:
        """End the episode in progress (the recording ended): its summary joins `episodes`."""
        if self.learner.env.metrics[0].steps:
            self.episodes += self.learner.process_step(np.array([now]), np.array([True]))

    @property
    def refusals(self) -> dict[str, int]:
        """Frames and teacher states the buffer refused, by reason."""
        return dict(self.learner.buffers[0].counts)

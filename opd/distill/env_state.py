"""What the OPD learner keeps per env between decisions, and the metrics of each env's episode.

One place for the per-env arrays, so that starting an env's episode afresh (`EnvState.reset`) is one call
that cannot forget a field.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.embedding_window import EmbeddingWindow
from policies.skill_contract import SkillContract
from policies.teacher_view import Sightings


@dataclass
class EpisodeMetrics:
    """One finished episode of one env, as `agent train student` logs it."""

    steps: int = 0
    teacher_steps: int = 0
    switches: int = 0
    agree_steps: int = 0  # decisions where the student's skill matched the teacher's
    param_error_sum: float = 0.0  # masked, half-range units, summed over agreeing decisions
    horizon_error_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    horizon_count: np.ndarray = field(default_factory=lambda: np.zeros(0))
    outcome: str = "running"

    def summary(self, control_hz: float) -> dict[str, Any]:
        minutes = max(self.steps / control_hz / 60.0, 1e-9)
        counts = np.where(self.horizon_count > 0, self.horizon_count, np.nan)  # NaN: horizon never reached
        return {
            "success": self.outcome == "success",
            "outcome": self.outcome,
            "steps": self.steps,
            "intervention_rate": self.teacher_steps / max(self.steps, 1),
            "switches_per_min": self.switches / minutes,
            "skill_agreement": self.agree_steps / max(self.steps, 1),
            "param_error": self.param_error_sum / max(self.agree_steps, 1),
            "pred_error": [float(e) for e in self.horizon_error_sum / counts],
        }


class EnvState:
    """Per env (N): the acting windows and predictions, both sides' newest actions and when each was seen,
    the teacher's memory of sightings, and the episode's metrics. Shapes (N,) unless said."""

    def __init__(
        self, num_envs: int, history: int, embed_dim: int, horizon: int, contract: SkillContract,
        sightings: Sightings | None,
    ) -> None:  # fmt: skip
        n, self.contract, self.horizon = num_envs, contract, horizon
        self.windows = EmbeddingWindow(n, history, embed_dim)  # (N, T, E) the newest accepted frames
        # each env's newest predictions: (stamp s, (H, Dq) teacher-state std units)
        self.predictions: list[deque[tuple[float, np.ndarray]]] = [deque(maxlen=8) for _ in range(n)]
        self.novelty_score = np.full(n, np.nan)
        self.has_student = np.zeros(n, dtype=bool)
        # when each env's newest accepted frame was measured (its stamp; its arrival if earlier), s
        self.student_seen_at = np.full(n, -np.inf)
        self.student_skill = np.full(n, contract.safe_skill_id, dtype=np.int64)
        self.student_params = np.tile(contract.layout.defaults, (n, 1)).astype(np.float64)  # (N, P)
        self.student_ok = np.zeros(n, dtype=bool)  # the student's action is finite (inside the contract)
        self.teacher_skill = np.full(n, contract.safe_skill_id, dtype=np.int64)
        self.teacher_params = self.student_params.copy()  # (N, P)
        self.teacher_seen_at = np.full(n, -np.inf)  # `now` of each env's last teacher entry, s
        # a teacher whose view remembers sightings (policies.teacher_view) sees each env through this memory,
        # which moves on with the accepted entries newer than any before (a late one is seen, not remembered)
        self.sightings = sightings
        self.sighted_upto = np.full(n, -np.inf)  # stamp of each env's newest remembered state, s
        self.using_teacher = np.zeros(n, dtype=bool)
        self.newest_payload: list[dict[str, Any] | None] = [None] * n  # the frame each env acts on
        self.metrics = [self.new_metrics() for _ in range(n)]

    def new_metrics(self) -> EpisodeMetrics:
        return EpisodeMetrics(horizon_error_sum=np.zeros(self.horizon), horizon_count=np.zeros(self.horizon))

    def reset(self, i: int) -> None:
        """A new episode for env i: no frame, action, timer or metric of the last one carries over. The
        teacher's newest action stays until a fresh one replaces it; it acts only while fresh."""
        if self.sightings is not None:
            self.sightings.reset(np.array([i]))
            self.sighted_upto[i] = -np.inf
        self.windows.reset(np.array([i]))
        self.predictions[i].clear()
        self.has_student[i] = self.student_ok[i] = self.using_teacher[i] = False
        self.newest_payload[i] = None
        self.student_skill[i] = self.contract.safe_skill_id
        self.student_params[i] = self.contract.layout.defaults
        self.teacher_seen_at[i] = self.student_seen_at[i] = -np.inf
        self.novelty_score[i] = np.nan
        self.metrics[i] = self.new_metrics()

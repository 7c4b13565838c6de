"""The OPD gate: per env and per decision, whether the student's or the teacher's action is executed.

The state predictor's error (teacher-state running stds; NaN = not known yet) says how far the student's
delayed, noisy view can be trusted. Seed 003 (3.4): above a threshold (0.15 at first, lowered as training
goes on) the teacher's action is executed, otherwise the student's. Rules, first match wins per env:

1. No fresh teacher action (`teacher_ok` False): the student acts ("teacher_unavailable"). There is nothing
   else to execute; the caller falls back to the safe action when the student is stale too.
2. Safety overrides, before any error rule, because a small prediction error does not make an illegal or
   contradicting action right: the student's raw action left the skill contract ("student_out_of_contract"),
   or its skill has differed from the teacher's continuously for longer than `disagree_s`
   ("skill_disagreement"; the timer restarts on agreement, on a silent teacher and on `reset`).
3. Dwell: a teacher that took over (for any reason) keeps control for `min_teacher_steps` decisions
   ("holding"), so that an error jittering around the threshold cannot make the robot chatter.
4. NaN error: the current source keeps acting ("error_unknown"); no evidence is no reason to switch.
5. Hysteresis: the teacher hands back only when the error is below `release_ratio * threshold`
   ("error_below_release", else "holding"); the student loses control only when the error is above the
   threshold ("error_above_threshold", else "student_confident").

Threshold: the schedule decays from `threshold_start` to `threshold_end` over `decay_steps` learner steps and
stays there (exponential: geometric interpolation, equal ratios per step; linear; constant or decay_steps 0:
`threshold_start` throughout). A teacher that took over by a safety override hands back by rule 5 too.
With a `budget`, once `budget_min_samples` finite errors have been seen, it is instead the (1 - beta)
quantile of the last `budget_window` finite errors of all envs. beta starts at the budget and is calibrated
after every such decision by adaptive conformal inference (Gibbs & Candes 2021):
    beta += budget_gain * (budget(step) - teacher rate of this decision among envs with a teacher)
where budget(step) follows the threshold's schedule from `budget` to `budget_end` (constant without one).
clipped to [0, 1]. The plain (1 - budget) quantile would miss the target: hysteresis, the dwell and the
safety overrides all add teacher decisions beyond the fraction of errors above the threshold (on a lognormal
error with the default release ratio: 0.39 instead of 0.30 with a dwell of 1, 0.55 with the default 3).
The calibrated threshold is deliberately not clamped to [threshold_end, threshold_start]: a clamp would
stop the rate from tracking the budget exactly when the error distribution lies outside that band, which is
when a budget is needed. The safety overrides are never suppressed by the budget; they only crowd out
error-driven takeovers.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from policies.config import Config

REASONS = (  # stable identifiers: logs and dashboards key on them
    "teacher_unavailable",
    "student_out_of_contract",
    "skill_disagreement",
    "holding",
    "error_unknown",
    "error_below_release",
    "error_above_threshold",
    "student_confident",
)
SOURCES = ("student", "teacher")  # by use_teacher, for Gate.counts keys
UNAVAILABLE, OUT_OF_CONTRACT, DISAGREEMENT, HOLDING, UNKNOWN, BELOW_RELEASE, ABOVE, CONFIDENT = range(8)


def quantile(x: np.ndarray, q: float) -> float:
    """`np.quantile(x, q)` (method "linear") of finite x, bit for bit, by a partition on the two order
    statistics it interpolates: a tenth of np.quantile's cost on a budget window (the gate asks every
    decision)."""
    n = x.size
    virtual = (n - 1) * q
    lo = int(math.floor(virtual))
    hi = min(lo + 1, n - 1)
    gamma = virtual - lo
    part = np.partition(x, (lo, hi))
    a, b = float(part[lo]), float(part[hi])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma  # numpy's _lerp


class Recent:
    """The newest `size` finite values pushed (a ring): the sample a quantile or a rank is taken over."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size = {size} must be >= 1")
        self._ring = np.zeros(size)
        self.seen = 0  # finite values pushed in total

    def push(self, values: np.ndarray) -> None:
        """Append the finite ones of `values` (N,), the newest last; more than the ring keeps its newest."""
        values = values[np.isfinite(values)][-self._ring.size :]
        pos = (self.seen + np.arange(values.size)) % self._ring.size
        self._ring[pos] = values
        self.seen += values.size

    def values(self) -> np.ndarray:
        """(W,) the kept values, oldest first (W <= size)."""
        size = self._ring.size
        if self.seen < size:
            return self._ring[: self.seen].copy()
        return np.roll(self._ring, -(self.seen % size))

    def kept(self) -> np.ndarray:
        """(W,) the kept values in ring order, a view: for a quantile, whose multiset has no order."""
        return self._ring[: len(self)]

    def newest(self, k: int) -> np.ndarray:
        """(k,) the newest k kept values in no set order (a view when k is all of them): for a quantile."""
        if k == len(self):
            return self._ring[:k]
        return self._ring[(self.seen - k + np.arange(k)) % self._ring.size]

    def __len__(self) -> int:
        return min(self.seen, self._ring.size)

    def load(self, values: list[float]) -> None:
        """Restore `values()` as saved (the newest `size` of them are kept)."""
        self.seen = 0
        self.push(np.asarray(values, np.float64))


def scheduled(cfg: GateConfig, start: float, end: float, step: int) -> float:
    """`start` decayed towards `end` at learner `step` by `cfg`'s schedule."""
    if cfg.schedule == "constant" or cfg.decay_steps == 0:
        return start
    frac = min(step / cfg.decay_steps, 1.0)
    if cfg.schedule == "linear":
        return start + frac * (end - start)
    return start * (end / start) ** frac


def disagreement(
    since: np.ndarray, now: np.ndarray, differ: np.ndarray, ok: np.ndarray, limit: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The skill-disagreement timer (N,): its new start times (NaN = skills agree) and where it has run
    longer than `limit` s (0 = off). The comparison needs a fresh teacher skill: a silent one restarts it."""
    started = np.where(np.isnan(since), now, since)
    since = np.where(differ & ok, started, np.nan)
    return since, (limit > 0) & (now - since > limit)  # NaN since: False


def choose(
    was: np.ndarray,
    held: np.ndarray,
    min_teacher_steps: int | np.ndarray,
    ok: np.ndarray,
    in_contract: np.ndarray,
    disagree: np.ndarray,
    error: np.ndarray,
    threshold: float | np.ndarray,
    release: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The module's rules, first match wins, per element of the state arrays (any one shape, e.g. (V, N)):
    (teacher acts, index into REASONS). Settings broadcast against them: scalars, or (V, 1) per variant."""
    rules = (  # (condition, reason, teacher acts)
        (~ok, UNAVAILABLE, False),
        (~in_contract, OUT_OF_CONTRACT, True),
        (disagree, DISAGREEMENT, True),
        (was & (held < min_teacher_steps), HOLDING, True),
        (np.isnan(error), UNKNOWN, was),
        (was & (error < release), BELOW_RELEASE, False),
        (was, HOLDING, True),
        (error > threshold, ABOVE, True),
    )
    # Plain masks rather than np.select, which costs ~10x more at N = 1.
    reason = np.full(was.shape, CONFIDENT)
    teacher = np.zeros(was.shape, bool)
    open_ = np.ones(was.shape, bool)  # no rule has matched yet
    for condition, rule, acts in rules:
        hit = condition & open_
        if hit.any():
            reason[hit] = rule
            teacher[hit] = acts[hit] if isinstance(acts, np.ndarray) else acts
            open_ &= ~hit
    return teacher, reason


class GateConfig(Config):
    """OPD gate: threshold schedule or budget, hysteresis, dwell and safety overrides."""

    threshold_start: float = Field(0.15, gt=0)  # takeover error at step 0, stds (seed 003, 3.4)
    threshold_end: float = Field(0.05, gt=0)  # takeover error from decay_steps on, stds
    decay_steps: int = Field(100_000, ge=0)  # decay length, learner steps (summed over envs); 0 = constant
    schedule: Literal["exponential", "linear", "constant"] = "exponential"  # decay; exponential = geometric
    release_ratio: float = Field(0.7, gt=0, le=1)  # teacher hands back below release_ratio * threshold, 1
    # 3 decisions span the state predictor's 3-step horizon (seed 003, 3.4): the takeover outlives the error.
    min_teacher_steps: int = Field(3, ge=1)  # decisions the teacher keeps control once it took over
    budget: float | None = Field(None, gt=0, lt=1)  # target teacher rate, fraction of decisions; None = off
    # A student that starts untrained needs the teacher often and less as it learns: the budget follows the
    # threshold's schedule from `budget` to `budget_end` over decay_steps.
    budget_end: float | None = Field(None, gt=0, lt=1)  # teacher rate from decay_steps on; None = budget
    budget_window: int = Field(2_000, ge=1)  # recent finite errors (all envs) the quantile is over, errors
    budget_min_samples: int = Field(200, ge=1)  # finite errors seen before the quantile replaces the schedule
    budget_gain: float = Field(0.005, gt=0, le=1)  # calibration step of beta per unit rate error, 1/decision
    disagree_s: float = Field(0.5, ge=0)  # skill disagreement longer than this hands over, s; 0 = off
    max_events: int = Field(10_000, ge=1)  # switch events kept in Gate.events, events

    @field_validator("threshold_end")
    @classmethod
    def _end_not_above_start(cls, v: float, info: ValidationInfo) -> float:
        start = info.data.get("threshold_start")
        if start is not None and v > start:
            raise ValueError(f"threshold_end = {v} must not exceed threshold_start = {start}: it decays")
        return v

    @field_validator("budget_min_samples")
    @classmethod
    def _warmup_fits_window(cls, v: int, info: ValidationInfo) -> int:
        window = info.data.get("budget_window")
        if window is not None and v > window:
            raise ValueError(f"budget_min_samples = {v} must not exceed budget_window = {window}")
        return v

    @field_validator("budget_end")
    @classmethod
    def _budget_end_decays_a_budget(cls, v: float | None, info: ValidationInfo) -> float | None:
        """budget_end is where `budget` decays to: without a budget the gate runs on its threshold and would
        ignore it, and above the budget the teacher's share would grow as the student learns."""
        if v is None or "budget" not in info.data:  # budget itself invalid: its own error says so
            return v
        budget = info.data["budget"]
        if budget is None:
            raise ValueError(f"budget_end = {v} without a budget: set budget (the rate at the start) too")
        if v > budget:
            raise ValueError(f"budget_end = {v} must not exceed budget = {budget}: the budget decays to it")
        return v


@dataclass(frozen=True)
class GateDecision:
    """One decision for N envs."""

    use_teacher: np.ndarray  # (N,) bool: the teacher's action is executed
    reason: tuple[str, ...]  # (N,) why this source acts, one of REASONS
    threshold: float  # switch-to-teacher threshold used, stds
    release: float  # switch-back threshold used, stds
    switched: np.ndarray  # (N,) bool: the source changed at this decision


@dataclass(frozen=True)
class SwitchEvent:
    """A change of source in one env."""

    env: int  # env index
    time_s: float  # the env's `now`, s
    step: int  # learner step
    to_teacher: bool  # True: student -> teacher
    reason: str  # one of REASONS
    error: float  # prediction error at the switch, stds (NaN = unknown)
    threshold: float  # switch-to-teacher threshold in force (release is release_ratio times it), stds


class Gate:
    """Vectorised switch between student and teacher for N envs; numpy only, so trainer and node share it.

    Under several settings (V variants, replay's counterfactual gates) the gate rules on the same evidence
    once per variant, in one vectorised call: variant i decides exactly as a `Gate(configs[i], N)` of its own
    would (tested). Each variant keeps its own source, dwell, disagreement timer and budget calibration; they
    all record the same errors, so one ring (the longest `budget_window`) serves them all, each reading its
    newest `budget_window`. Only a gate of one setting logs (`counts`, `events`, `switches`).
    """

    def __init__(self, cfg: GateConfig | Sequence[GateConfig], num_envs: int) -> None:
        self.configs = [cfg] if isinstance(cfg, GateConfig) else list(cfg)
        if not self.configs:
            raise ValueError("a gate needs at least one GateConfig")
        for c in self.configs:
            if c.budget_window < num_envs:
                raise ValueError(
                    f"budget_window = {c.budget_window} must hold one decision of {num_envs} envs"
                )
        self.cfg, self.num_envs = self.configs[0], num_envs
        shape = (len(self.configs), num_envs)  # (V, N)
        column = lambda name: np.array([[getattr(c, name)] for c in self.configs])  # noqa: E731 (V, 1)
        self._min_teacher_steps, self._release_ratio = column("min_teacher_steps"), column("release_ratio")
        self._disagree_s = column("disagree_s")
        self._teacher = np.zeros(shape, bool)  # source of the last decision
        self._held = np.zeros(shape, np.int64)  # decisions the teacher has acted in a row
        self._disagree_since = np.full(shape, np.nan)  # s; NaN = skills agree
        self._window = Recent(max(c.budget_window for c in self.configs))  # recent finite errors, stds
        self._beta = [c.budget or 0.0 for c in self.configs]  # (V,) threshold = quantile(1 - beta)
        self.events: collections.deque[SwitchEvent] = collections.deque(maxlen=self.cfg.max_events)
        self.counts: collections.Counter[str] = collections.Counter()  # "teacher/holding" -> decisions
        self.switches = 0  # switches in total (`events` keeps the newest `max_events` of them)

    def _recent(self, c: GateConfig) -> np.ndarray:
        """The newest errors that setting `c` reads: its `budget_window` of the shared ring."""
        return self._window.newest(min(len(self._window), c.budget_window))

    def _calibrated(self, c: GateConfig) -> bool:
        return c.budget is not None and min(len(self._window), c.budget_window) >= c.budget_min_samples

    def thresholds(self, step: int) -> np.ndarray:
        """(V,) switch-to-teacher thresholds, stds: each variant's schedule at learner `step`, or its
        calibrated quantile."""
        return self._thresholds(step, [self._calibrated(c) for c in self.configs])

    def _thresholds(self, step: int, calibrated: list[bool]) -> np.ndarray:
        if step < 0:
            raise ValueError(f"step = {step} must be >= 0")
        return np.array([
            quantile(self._recent(c), 1.0 - beta) if cal
            else scheduled(c, c.threshold_start, c.threshold_end, step)
            for c, beta, cal in zip(self.configs, self._beta, calibrated, strict=True)
        ])  # fmt: skip

    def threshold(self, step: int) -> float:
        """The switch-to-teacher threshold of a gate of one setting at learner `step`, stds."""
        return float(self.thresholds(step)[self._single()])

    def budget(self, step: int, c: GateConfig | None = None) -> float | None:
        """Target teacher rate of setting `c` (default: this gate's) at learner `step` (None: no budget)."""
        c = c or self.cfg
        if c.budget is None:
            return None
        return scheduled(c, c.budget, c.budget if c.budget_end is None else c.budget_end, step)

    def decide_variants(
        self,
        step: int,
        now: np.ndarray,
        error: np.ndarray,
        student_skill: np.ndarray,
        teacher_skill: np.ndarray,
        student_in_contract: np.ndarray,
        teacher_ok: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`decide`'s rules under every setting: (teacher acts (V, N), index into REASONS (V, N), the
        switch-to-teacher thresholds (V,)). Records the errors; logs nothing."""
        now, error = self._vec(now, np.float64, "now"), self._vec(error, np.float64, "error")
        return self._rule(step, now, error, student_skill, teacher_skill, student_in_contract, teacher_ok)

    def _rule(
        self,
        step: int,
        now: np.ndarray,
        error: np.ndarray,
        student_skill: np.ndarray,
        teacher_skill: np.ndarray,
        student_in_contract: np.ndarray,
        teacher_ok: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`decide_variants` on `now` and `error` already checked (N,) float64 arrays."""
        student_skill = self._vec(student_skill, np.int64, "student_skill")
        differ = student_skill != self._vec(teacher_skill, np.int64, "teacher_skill")
        in_contract = self._vec(student_in_contract, bool, "student_in_contract")
        ok = self._vec(teacher_ok, bool, "teacher_ok")
        calibrated = [self._calibrated(c) for c in self.configs]
        threshold = self._thresholds(step, calibrated)  # (V,)
        release = self._release_ratio * threshold[:, None]  # (V, 1)
        # the evidence (1, N) broadcasts against the variants' state (V, N)
        now, error, ok, in_contract, differ = (x[None] for x in (now, error, ok, in_contract, differ))
        self._disagree_since, disagree = disagreement(self._disagree_since, now, differ, ok, self._disagree_s)
        was = self._teacher
        teacher, reason = choose(was, self._held, self._min_teacher_steps, ok, in_contract, disagree, error,
                                 threshold[:, None], release)  # fmt: skip
        self._held = np.where(teacher, self._held + 1, 0)
        self._teacher = teacher.copy()  # the decision's array is the caller's
        self._window.push(error[0])  # (N,)
        # ADI: beta follows the budget's rate error among the envs with a teacher
        if any(calibrated) and ok.any():
            for v, c in enumerate(self.configs):
                if calibrated[v]:
                    beta = self._beta[v] + c.budget_gain * (self.budget(step, c) - teacher[v][ok[0]].mean())
                    self._beta[v] = min(max(float(beta), 0.0), 1.0)  # np.clip costs ~10 us on a scalar
        return teacher, reason, threshold

    def decide(
        self,
        step: int,
        now: np.ndarray,
        error: np.ndarray,
        student_skill: np.ndarray,
        teacher_skill: np.ndarray,
        student_in_contract: np.ndarray,
        teacher_ok: np.ndarray,
    ) -> GateDecision:
        """Pick the acting source per env by the module's rules, record the errors and log switches (a gate
        of one setting).

        Args: learner step; per env (N,): time s, prediction error stds (NaN = unknown), student and teacher
        skill ids, whether the student's raw action was within the skill contract, whether a fresh teacher
        action exists.
        """
        v = self._single()
        was = self._teacher[v]
        now, error = self._vec(now, np.float64, "now"), self._vec(error, np.float64, "error")
        teacher, reason, threshold = self._rule(
            step, now, error, student_skill, teacher_skill, student_in_contract, teacher_ok
        )
        teacher, threshold = teacher[v], float(threshold[v])
        switched = teacher != was
        names = tuple(REASONS[r] for r in reason[v])
        self.counts.update(f"{SOURCES[t]}/{n}" for t, n in zip(teacher.tolist(), names, strict=True))
        self.switches += int(switched.sum())
        for e in np.flatnonzero(switched):
            event = SwitchEvent(
                int(e), float(now[e]), step, bool(teacher[e]), names[e], float(error[e]), threshold
            )
            self.events.append(event)
        return GateDecision(teacher, names, threshold, self.cfg.release_ratio * threshold, switched)

    def _single(self) -> int:
        if len(self.configs) != 1:
            raise ValueError(f"this gate holds {len(self.configs)} settings: use decide_variants")
        return 0

    def reset(self, envs: np.ndarray | None = None) -> None:
        """New episode for `envs` (indices or an (N,) bool mask; None = all), under every setting: the
        student acts, timers clear.

        The hand-back is not a switch event: no decision was made. The error window and the calibration
        stay, since they describe the predictor, not the episode.
        """
        idx = slice(None) if envs is None else np.asarray(envs)
        self._teacher[:, idx] = False
        self._held[:, idx] = 0
        self._disagree_since[:, idx] = np.nan

    def _vec(self, x: np.ndarray, dtype: type, name: str) -> np.ndarray:
        """`x` as an (N,) array of `dtype`; a wrong shape is the caller's bug, named."""
        x = np.asarray(x, dtype)
        if x.shape != (self.num_envs,):
            raise ValueError(f"{name} has shape {x.shape}, expected ({self.num_envs},)")
        return x

    def state_dict(self) -> dict:
        """Plain types only, so training checkpoints load with torch.load(weights_only=True). A gate of one
        setting keeps its per-env lists flat (as checkpoints have always held them)."""
        flat = len(self.configs) == 1
        plain = lambda a: (a[0] if flat else a).tolist()  # noqa: E731
        return {
            "teacher": plain(self._teacher),
            "held": plain(self._held),
            "disagree_since": plain(self._disagree_since),
            "window": self._window.values().tolist(),  # oldest first
            "beta": self._beta[0] if flat else list(self._beta),
            "counts": dict(self.counts),
            "switches": self.switches,
            "events": [asdict(e) for e in self.events],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`; the window keeps its newest `budget_window` errors."""
        shape = self._teacher.shape
        teacher = np.asarray(state["teacher"], bool)
        if teacher.size != np.prod(shape):
            raise ValueError(f"state holds {teacher.shape} decisions, this gate {shape} (variants, envs)")
        self._teacher = teacher.reshape(shape)
        self._held = np.asarray(state["held"], np.int64).reshape(shape)
        self._disagree_since = np.asarray(state["disagree_since"], np.float64).reshape(shape)
        self._window.load(state["window"])
        self._beta = [float(b) for b in np.asarray(state["beta"], np.float64).reshape(len(self.configs))]
        self.counts = collections.Counter(state["counts"])
        self.events.clear()
        self.events.extend(SwitchEvent(**e) for e in state["events"])
        self.switches = int(state.get("switches", len(self.events)))  # checkpoints before the counter

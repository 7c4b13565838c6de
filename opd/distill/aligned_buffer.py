"""Timestamp-aligned buffer of Online Policy Distillation: student frames joined to the teacher by stamp.

The teacher acts in simulation on the true, undelayed privileged state; the student's camera/IMU features
arrive ~120 ms late (plus jitter) but carry their measurement time. A student frame must be paired with
the teacher's state at the frame's own stamp, not with whatever arrived alongside it: pairing by arrival
teaches the predictor a state ~120 ms stale. Missing timestamp alignment is the pitfall of real OPD
deployments, so both streams go into this one buffer (one per robot/env stream) and every pairing is by
stamp. The same object serves the lockstep trainer and the live node, whose arrivals are out of order,
late, duplicated or dropped.

Join rule. A student frame stamped t pairs with the held teacher entry nearest t within `tolerance_s`;
a tie goes to the earlier entry, the state the robot was already in when the frame was taken (the later
one may hold the effect of an action the frame cannot show). Future target h (h = 1..horizon) pairs the
same way at t + h * period_s. A frame without a partner at t has no target and is dropped ("unmatched");
missing future targets are masked.

Resolution. A frame is resolved once its join can no longer improve: when the newest teacher stamp is past
t + horizon * period_s + tolerance_s, or `max_wait_s` after the frame arrived (a stalled teacher must not
stall learning). Resolving a frame resolves every older pending frame with it, so samples come out in stamp
order across calls. A student frame stamped at or before the newest resolved one is then rejected as
"late": the windows already handed out were built without it. Teacher entries arriving out of order still
join every frame not yet resolved. The window of a frame is the last `history` accepted frames stamped at
or before it, popped or not; since resolution is in stamp order, these are the `history - 1` newest
resolved frames, which is all the student store keeps beyond the pending ones.

Eviction rule. A teacher entry is needed only by a frame it could join: a pending one, or one still to
arrive, which is stamped after the newest resolved frame (else it is late) and after now - max_age_s (else
it is stale). Entries stamped more than tolerance_s before min(oldest pending stamp, max(newest resolved
stamp, now - max_age_s)) are therefore dropped silently at `pop_ready`, and a teacher entry arriving below
that floor is rejected as "late". Beyond `max_teacher` the oldest entry goes anyway, counted
"evicted_teacher" if a pending frame could still join it; beyond `max_pending` the oldest pending frame is
dropped, counted "overflow" (it stays in later windows). `now` must not decrease within an episode: the
floor relies on it.

Cost per call: bisect on sorted stamps (O(log n)) plus list inserts and front deletions that move at most
max_teacher or max_pending pointers; a sample costs O(history + horizon * log n).

Episodes. `reset(after)` begins a new one after stamp `after`, the newest teacher stamp of the episode that
ended: an arrival stamped at or before it belongs to that episode (its last camera frames arrive ~120 ms
after the new one's first state) and is rejected as "previous_episode", so no frame pairs across a reset.
The new episode's first frame may be stamped before its first teacher state (taken while the robot
settled after the reset), so the cut is at the old episode's last state, not the new one's first.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import Field

from policies.config import Config

_SAME_S = 1e-9  # stamps closer than this are one instant (a re-sent message), s
_Shapes = tuple[tuple[int, ...], ...]  # the array shapes of an entry, in field order


class AlignConfig(Config):
    """Alignment of the student and teacher streams of one robot/env."""

    period_s: float = Field(0.05, gt=0)  # control period: spacing of the predictor horizons, s
    horizon: int = Field(3, ge=1)  # future teacher states per frame, at stamp + h * period_s, h = 1..horizon
    history: int = Field(5, ge=1)  # student frames in a window (the predictor's input), frames
    tolerance_s: float = Field(0.026, ge=0)  # most |student stamp - teacher stamp| of a join, s (~period / 2)
    max_wait_s: float = Field(1.0, gt=0)  # a frame waits this long after arrival for its partners, s
    max_age_s: float = Field(2.0, gt=0)  # arrivals stamped more than this before `now` are "stale", s
    future_tolerance_s: float = Field(0.05, ge=0)  # arrivals stamped over this after `now` are "future", s
    max_teacher: int = Field(512, ge=1)  # teacher entries held; the oldest go first, entries
    max_pending: int = Field(256, ge=1)  # frames awaiting partners; beyond it the oldest is dropped, frames


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value, so entries compare by identity
class TeacherEntry:
    """The teacher at one instant. Shapes: state (Dq,), params (P,), logits (K,), float32."""

    stamp: float  # time of the state, s
    state: np.ndarray  # teacher-side state at `stamp` (the OPD learner's: the predictor's target for it)
    skill: int  # the teacher's skill id
    params: np.ndarray  # the teacher's skill parameters
    logits: np.ndarray  # the teacher's skill logits


@dataclass(frozen=True, eq=False)
class StudentEntry:
    """One student frame. Shape: features (F,) float32."""

    stamp: float  # measurement time of the frame (the image stamp), not its arrival, s
    features: np.ndarray  # the student's per-frame features (e.g. its state embedding)
    payload: Any = None  # opaque to the buffer (e.g. the raw observation); handed back with the sample


@dataclass(frozen=True, eq=False)
class AlignedSample:
    """A resolved student frame with its teacher partners. Shapes in the field comments."""

    stamp: float  # the frame's stamp, s
    window: np.ndarray  # (history, F) features of the last `history` frames up to this one, oldest first
    window_mask: np.ndarray  # (history,) bool, True where a real frame is (zero rows where not)
    # (history,) int64: each window frame's number in this buffer's stream (consecutive windows share
    # frames: a store keeps each frame once by its number), -1 where no frame is
    window_ids: np.ndarray
    payload: Any  # this (the newest) frame's payload
    teacher: TeacherEntry  # the teacher entry nearest `stamp`, |dt| <= tolerance_s
    future: np.ndarray  # (horizon, Dq) teacher states nearest stamp + h * period_s, zeros where none
    future_mask: np.ndarray  # (horizon,) bool, True where a target was found
    # (horizon,) the teacher entries nearest stamp + h * period_s (their actions: what the teacher did when
    # a frame this late is acted on), None where none
    future_teacher: tuple[TeacherEntry | None, ...]


def _frozen(values: np.ndarray) -> np.ndarray:
    """A read-only float32 copy: a caller that reuses its array (a vector env's obs) cannot change it here."""
    out = np.array(values, dtype=np.float32)
    out.flags.writeable = False
    return out


class AlignedBuffer:
    """Teacher entries and student frames of one stream, joined by stamp. Not thread-safe: lock outside."""

    def __init__(self, cfg: AlignConfig) -> None:
        self.cfg = cfg
        self.counts: Counter[str] = Counter()  # rejections and drops by reason, kept across episodes
        self._retired = 0  # frames ever retired: the next one's number in the stream, kept across episodes
        self.reset()

    def reset(self, after: float = -math.inf) -> None:
        """New episode after stamp `after`: every entry, the resolved frontier and the learned widths go;
        `counts` stay."""
        self._after = after  # arrivals stamped at or before it are the last episode's, s
        self._t_stamps: list[float] = []  # held teacher stamps, sorted
        self._teacher: list[TeacherEntry] = []  # parallel to _t_stamps
        self._p_stamps: list[float] = []  # pending student stamps, sorted
        self._pending: list[tuple[StudentEntry, float]] = []  # parallel: (frame, arrival + max_wait_s)
        self._deadlines: list[tuple[float, float]] = []  # min-heap of (arrival + max_wait_s, stamp)
        # newest resolved, (number, (F,) features) each
        self._recent: deque[tuple[int, np.ndarray]] = deque(maxlen=self.cfg.history - 1)
        self._frontier = -math.inf  # stamp of the newest resolved frame, s
        self._floor = -math.inf  # teacher entries stamped below it can join no frame, s
        self._t_shapes: _Shapes | None = None  # (Dq,), (P,), (K,) of the first entry
        self._s_shapes: _Shapes | None = None  # ((F,),) of the first frame

    @property
    def sizes(self) -> dict[str, int]:
        """Entries held per store, for diagnostics and the memory bounds."""
        return {"teacher": len(self._t_stamps), "pending": len(self._p_stamps),
                "recent": len(self._recent), "deadlines": len(self._deadlines)}  # fmt: skip

    def add_teacher(self, entry: TeacherEntry, now: float) -> bool:
        """Hold a teacher entry, placed by stamp. False when rejected; the reason is counted."""
        stamp = float(entry.stamp)
        arrays = tuple(_frozen(a) for a in (entry.state, entry.params, entry.logits))
        reason = self._invalid(stamp, arrays, self._t_shapes, self._t_stamps, now)
        if reason is None and stamp < self._floor:
            reason = "late"  # every frame it could join is resolved
        elif reason is None and len(self._t_stamps) >= self.cfg.max_teacher and stamp < self._t_stamps[0]:
            reason = "full"  # it would be the one evicted
        if reason is not None:
            self.counts[reason] += 1
            return False
        self._t_shapes = tuple(a.shape for a in arrays)
        i = bisect.bisect(self._t_stamps, stamp)
        self._t_stamps.insert(i, stamp)
        state, params, logits = arrays  # (Dq,), (P,), (K,)
        self._teacher.insert(i, replace(entry, stamp=stamp, state=state, params=params, logits=logits))
        if len(self._t_stamps) > self.cfg.max_teacher:
            evicted = self._t_stamps.pop(0)
            self._teacher.pop(0)
            if self._p_stamps and evicted >= self._p_stamps[0] - self.cfg.tolerance_s:
                self.counts["evicted_teacher"] += 1
        return True

    def add_student(self, entry: StudentEntry, now: float) -> bool:
        """Hold a student frame by stamp until it resolves. False when rejected; the reason is counted."""
        stamp = float(entry.stamp)
        features = _frozen(entry.features)  # (F,)
        reason = self._invalid(stamp, (features,), self._s_shapes, self._p_stamps, now)
        if reason is None and stamp <= self._frontier + _SAME_S:
            reason = "duplicate" if stamp >= self._frontier - _SAME_S else "late"
        if reason is not None:
            self.counts[reason] += 1
            return False
        self._s_shapes = (features.shape,)
        deadline = now + self.cfg.max_wait_s
        i = bisect.bisect(self._p_stamps, stamp)
        self._p_stamps.insert(i, stamp)
        self._pending.insert(i, (replace(entry, stamp=stamp, features=features), deadline))
        heapq.heappush(self._deadlines, (deadline, stamp))
        if len(self._p_stamps) > self.cfg.max_pending:
            self.counts["overflow"] += 1
            self._p_stamps.pop(0)
            self._retire(self._pending.pop(0)[0])
        if len(self._deadlines) > 2 * self.cfg.max_pending:
            # Deadlines of resolved frames leave the heap lazily; rebuild when they pile up (amortised O(1)).
            self._deadlines = [(d, e.stamp) for e, d in self._pending]
            heapq.heapify(self._deadlines)
        return True

    @property
    def newest_teacher(self) -> float:
        """Stamp of the newest teacher entry held, s; NaN when none (what a decision could see)."""
        return self._t_stamps[-1] if self._t_stamps else math.nan

    def teacher_at(self, stamp: float) -> TeacherEntry | None:
        """The held teacher entry nearest `stamp` within tolerance_s (ties: the earlier), else None."""
        return self._nearest(float(stamp))

    def pop_ready(self, now: float) -> list[AlignedSample]:
        """Resolve every frame whose join can no longer improve; the matched ones, in stamp order."""
        k = 0  # pending frames [0, k) resolve
        if self._t_stamps:
            # The teacher stream is past every target of frames stamped below this.
            span = self.cfg.horizon * self.cfg.period_s + self.cfg.tolerance_s
            k = bisect.bisect_left(self._p_stamps, self._t_stamps[-1] - span)
        timed_out = -math.inf  # newest stamp whose wait is over (resolved frames' ones lie below the pending)
        while self._deadlines and self._deadlines[0][0] <= now:
            timed_out = max(timed_out, heapq.heappop(self._deadlines)[1])
        k = max(k, bisect.bisect_right(self._p_stamps, timed_out))
        samples = [s for s in (self._resolve(e) for e, _ in self._pending[:k]) if s is not None]
        del self._p_stamps[:k], self._pending[:k]
        self._prune(now)
        return samples

    def refusal(self, stamp: float, now: float) -> str | None:
        """Why an arrival stamped `stamp` at `now` is rejected whatever it holds ("nonfinite", "future",
        "stale", "previous_episode"), or None. Lets a caller refuse a message before acting on its other
        fields (an episode counter): the caller counts it in `counts`."""
        if not math.isfinite(stamp):
            return "nonfinite"
        if stamp > now + self.cfg.future_tolerance_s:
            return "future"
        if stamp < now - self.cfg.max_age_s:
            return "stale"
        if stamp <= self._after + _SAME_S:
            return "previous_episode"
        return None

    def _invalid(
        self,
        stamp: float,
        arrays: tuple[np.ndarray, ...],
        shapes: _Shapes | None,
        held: list[float],
        now: float,
    ) -> str | None:
        """The reason an arrival is rejected by the checks both streams share, or None."""
        if not math.isfinite(stamp) or not all(np.isfinite(a).all() for a in arrays):
            return "nonfinite"
        if any(a.ndim != 1 for a in arrays) or shapes not in (None, tuple(a.shape for a in arrays)):
            return "shape"
        if (reason := self.refusal(stamp, now)) is not None:
            return reason
        i = bisect.bisect_left(held, stamp - _SAME_S)
        if i < len(held) and held[i] <= stamp + _SAME_S:
            return "duplicate"  # the first one wins
        return None

    def _nearest(self, stamp: float) -> TeacherEntry | None:
        """The held teacher entry nearest `stamp` within tolerance_s; a tie goes to the earlier."""
        i = bisect.bisect_left(self._t_stamps, stamp)
        near = [j for j in (i - 1, i) if 0 <= j < len(self._t_stamps)
                and abs(self._t_stamps[j] - stamp) <= self.cfg.tolerance_s]  # fmt: skip
        if not near:
            return None
        return self._teacher[min(near, key=lambda j: abs(self._t_stamps[j] - stamp))]  # min keeps the earlier

    def _retire(self, frame: StudentEntry) -> None:
        """Move a resolved or dropped frame to the window history and the frontier."""
        self._recent.append((self._retired, frame.features))
        self._retired += 1
        self._frontier = frame.stamp

    def _resolve(self, frame: StudentEntry) -> AlignedSample | None:
        """Join the oldest pending frame; None, counted "unmatched", when no teacher entry is near it."""
        rows = [*self._recent, (self._retired, frame.features)]  # frames stamped up to this one, oldest first
        self._retire(frame)
        teacher = self._nearest(frame.stamp)
        if teacher is None:
            self.counts["unmatched"] += 1
            return None
        h, n = self.cfg.history, len(rows)
        window = np.zeros((h, frame.features.shape[0]), np.float32)  # (history, F)
        window[h - n :] = np.stack([f for _, f in rows])  # (n, F) at the end: newest last, zero rows before
        ids = np.full(h, -1, np.int64)  # a short episode
        ids[h - n :] = [i for i, _ in rows]
        targets = [self._nearest(frame.stamp + i * self.cfg.period_s) for i in range(1, self.cfg.horizon + 1)]
        future = np.zeros((self.cfg.horizon, teacher.state.shape[0]), np.float32)  # (horizon, Dq)
        for i, target in enumerate(targets):
            if target is not None:
                future[i] = target.state
        return AlignedSample(stamp=frame.stamp, window=window, window_mask=np.arange(h) >= h - n,
                             window_ids=ids, payload=frame.payload, teacher=teacher, future=future,
                             future_mask=np.array([t is not None for t in targets]),
                             future_teacher=tuple(targets))  # fmt: skip

    def _prune(self, now: float) -> None:
        """Drop the teacher entries no pending or future frame can join (the eviction rule above)."""
        lowest = max(self._frontier, now - self.cfg.max_age_s)  # the oldest stamp a new frame may carry
        if self._p_stamps:
            lowest = min(lowest, self._p_stamps[0])
        self._floor = lowest - self.cfg.tolerance_s
        k = bisect.bisect_left(self._t_stamps, self._floor)
        del self._t_stamps[:k], self._teacher[:k]

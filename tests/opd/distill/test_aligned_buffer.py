"""OPD aligned buffer: every sample joins the right frames and teacher states, whatever the arrival order."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opd.distill.aligned_buffer import AlignConfig, AlignedBuffer, AlignedSample, StudentEntry, TeacherEntry
from policies.config import ConfigError

PERIOD = 0.05  # teacher (control) period, the config's default period_s, s
CAMERA = 1 / 15  # student frame period, s
LATENCY = 0.12  # nominal student latency, s


def teacher(stamp: float, skill: int = 0, dq: int = 3) -> TeacherEntry:
    """Every state channel is the stamp, so a target shows which entry it came from."""
    f = np.float32
    return TeacherEntry(stamp, np.full(dq, stamp, f), skill, np.zeros(2, f), np.zeros(4, f))


def student(stamp: float, payload: object = None, width: int = 2) -> StudentEntry:
    """Feature 0 is the stamp, so a window shows which frames it holds."""
    return StudentEntry(stamp, np.array([stamp, 1.0, 7.0][:width], np.float32), payload)


def nearest(stamps: list[float], t: float, tol: float) -> float | None:
    """Brute-force reference of the join: the nearest stamp within tol, ties to the earlier."""
    best = min(stamps, key=lambda s: (abs(s - t), s), default=None)
    return best if best is not None and abs(best - t) <= tol else None


def expected_window(frames: list[float], t: float, history: int) -> tuple[np.ndarray, np.ndarray]:
    """The last `history` frames stamped <= t, oldest first, zero rows in front. Shapes: (H, 2), (H,)."""
    rows = sorted(s for s in frames if s <= t)[-history:]
    window = np.zeros((history, 2), np.float32)
    window[history - len(rows) :] = [student(s).features for s in rows]
    return window, np.arange(history) >= history - len(rows)


def check_sample(out: AlignedSample, t: float, teachers: list[float], frames: list[float], cfg: AlignConfig
                 ) -> None:  # fmt: skip
    """The sample of frame t is the join of t against the teacher stamps and frames given."""
    assert out.stamp == t and out.payload == (0, t)  # the first copy of a duplicated frame wins
    assert out.teacher.stamp == nearest(teachers, t, cfg.tolerance_s)
    assert out.teacher.skill == 0  # so does the first copy of a duplicated teacher entry
    window, mask = expected_window(frames, t, cfg.history)
    np.testing.assert_array_equal(out.window, window)
    np.testing.assert_array_equal(out.window_mask, mask)
    for i in range(cfg.horizon):
        target = nearest(teachers, t + (i + 1) * cfg.period_s, cfg.tolerance_s)
        assert out.future_mask[i] == (target is not None)
        np.testing.assert_array_equal(out.future[i], teacher(target).state if target is not None else 0.0)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    jitter=st.floats(0.0, 0.1),  # student latency LATENCY +- jitter: reorders frames above 1 / 30 s
    teacher_jitter=st.floats(0.0, 0.15),  # teacher latency 0..teacher_jitter: reorders above PERIOD
    drop=st.floats(0.0, 0.3),
    dup=st.floats(0.0, 0.3),
    pop_every=st.integers(1, 8),
    history=st.integers(1, 6),
    horizon=st.integers(1, 4),
)
def test_samples_are_the_stamp_join_of_what_was_delivered_before_them(
    seed: int, jitter: float, teacher_jitter: float, drop: float, dup: float, pop_every: int, history: int,
    horizon: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    # Nothing is old enough to be stale or wait out max_wait_s before the final pop; nothing overflows.
    cfg = AlignConfig(history=history, horizon=horizon, max_wait_s=1e3, max_age_s=1e3,
                      max_teacher=100_000, max_pending=100_000)  # fmt: skip
    span = cfg.horizon * cfg.period_s + cfg.tolerance_s
    events: list[tuple[float, int, str, float, int]] = []  # (arrival, order, stream, stamp, copy)
    for stream, stamps in (("teacher", np.arange(61) * PERIOD), ("student", np.arange(46) * CAMERA)):
        for stamp in stamps.tolist():
            if rng.random() < drop:
                continue
            if stream == "teacher":
                late = rng.uniform(0, teacher_jitter)
            else:
                late = LATENCY + rng.uniform(-jitter, jitter)
            events.append((stamp + late, len(events), stream, stamp, 0))
            if rng.random() < dup:  # a re-sent message, arriving after the original
                events.append((stamp + late + rng.uniform(0, 0.3), len(events), stream, stamp, 1))
    events.sort()

    buf = AlignedBuffer(cfg)
    teachers: list[float] = []  # accepted teacher stamps, in arrival order
    frames: list[float] = []  # accepted student stamps
    pending: list[float] = []  # accepted frames not yet resolved (the reference's own bookkeeping)
    frontier, unmatched, pops = -math.inf, 0, 0
    resolved_in: dict[float, int] = {}  # frame stamp -> index of the pop that resolved it
    refused: list[tuple[float, int]] = []  # (teacher stamp, pops before it) of fresh teacher entries refused
    out: list[AlignedSample] = []

    def pop(now: float, final: bool) -> None:
        nonlocal frontier, unmatched, pops
        got = buf.pop_ready(now)
        # Reference: a frame resolves once the newest teacher stamp is past its last target (or at the end).
        ready = sorted(s for s in pending if final or (teachers and s < max(teachers) - span))
        matched = [t for t in ready if nearest(teachers, t, cfg.tolerance_s) is not None]
        assert [s.stamp for s in got] == matched
        for sample in got:
            check_sample(sample, sample.stamp, teachers, frames, cfg)
        unmatched += len(ready) - len(matched)
        for t in ready:
            pending.remove(t)
            resolved_in[t] = pops
        frontier = max([frontier, *ready])
        out.extend(got)
        pops += 1

    for n, (now, _, stream, stamp, copy) in enumerate(events):
        if stream == "teacher":
            accepted = buf.add_teacher(replace(teacher(stamp), skill=copy), now)
            if stamp in teachers:
                assert not accepted  # a duplicate never replaces the first copy
            elif accepted:
                teachers.append(stamp)
            else:
                refused.append((stamp, pops))
        else:
            accepted = buf.add_student(student(stamp, (copy, stamp)), now)
            # A frame is held unless it is a duplicate or older than a resolved frame (its windows are out).
            assert accepted == (stamp not in frames and stamp > frontier)
            if accepted:
                frames.append(stamp)
                pending.append(stamp)
        if n % pop_every == 0:
            pop(now, final=False)
    pop(1e4, final=True)

    stamps = [s.stamp for s in out]
    assert stamps == sorted(set(stamps))  # each frame at most once, in stamp order across calls
    assert not pending and buf.sizes["pending"] == 0
    assert buf.counts["unmatched"] == unmatched
    assert set(buf.counts) <= {"duplicate", "late", "unmatched"}
    # A refused teacher entry could have joined no frame resolved after it arrived.
    for r, before in refused:
        for t, i in resolved_in.items():
            if i >= before:
                assert all(abs(r - (t + h * cfg.period_s)) > cfg.tolerance_s for h in range(cfg.horizon + 1))
    # With the teacher stream in stamp order no frame resolves early: each joins the whole episode.
    teacher_arrivals = [stamp for _, _, stream, stamp, copy in events if stream == "teacher" and copy == 0]
    if teacher_arrivals == sorted(teacher_arrivals):
        assert stamps == [t for t in sorted(frames) if nearest(teachers, t, cfg.tolerance_s) is not None]
        for sample in out:
            check_sample(sample, sample.stamp, teachers, frames, cfg)


def test_bad_arrivals_are_rejected_counted_by_reason_and_never_joined() -> None:
    buf = AlignedBuffer(AlignConfig())  # tolerance 0.026 s, max_age 2 s, future_tolerance 0.05 s
    now = 10.0
    assert buf.add_teacher(teacher(9.9), now) and buf.add_student(student(9.9, "first"), now)
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    bad_teachers = [
        ("nonfinite", teacher(math.nan)),
        ("nonfinite", replace(teacher(9.95), state=np.array([9.95, nan, 0], np.float32))),
        ("nonfinite", replace(teacher(9.95), params=np.array([inf, 0], np.float32))),
        ("nonfinite", replace(teacher(9.95), logits=np.array([0, 0, 0, nan], np.float32))),
        ("duplicate", teacher(9.9, skill=1)),
        ("duplicate", teacher(9.9 + 1e-10, skill=1)),
        ("future", teacher(10.06)),
        ("stale", teacher(7.9)),
        ("shape", teacher(9.95, dq=4)),
        ("shape", replace(teacher(9.95), state=np.full((3, 1), 9.95, np.float32))),
    ]
    bad_students = [
        ("nonfinite", student(math.inf)),
        ("nonfinite", replace(student(9.95), features=np.array([9.95, nan], np.float32))),
        ("duplicate", student(9.9, "second")),
        ("future", student(10.06)),
        ("stale", student(7.9)),
        ("shape", student(9.95, width=3)),
    ]
    for _, entry in bad_teachers:
        assert not buf.add_teacher(entry, now)
    for _, entry in bad_students:
        assert not buf.add_student(entry, now)
    assert buf.counts == Counter(reason for reason, _ in bad_teachers + bad_students)

    for stamp in (10.0, 10.05, 10.1):
        assert buf.add_teacher(teacher(stamp), stamp)
    [sample] = buf.pop_ready(10.1)  # the teacher is past 9.9 + 3 * 0.05 + 0.026
    assert sample.payload == "first" and sample.teacher.skill == 0
    assert sample.window_mask.tolist() == [False] * 4 + [True]  # the 9.95 frames were all rejected
    assert sample.future_mask.tolist() == [False, True, True]  # so were the 9.95 teacher entries
    assert sample.future[1:, 0].tolist() == pytest.approx([10.0, 10.05])
    assert not buf.add_student(student(9.85), 10.1)  # older than a resolved frame: its window is out
    assert not buf.add_student(student(9.9), 10.1)
    assert not buf.add_teacher(teacher(9.87), 10.1)  # no frame it could join is left: 9.9 - 9.87 > 0.026
    assert buf.counts["late"] == 2 and buf.counts["duplicate"] == 4


def test_a_frame_without_its_teacher_resolves_after_max_wait() -> None:
    buf = AlignedBuffer(AlignConfig(max_wait_s=1.0))
    assert buf.add_student(student(5.0), now=5.125)  # binary-exact times: arrival + max_wait_s is exact
    assert buf.pop_ready(6.12) == [] and buf.sizes["pending"] == 1  # still waiting
    assert buf.pop_ready(6.125) == [] and buf.sizes["pending"] == 0
    assert buf.counts["unmatched"] == 1

    # The teacher at the stamp came, then stalled: the sample comes out with its targets masked.
    assert buf.add_teacher(teacher(7.0), now=7.0) and buf.add_student(student(7.0), now=7.125)
    assert buf.pop_ready(8.12) == []
    [sample] = buf.pop_ready(8.125)
    assert sample.teacher.stamp == 7.0 and not sample.future_mask.any() and not sample.future.any()
    assert buf.counts["unmatched"] == 1


def test_a_timed_out_frame_resolves_the_older_pending_ones_with_it_in_stamp_order() -> None:
    buf = AlignedBuffer(AlignConfig(max_wait_s=1.0))
    for stamp in (2.9, 3.0, 3.1):
        buf.add_teacher(teacher(stamp), stamp)
    assert buf.add_student(student(3.0), now=3.1)
    assert buf.add_student(student(2.9), now=3.5)  # out of order, arrived later: waits less
    samples = buf.pop_ready(4.1)  # 3.0's wait is over, 2.9's is not
    assert [s.stamp for s in samples] == [2.9, 3.0]
    assert samples[1].window[-2:, 0].tolist() == pytest.approx([2.9, 3.0])


def test_a_teacher_entry_arriving_out_of_order_joins_the_pending_frame() -> None:
    buf = AlignedBuffer(AlignConfig())
    for stamp in (0.9, 0.95, 1.05):  # 1.0 is delayed
        buf.add_teacher(teacher(stamp), stamp)
    assert buf.add_student(student(1.0), now=1.12)
    assert buf.pop_ready(1.12) == []
    assert buf.add_teacher(teacher(1.0), now=1.13)
    for stamp in (1.1, 1.15, 1.2):
        buf.add_teacher(teacher(stamp), stamp)
    [sample] = buf.pop_ready(1.2)
    assert sample.teacher.stamp == 1.0
    assert sample.future[:, 0].tolist() == pytest.approx([1.05, 1.1, 1.15])


def test_teacher_at_is_the_nearest_entry_within_tolerance() -> None:
    # Binary-exact stamps and tolerance (3/128 s), so that ties and edges are exact.
    buf = AlignedBuffer(AlignConfig(tolerance_s=0.0234375))
    buf.add_teacher(teacher(1.0), 1.0)
    buf.add_teacher(teacher(1.046875), 1.05)
    assert buf.teacher_at(1.01).stamp == 1.0
    assert buf.teacher_at(1.0234375).stamp == 1.0  # the midpoint: a tie, which goes to the earlier
    assert buf.teacher_at(1.04).stamp == 1.046875
    assert buf.teacher_at(0.9765625).stamp == 1.0  # exactly tolerance_s away still joins
    assert buf.teacher_at(0.97) is None and buf.teacher_at(1.08) is None


def test_a_frame_that_ages_while_it_waits_keeps_its_teacher() -> None:
    buf = AlignedBuffer(AlignConfig(max_age_s=2.0, max_wait_s=1.0))
    assert buf.add_teacher(teacher(0.99), 1.0)
    assert buf.add_student(student(1.0), now=2.9)  # 1.9 s late: not yet stale
    assert buf.pop_ready(3.2) == []  # its stamp is now older than now - max_age_s: the teacher must stay
    [sample] = buf.pop_ready(3.9)
    assert sample.teacher.stamp == 0.99


def test_memory_stays_bounded_over_long_streams() -> None:
    cfg = AlignConfig(max_teacher=64, max_pending=16, history=5, max_age_s=5.0)  # 64 entries span 3.2 s
    bounds = {"teacher": cfg.max_teacher, "pending": cfg.max_pending, "recent": cfg.history - 1,
              "deadlines": 2 * cfg.max_pending}  # fmt: skip

    def within() -> bool:
        return all(buf.sizes[k] <= v for k, v in bounds.items())

    buf = AlignedBuffer(cfg)  # a healthy stream, popped every control step: nothing lost
    samples = 0
    for k in range(10_000):
        now = k * PERIOD
        buf.add_teacher(teacher(now), now)
        frame = round((now - LATENCY) / CAMERA)
        if frame >= 0 and abs(frame * CAMERA + LATENCY - now) < PERIOD / 2:
            buf.add_student(student(frame * CAMERA), now)
        samples += len(buf.pop_ready(now))
        assert within() and buf.sizes["teacher"] <= 10  # old teacher entries are pruned, not just capped
    assert samples > 6_000 and not buf.counts

    buf = AlignedBuffer(cfg)  # the teacher stalled and nobody pops: pending frames overflow
    for k in range(10_000):
        assert buf.add_student(student(k * CAMERA), k * CAMERA)
        assert within()
    assert buf.counts == Counter(overflow=10_000 - cfg.max_pending)

    buf = AlignedBuffer(cfg)  # no student: teacher entries are capped, with nothing pending to lose
    for k in range(10_000):
        assert buf.add_teacher(teacher(k * PERIOD), k * PERIOD)
        assert within()
    assert not buf.add_teacher(teacher(9_930 * PERIOD), 10_000 * PERIOD)  # it would be evicted at once
    assert buf.counts == Counter(full=1)


def test_overflowed_frames_stay_in_later_windows() -> None:
    buf = AlignedBuffer(AlignConfig(max_pending=3, history=5))
    for k in range(35):
        buf.add_teacher(teacher(1.0 + k * PERIOD), 1.7)
    for k in range(5):
        assert buf.add_student(student(1.0 + k * CAMERA), 1.7)
    assert buf.counts["overflow"] == 2
    samples = buf.pop_ready(1.7)
    assert [s.stamp for s in samples] == pytest.approx([1.0 + k * CAMERA for k in (2, 3, 4)])
    assert samples[0].window_mask.tolist() == [False, False, True, True, True]
    assert samples[0].window[2:, 0].tolist() == pytest.approx([1.0 + k * CAMERA for k in (0, 1, 2)])


def test_evicting_a_teacher_entry_a_pending_frame_needs_is_counted() -> None:
    buf = AlignedBuffer(AlignConfig(max_teacher=4))
    assert buf.add_student(student(1.0), now=1.12)
    for k in range(6):  # 1.0 and 1.05 are evicted while the frame waits
        buf.add_teacher(teacher(1.0 + k * PERIOD), 1.0 + k * PERIOD)
    assert buf.counts["evicted_teacher"] == 2
    assert buf.pop_ready(1.25) == [] and buf.counts["unmatched"] == 1


def test_reset_clears_the_episode_but_keeps_the_counts() -> None:
    buf = AlignedBuffer(AlignConfig())
    for stamp in (5.0, 5.05, 5.1, 5.15, 5.2):
        buf.add_teacher(teacher(stamp), stamp)
    buf.add_student(student(5.0), 5.12)
    assert not buf.add_student(student(math.nan), 5.2)
    assert len(buf.pop_ready(5.2)) == 1
    buf.add_student(student(5.1), 5.22)
    buf.reset()
    assert not any(buf.sizes.values()) and buf.counts == Counter(nonfinite=1)
    assert buf.teacher_at(5.0) is None
    # The clock restarted: an earlier stamp is neither late nor a duplicate, and the widths may change.
    assert buf.add_teacher(teacher(0.0, dq=5), 0.0)
    assert buf.add_student(student(0.0, width=3), 0.12)
    [sample] = buf.pop_ready(1.2)
    assert sample.window.shape == (5, 3) and sample.window_mask.tolist() == [False] * 4 + [True]
    assert sample.teacher.stamp == 0.0 and sample.future.shape == (3, 5)


def test_held_entries_are_copies_the_caller_cannot_change() -> None:
    buf = AlignedBuffer(AlignConfig())
    features = np.array([1.0, 1.0], np.float32)
    state = np.full(3, 1.0, np.float32)
    buf.add_teacher(replace(teacher(1.0), state=state), 1.0)
    buf.add_student(StudentEntry(1.0, features), 1.12)
    features[:] = state[:] = -1.0  # e.g. a vector env writing its next observation in place
    [sample] = buf.pop_ready(2.2)
    assert sample.window[-1].tolist() == [1.0, 1.0] and sample.teacher.state.tolist() == [1.0] * 3
    with pytest.raises(ValueError):
        sample.teacher.state[0] = 0.0


def test_config_rejects_bad_values_by_name() -> None:
    with pytest.raises(ConfigError, match="horizon"):
        AlignConfig.from_dict({"horizon": 0})
    with pytest.raises(ConfigError, match="tolerance"):
        AlignConfig.from_dict({"tolerance": 0.02})  # unknown key: the field is tolerance_s

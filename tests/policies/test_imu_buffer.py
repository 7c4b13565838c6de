"""IMU ring buffer: the window ending at an image stamp, whatever the samples' order and duplication."""
# `now` in these tests is the newest stamp pushed so far plus a little transport delay.

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.imu_buffer import ImuBuffer, MatchStatus

PERIOD = 0.005  # 200 Hz
T0 = 1000.0


def sample(i: int) -> np.ndarray:
    """Sample i carries its own index in channel 0, so a window shows which samples it holds."""
    return np.array([i, 0, 9.81, 0, 0, 0], dtype=np.float32)


NOW = T0 + 1000 * PERIOD  # a clock ahead of every sample of the tests below


def filled(n: int, window: int = 4, capacity: int = 64, tol: float = 0.006) -> ImuBuffer:
    buf = ImuBuffer(window, capacity, tol, period_s=PERIOD)
    for i in range(n):
        assert buf.push(T0 + i * PERIOD, sample(i), NOW) is None
    return buf


def test_window_is_the_last_samples_at_or_before_the_image_stamp() -> None:
    """Review defect: the closest sample was taken, so a quarter of windows ended after the exposure."""
    buf = filled(20)
    m = buf.match(T0 + 10 * PERIOD + 0.001)  # 1 ms after sample 10
    assert m.status is MatchStatus.OK
    assert m.window[:, 0].tolist() == [7, 8, 9, 10]  # oldest first
    assert m.window.dtype == np.float32 and m.window.shape == (4, 6)
    assert m.skew_s == pytest.approx(-0.001) and m.gap_s == 0.0
    later = buf.match(T0 + 10 * PERIOD + 0.004)  # 1 ms before sample 11: still 11 is after the exposure
    assert later.window[-1, 0] == 10 and later.skew_s == pytest.approx(-0.004)
    exact = buf.match(T0 + 11 * PERIOD)
    assert exact.window[-1, 0] == 11 and exact.skew_s == 0.0


def test_a_window_with_a_gap_is_flagged() -> None:
    """Review defect: a window spanning 765 ms instead of 495 ms went to the model silently."""
    buf = ImuBuffer(4, 64, 0.006, period_s=PERIOD)
    for i in (0, 1, 2, 3, 6, 7, 8):  # samples 4 and 5 lost
        buf.push(T0 + i * PERIOD, sample(i), NOW)
    m = buf.match(T0 + 7 * PERIOD)
    assert m.status is MatchStatus.OK
    assert m.window[:, 0].tolist() == [2, 3, 6, 7]
    assert m.gap_s == pytest.approx(3 * PERIOD) and m.span_s == pytest.approx(5 * PERIOD)
    assert buf.match(T0 + 8 * PERIOD).gap_s == pytest.approx(3 * PERIOD)
    half_rate = ImuBuffer(4, 64, 0.02, period_s=PERIOD)
    for i in range(0, 20, 2):
        half_rate.push(T0 + i * PERIOD, sample(i), NOW)
    assert half_rate.match(T0 + 18 * PERIOD).gap_s == pytest.approx(2 * PERIOD)
    jitter = ImuBuffer(4, 64, 0.02, period_s=PERIOD)
    for i in range(10):
        jitter.push(T0 + i * PERIOD + (0.001 if i % 2 else 0.0), sample(i), NOW)
    assert jitter.match(T0 + 9 * PERIOD + 0.001).gap_s == 0.0  # 1.2 periods is jitter, not a gap


def test_waits_while_the_imu_has_not_reached_the_image_stamp() -> None:
    buf = filled(10)
    assert buf.match(T0 + 9 * PERIOD + 0.001).status is MatchStatus.WAIT  # a later sample may still come
    assert ImuBuffer(4, 8, 0.01).match(T0).status is MatchStatus.WAIT  # nothing yet
    buf.push(T0 + 10 * PERIOD, sample(10), NOW)
    assert buf.match(T0 + 9 * PERIOD + 0.001).window[-1, 0] == 9


def test_misses_when_no_sample_is_within_tolerance_or_the_window_is_short() -> None:
    buf = ImuBuffer(4, 64, 0.003)
    for i in (0, 1, 2, 3, 10):  # a gap of 35 ms between samples 3 and 10
        buf.push(T0 + i * PERIOD, sample(i), NOW)
    gap = buf.match(T0 + 6 * PERIOD)
    assert gap.status is MatchStatus.MISS and "within" in gap.reason
    short = filled(3).match(T0 + PERIOD)
    assert short.status is MatchStatus.MISS and "need 4" in short.reason


def test_duplicates_stale_and_invalid_samples_are_rejected() -> None:
    buf = filled(8, window=2, capacity=8)
    assert buf.push(T0 + 3 * PERIOD, sample(99), NOW) == "duplicate"
    assert buf.push(T0 - PERIOD, sample(99), NOW) == "stale"  # full buffer, older than all it keeps
    assert buf.push(0.0, sample(99), NOW) == "stamp"
    assert buf.push(T0 + 20 * PERIOD, np.array([np.nan, 0, 0, 0, 0, 0]), NOW) == "nonfinite"
    assert buf.push(T0 + 20 * PERIOD, np.zeros(5), NOW) == "shape"
    assert len(buf) == 8 and buf.oldest == T0


def test_one_bad_stamp_never_costs_the_good_history() -> None:
    """Review defect: a sample stamped > 1 s ahead was accepted, and the good samples after it cleared the
    buffer (0.5 s without a usable window). Future stamps are refused; a far-past one is refused too."""
    now = T0 + 8 * PERIOD
    buf = ImuBuffer(4, 64, 0.006, period_s=PERIOD)
    for i in range(8):
        assert buf.push(T0 + i * PERIOD, sample(i), now) is None
    assert buf.push(now + 2.0, sample(99), now) == "future"
    assert buf.push(now + 0.06, sample(99), now) == "future"  # beyond future_tolerance_s (50 ms)
    assert buf.push(T0 - 5.0, sample(99), now) == "stale"  # far behind the newest: refused, not a reset
    assert buf.push(T0 + 8 * PERIOD, sample(8), now) is None
    assert len(buf) == 9 and buf.resets == 0
    assert buf.match(T0 + 8 * PERIOD).window[:, 0].tolist() == [5, 6, 7, 8]


def test_a_clock_restart_clears_the_buffer() -> None:
    """Under use_sim_time a simulation reset or a bag loop sends the clock itself back: start afresh."""
    buf = filled(8)
    restarted_now = 5.01
    assert buf.push(5.0, sample(0), restarted_now) is None
    assert len(buf) == 1 and buf.resets == 1 and buf.newest == 5.0


def test_capacity_bounds_memory_and_keeps_the_newest() -> None:
    buf = filled(1000, window=4, capacity=16)
    assert len(buf) == 16 and buf.oldest == pytest.approx(T0 + 984 * PERIOD)
    assert buf.match(T0 + 999 * PERIOD).window[:, 0].tolist() == [996, 997, 998, 999]


def test_constructor_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ImuBuffer(window=10, capacity=5, tolerance_s=0.01)
    with pytest.raises(ValueError, match="tolerance_s"):
        ImuBuffer(window=2, capacity=5, tolerance_s=-1.0)


@settings(max_examples=100, deadline=None)
@given(
    order=st.permutations(list(range(40))),
    duplicates=st.lists(st.integers(0, 39), max_size=10),
    image=st.integers(10, 38),  # sample image + 1 exists: the IMU has passed the image stamp
)
def test_any_arrival_order_gives_the_window_of_in_order_arrival(
    order: list[int], duplicates: list[int], image: int
) -> None:
    """Reordered and duplicated transport must not change what the encoder sees."""
    buf = ImuBuffer(window=8, capacity=64, tolerance_s=0.002, period_s=PERIOD)
    for i in order + duplicates:
        why = buf.push(T0 + i * PERIOD, sample(i), NOW)
        assert why in (None, "duplicate")
    assert len(buf) == 40
    m = buf.match(T0 + image * PERIOD + 0.0004)
    assert m.status is MatchStatus.OK
    assert m.window[:, 0].tolist() == list(range(image - 7, image + 1))
    assert np.all(np.diff(m.stamps) > 0)

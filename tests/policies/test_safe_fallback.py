"""SafeFallback: the safe action once on going silent, then at the keep-alive rate, never a flood."""

from __future__ import annotations

import pytest

from policies.safe_fallback import SafeFallback

TICK_S = 0.05  # a 20 Hz watchdog


def due_times(fallback: SafeFallback, start: float, stop: float) -> list[float]:
    """Times of the 20 Hz ticks in [start, stop) at which a safe action was due."""
    ticks = [round(k * TICK_S, 6) for k in range(round(start / TICK_S), round(stop / TICK_S))]
    return [t for t in ticks if fallback.on_tick(t)]


def test_no_action_yet_stops_at_the_first_tick_then_keeps_alive_at_its_rate() -> None:
    fallback = SafeFallback(timeout_s=0.5, keepalive_s=1.0)
    assert fallback.silent(0.0) and not fallback.stopped
    assert due_times(fallback, 0.0, 3.0) == [0.0, 1.0, 2.0]  # not one per 20 Hz tick
    assert fallback.stopped and fallback.safe_sent == 3


def test_a_source_that_goes_silent_is_stopped_after_the_timeout_and_resumes_with_its_next_action() -> None:
    fallback = SafeFallback(timeout_s=0.5, keepalive_s=1.0)
    for k in range(21):  # the source acts at 20 Hz for 1 s: nothing is due
        t = round(k * TICK_S, 6)
        assert not fallback.on_action(t) and not fallback.on_tick(t)
    # Silent after t = 1.0: the first safe action at the first tick past the timeout, then one a second.
    assert due_times(fallback, 1.05, 3.6) == [1.55, 2.55, 3.55]
    assert fallback.on_action(3.6)  # acting resumes
    assert not fallback.stopped and not fallback.on_tick(3.65)
    assert due_times(fallback, 3.7, 4.3) == [4.15]  # a new silent spell starts with an immediate stop


def test_a_clock_that_went_back_counts_as_silent_and_does_not_delay_the_stop() -> None:
    fallback = SafeFallback(timeout_s=0.5, keepalive_s=1.0)
    fallback.on_action(100.0)
    assert fallback.silent(10.0)  # a restarted simulation clock: the last action is not "recent"
    assert fallback.on_tick(10.0) and fallback.on_tick(10.05 - 50.0)


def test_bad_periods_are_refused() -> None:
    with pytest.raises(ValueError, match="keepalive_s = 0"):
        SafeFallback(timeout_s=0.5, keepalive_s=0)

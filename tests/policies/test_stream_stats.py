"""Stream health: staleness, rate, latency percentiles, stamp order and the diagnostic level they give."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.stream_stats import LatencyWindow, Level, StreamStats


def fed(rate_hz: float, seconds: float, latency_s: float = 0.01, **kwargs: float) -> StreamStats:
    s = StreamStats("camera", nominal_rate_hz=20.0, timeout_s=0.5, **kwargs)
    for t in np.arange(100.0, 100.0 + seconds, 1.0 / rate_hz):
        assert s.check_stamp(t - latency_s) is None
        s.accept(t - latency_s, now=t)
    return s


def test_healthy_stream_is_ok_with_its_rate_and_latency() -> None:
    s = fed(20.0, 6.0)
    now = s.last_arrival
    status = s.status(now)
    assert status.level == Level.OK
    assert s.rate_hz(now) == pytest.approx(20.0, rel=0.01)
    assert float(status.values["latency_p50_ms"]) == pytest.approx(10.0, abs=0.1)
    assert status.values["accepted"] == "120"


def test_stale_stream_is_an_error_and_recovers() -> None:
    s = fed(20.0, 2.0)
    later = s.last_arrival + 0.6
    assert s.is_stale(later) and s.status(later).level == Level.ERROR
    assert "stale" in s.status(later).message
    s.accept(later - 0.01, later)
    assert not s.is_stale(later)
    never = StreamStats("imu", timeout_s=0.5)
    assert never.is_stale(0.0) and "ever" in never.status(0.0).message


def test_slow_stream_warns_once_its_window_filled() -> None:
    s = fed(5.0, 6.0)  # nominal 20 Hz
    status = s.status(s.last_arrival)
    assert status.level == Level.WARN and "nominal 20 Hz" in status.message
    young = fed(5.0, 1.0)  # just started: not judged yet
    assert young.status(young.last_arrival).level == Level.OK


def test_stamp_order_checks() -> None:
    s = fed(20.0, 1.0)
    last = s.last_stamp
    assert "duplicate" in s.check_stamp(last)
    assert "backwards" in s.check_stamp(last - 0.1)
    assert "zero" in s.check_stamp(0.0)
    assert s.check_stamp(last - 10.0) is None  # far behind: a clock restart, accepted
    now = s.last_arrival
    assert "ahead" in s.check_stamp(now + 0.3, now, future_tolerance_s=0.2)  # a bad clock, not recorded
    assert s.check_stamp(now + 0.1, now, future_tolerance_s=0.2) is None
    s.accept(last - 10.0, now=s.last_arrival + 0.05)
    assert s.clock_resets == 1 and s.last_stamp == last - 10.0


def test_rejections_and_drops_are_counted_by_reason_and_warn_while_recent() -> None:
    s = fed(20.0, 6.0)
    now = s.last_arrival
    s.reject("encoding", now)
    s.reject("encoding", now)
    s.drop("late", now)
    status = s.status(now)
    assert status.level == Level.WARN
    assert status.values["rejected.encoding"] == "2" and status.values["dropped.late"] == "1"
    assert s.status(now + 5.1).level == Level.ERROR  # problems aged out of the window; now simply stale


def test_a_stream_without_timeout_never_goes_stale() -> None:
    s = StreamStats("active_skill")
    assert not s.is_stale(1e6) and s.status(1e6).level == Level.OK


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=300))
def test_latency_percentiles_match_numpy(samples: list[float]) -> None:
    w = LatencyWindow(size=1000)
    for x in samples:
        w.add(x)
    assert w.percentile_ms(99) == pytest.approx(np.percentile(samples, 99) * 1e3)
    assert LatencyWindow().percentile_ms(50) != LatencyWindow().percentile_ms(50)  # NaN before any sample


def test_handled_counts_every_message_once_whatever_became_of_it() -> None:
    s = StreamStats("state")
    s.accept(1.0, 1.0)
    s.reject("stamp", 1.1)
    s.drop("late", 1.2)
    s.drop("late", 1.3)
    assert s.handled == 4

"""Health of a message stream: rate, latency, freshness and counts of rejected and dropped messages.

Pure Python so that the logic a robot's safety depends on (is this input stale? is it arriving at its
rate?) is tested without DDS; the ROS nodes feed it arrival times from their clock and turn its `Status`
into diagnostic_msgs/DiagnosticStatus on /diagnostics.

All times are float seconds of one clock (the node's ROS clock, which follows /clock with use_sim_time).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class Level(IntEnum):
    """Severity; the values are diagnostic_msgs/DiagnosticStatus's OK, WARN, ERROR and STALE."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


@dataclass
class Status:
    """One diagnostic entry: level, one-line message, key/value details."""

    level: Level
    message: str
    values: dict[str, str] = field(default_factory=dict)


class LatencyWindow:
    """Percentiles over the last `size` durations (seconds in, milliseconds out)."""

    def __init__(self, size: int = 512) -> None:
        self._samples: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, seconds: float) -> None:
        self._samples.append(seconds)

    def percentile_ms(self, q: float) -> float:
        """q-th percentile in milliseconds; NaN before the first sample."""
        return float(np.percentile(self._samples, q)) * 1e3 if self._samples else float("nan")


class StreamStats:
    """Arrivals, stamp order, rate, latency and rejections of one stream.

    Args:
        name: stream name used in messages, e.g. "camera".
        nominal_rate_hz: expected rate; below `slow_fraction` of it the status is WARN. 0 = no rate check.
        timeout_s: no accepted message for this long -> ERROR (stale). None = the stream may go quiet.
        window_s: sliding window for the rate and for "recent" rejections.
        reset_after_s: a stamp this far behind the last accepted one is a clock restart, not an error.
    """

    def __init__(
        self,
        name: str,
        nominal_rate_hz: float = 0.0,
        timeout_s: float | None = None,
        window_s: float = 5.0,
        reset_after_s: float = 1.0,
        slow_fraction: float = 0.5,
    ) -> None:
        self.name = name
        self.nominal_rate_hz = nominal_rate_hz
        self.timeout_s = timeout_s
        self.window_s = window_s
        self.reset_after_s = reset_after_s
        self.slow_fraction = slow_fraction
        self.latency = LatencyWindow()  # stamp -> arrival (inputs) or stamp -> publish (outputs)
        self.accepted = 0
        self.rejected: Counter[str] = Counter()  # malformed messages, by reason
        self.dropped: Counter[str] = Counter()  # valid messages not used (late, superseded, unmatched)
        self.clock_resets = 0
        self.last_stamp: float | None = None
        self.last_arrival: float | None = None
        self._arrivals: deque[float] = deque()
        self._recent_problems: deque[float] = deque()

    def check_stamp(
        self, stamp: float, now: float | None = None, future_tolerance_s: float = np.inf
    ) -> str | None:
        """Reason to reject a stamp (zero, more than `future_tolerance_s` after `now`, not after the previous
        one), or None. Does not record it: a stamp from the future, recorded, would make every message after
        it look like a clock going back."""
        if not np.isfinite(stamp) or stamp <= 0:
            return f"invalid stamp {stamp} (zero or unset header.stamp)"
        if now is not None and stamp > now + future_tolerance_s:
            return (
                f"stamped {stamp - now:.3f} s ahead of this node's clock (tolerance {future_tolerance_s} s)"
            )
        if self.last_stamp is None or stamp > self.last_stamp:
            return None
        if stamp == self.last_stamp:
            return f"duplicate stamp {stamp:.6f}"
        if self.last_stamp - stamp > self.reset_after_s:
            return None  # clock restart: accepted by `accept`, counted there
        return f"stamp went backwards by {self.last_stamp - stamp:.6f} s"

    def accept(self, stamp: float, now: float) -> None:
        """Record a message that passed every check: its stamp, arrival time and latency."""
        if self.last_stamp is None or self.last_stamp - stamp > self.reset_after_s:
            self.clock_resets += self.last_stamp is not None
            self.last_stamp = stamp
        else:  # a stream that admits reordering (IMU) keeps its newest stamp
            self.last_stamp = max(self.last_stamp, stamp)
        self.last_arrival = now
        self.accepted += 1
        self.latency.add(now - stamp)
        self._arrivals.append(now)
        self._trim(now)

    def reject(self, reason: str, now: float) -> None:
        """Count a malformed message."""
        self.rejected[reason] += 1
        self._recent_problems.append(now)

    def drop(self, reason: str, now: float) -> None:
        """Count a valid message that was not used."""
        self.dropped[reason] += 1
        self._recent_problems.append(now)

    def age_s(self, now: float) -> float | None:
        """Seconds since the last accepted message; None if none yet."""
        return None if self.last_arrival is None else now - self.last_arrival

    @property
    def handled(self) -> int:
        """Messages accounted for so far: accepted, rejected or dropped."""
        return self.accepted + sum(self.rejected.values()) + sum(self.dropped.values())

    def is_stale(self, now: float) -> bool:
        """True when the stream has a timeout and nothing usable arrived within it (or ever)."""
        if self.timeout_s is None:
            return False
        age = self.age_s(now)
        return age is None or age > self.timeout_s

    def rate_hz(self, now: float) -> float:
        """Accepted messages per second over the window."""
        self._trim(now)
        if len(self._arrivals) < 2:
            return 0.0
        span = self._arrivals[-1] - self._arrivals[0]
        return (len(self._arrivals) - 1) / span if span > 0 else 0.0

    def status(self, now: float) -> Status:
        """ERROR when stale, WARN when slow or when messages were rejected/dropped recently, else OK."""
        self._trim(now)
        rate, age = self.rate_hz(now), self.age_s(now)
        values = {
            "rate_hz": f"{rate:.1f}",
            "age_s": "never" if age is None else f"{age:.3f}",
            "latency_p50_ms": f"{self.latency.percentile_ms(50):.1f}",
            "latency_p99_ms": f"{self.latency.percentile_ms(99):.1f}",
            "accepted": str(self.accepted),
            "rejected": str(sum(self.rejected.values())),
            "dropped": str(sum(self.dropped.values())),
            "clock_resets": str(self.clock_resets),
        }
        values.update({f"rejected.{k}": str(v) for k, v in sorted(self.rejected.items())})
        values.update({f"dropped.{k}": str(v) for k, v in sorted(self.dropped.items())})
        if self.is_stale(now):
            since = "ever" if age is None else f"for {age:.2f} s"
            message = f"{self.name}: stale, nothing usable {since} (timeout {self.timeout_s} s)"
            return Status(Level.ERROR, message, values)
        # Rate is judged only once the window has filled, so a stream that just started is not "slow".
        started = self._arrivals and now - self._arrivals[0] >= 0.5 * self.window_s
        if self.nominal_rate_hz and started and rate < self.slow_fraction * self.nominal_rate_hz:
            return Status(
                Level.WARN, f"{self.name}: {rate:.1f} Hz, nominal {self.nominal_rate_hz:g} Hz", values
            )
        if self._recent_problems:
            n = len(self._recent_problems)
            return Status(
                Level.WARN, f"{self.name}: {n} rejected/dropped in the last {self.window_s:g} s", values
            )
        return Status(Level.OK, f"{self.name}: {rate:.1f} Hz", values)

    def _trim(self, now: float) -> None:
        for q in (self._arrivals, self._recent_problems):
            if q and q[-1] > now:  # the clock went back (simulation reset): the window means nothing now
                q.clear()
            while q and q[0] < now - self.window_s:
                q.popleft()

"""Timestamped IMU ring buffer that cuts the window of the last N samples at or before an image stamp.

The window is what the model saw in training (`sim.real_robot_proxy` takes the samples measured up to the
frame): the last N samples stamped at or before the image stamp, never one after the exposure. The last of
them must lie within `tolerance_s` of the stamp. While the IMU has not reached the image stamp a sample may
still come, so `match` says WAIT and the caller retries when more IMU arrives; the image is not lost. A
window whose samples are further apart than GAP_FACTOR nominal periods (a dropped burst, a half-rate IMU)
is returned flagged (`ImuMatch.gap_s`) so the caller counts and reports it instead of feeding it silently.

Stamps are float seconds in one clock (ROS time); `push` takes the caller's `now` in it. Samples are kept
sorted by stamp, so a sample that arrives out of order is inserted in place. Rejected, with the buffer
kept as it is: an exact duplicate stamp, a stamp more than `future_tolerance_s` ahead of `now` (a bad
clock: accepting it would make every good sample after it look out of date), a stamp more than
`stale_after_s` behind the newest sample, and a sample older than everything kept once the buffer is full.
One bad sample never costs the good history. The buffer is cleared only when the clock itself went back
(a simulation reset or a bag loop under use_sim_time): then `now` is behind the newest sample kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

IMU_DIM = 6  # accel xyz m/s^2, gyro xyz rad/s
# Consecutive window samples further apart than this many nominal periods make a gap: one lost sample
# (2 periods) is a gap; jitter of a quarter period is not.
GAP_FACTOR = 1.5


class MatchStatus(Enum):
    OK = "ok"
    WAIT = "wait"  # the IMU has not reached the image stamp yet: retry when it has
    MISS = "miss"  # no usable window for this image: drop it


@dataclass(frozen=True)
class ImuMatch:
    """Result of matching one image stamp. `window` (N, 6) float32 and `stamps` (N,) are set when OK."""

    status: MatchStatus
    reason: str = ""
    window: np.ndarray | None = None
    stamps: np.ndarray | None = None
    skew_s: float = float("nan")  # stamp of the window's last sample minus the image stamp (<= 0), s
    gap_s: float = 0.0  # the window's largest gap between samples when it is a gap (see GAP_FACTOR), else 0

    @property
    def span_s(self) -> float:
        """Time from the window's first sample to its last, s."""
        return float(self.stamps[-1] - self.stamps[0]) if self.stamps is not None else float("nan")


class ImuBuffer:
    """Sorted, bounded store of IMU samples. Not thread-safe: the caller holds a lock.

    Storage is two flat arrays of size 2 * capacity; samples live in [start, end). Appending past the end
    moves the newest `capacity` samples to the front, so pushes are amortised O(1) and every window is a
    contiguous slice.
    """

    def __init__(
        self,
        window: int,
        capacity: int,
        tolerance_s: float,
        period_s: float | None = None,
        stale_after_s: float = 1.0,
        future_tolerance_s: float = 0.05,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if capacity < window:
            raise ValueError(f"capacity ({capacity}) must be >= window ({window}) samples")
        if tolerance_s < 0:
            raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
        if stale_after_s <= 0 or future_tolerance_s < 0 or (period_s is not None and period_s <= 0):
            raise ValueError(
                f"stale_after_s ({stale_after_s}) and period_s ({period_s}) must be > 0, "
                f"future_tolerance_s ({future_tolerance_s}) >= 0"
            )
        self.window = window
        self.capacity = capacity
        self.tolerance_s = tolerance_s
        self.period_s = period_s  # nominal sample period, s; None = no gap check
        self.stale_after_s = stale_after_s  # a sample this far behind the newest is refused, s
        self.future_tolerance_s = future_tolerance_s  # a stamp this far ahead of now is refused, s
        self._stamps = np.zeros(2 * capacity, dtype=np.float64)  # (2C,)
        self._data = np.zeros((2 * capacity, IMU_DIM), dtype=np.float32)  # (2C, 6)
        self._start = 0
        self._end = 0
        self.resets = 0  # clock restarts seen

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def newest(self) -> float | None:
        return float(self._stamps[self._end - 1]) if len(self) else None

    @property
    def oldest(self) -> float | None:
        return float(self._stamps[self._start]) if len(self) else None

    def clear(self) -> None:
        self._start = self._end = 0

    def push(self, stamp: float, sample: np.ndarray, now: float) -> str | None:
        """Store one sample (6,) that arrived at `now`; return None if kept, else why not.

        Reasons: "shape", "stamp" (zero, negative or non-finite), "nonfinite" (NaN/Inf values), "future"
        (ahead of now by more than future_tolerance_s), "duplicate" (a sample with this stamp is kept),
        "stale" (stale_after_s behind the newest sample, or older than every kept sample of a full buffer).
        """
        sample = np.asarray(sample, dtype=np.float32)
        if sample.shape != (IMU_DIM,):
            return "shape"
        if not (np.isfinite(stamp) and stamp > 0):
            return "stamp"
        if not np.all(np.isfinite(sample)):
            return "nonfinite"
        if stamp > now + self.future_tolerance_s:
            return "future"
        newest = self.newest
        if newest is not None and newest > now + self.future_tolerance_s:  # our clock went back: a restart
            self.clear()
            self.resets += 1
            newest = None
        if newest is not None and stamp < newest - self.stale_after_s:
            return "stale"
        if newest is not None and stamp <= newest:
            return self._insert(stamp, sample)
        if self._end == len(self._stamps):
            self._compact()
        self._stamps[self._end] = stamp
        self._data[self._end] = sample
        self._end += 1
        if len(self) > self.capacity:
            self._start += 1
        return None

    def match(self, image_stamp: float) -> ImuMatch:
        """The last `window` samples at or before `image_stamp`, the last within the tolerance of it."""
        if not len(self):
            return ImuMatch(MatchStatus.WAIT, "no IMU samples yet")
        stamps = self._stamps[self._start : self._end]  # (n,) sorted
        if stamps[-1] < image_stamp:
            return ImuMatch(MatchStatus.WAIT, f"IMU lags the image by {image_stamp - stamps[-1]:.3f} s")
        end = int(np.searchsorted(stamps, image_stamp, side="right"))  # samples [0, end) are <= the stamp
        if end == 0 or image_stamp - stamps[end - 1] > self.tolerance_s:
            return ImuMatch(
                MatchStatus.MISS,
                f"no IMU sample within {self.tolerance_s:.3f} s before image stamp {image_stamp:.6f}",
            )
        if end < self.window:
            return ImuMatch(
                MatchStatus.MISS, f"only {end} IMU samples up to the image stamp, need {self.window}"
            )
        sl = slice(self._start + end - self.window, self._start + end)
        window_stamps = self._stamps[sl].copy()  # (N,)
        skew = float(window_stamps[-1] - image_stamp)
        gap = float(np.max(np.diff(window_stamps))) if self.window > 1 else 0.0
        flagged = self.period_s is not None and gap > GAP_FACTOR * self.period_s
        return ImuMatch(
            MatchStatus.OK, window=self._data[sl].copy(), stamps=window_stamps, skew_s=skew,
            gap_s=gap if flagged else 0.0,
        )  # fmt: skip

    def _insert(self, stamp: float, sample: np.ndarray) -> str | None:
        """Place an out-of-order sample (stamp <= newest) at its sorted position."""
        stamps = self._stamps[self._start : self._end]
        i = int(np.searchsorted(stamps, stamp, side="left"))
        if i < len(stamps) and stamps[i] == stamp:
            return "duplicate"
        if i == 0 and len(self) >= self.capacity:
            return "stale"
        if self._end == len(self._stamps):
            self._compact()
        pos = self._start + i
        # Shift the newer samples right by one; rare (reordered transport), O(n).
        self._stamps[pos + 1 : self._end + 1] = self._stamps[pos : self._end].copy()
        self._data[pos + 1 : self._end + 1] = self._data[pos : self._end].copy()
        self._stamps[pos] = stamp
        self._data[pos] = sample
        self._end += 1
        if len(self) > self.capacity:
            self._start += 1
        return None

    def _compact(self) -> None:
        """Move the kept samples to the front of the storage."""
        n = len(self)
        self._stamps[:n] = self._stamps[self._start : self._end].copy()
        self._data[:n] = self._data[self._start : self._end].copy()
        self._start, self._end = 0, n

"""Timestamped IMU ring buffer that cuts the window of the last N samples ending at an image stamp.

Reference semantics: message_filters' ApproximateTimeSynchronizer pairs messages whose stamps lie within
a `slop`, and decides only once no better pairing can arrive. Here the pair is (image, IMU sample closest
to the image stamp within `tolerance_s`) and the encoder gets the N samples ending at that sample, oldest
first. While the IMU has not reached the image stamp a closer sample may still come, so `match` says WAIT
and the caller retries when more IMU arrives; the image is not lost.

Stamps are float seconds in one clock (ROS time). Samples are kept sorted by stamp, so a sample that
arrives out of order is inserted in place; an exact duplicate stamp is rejected, and so is a sample older
than everything kept once the buffer is full (it would be evicted at once). A stamp far behind the newest
sample means the clock restarted (simulation reset, bag loop): the buffer is cleared instead of rejecting
every sample from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

IMU_DIM = 6  # accel xyz m/s^2, gyro xyz rad/s


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
    skew_s: float = float("nan")  # stamp of the window's last sample minus the image stamp, s


class ImuBuffer:
    """Sorted, bounded store of IMU samples. Not thread-safe: the caller holds a lock.

    Storage is two flat arrays of size 2 * capacity; samples live in [start, end). Appending past the end
    moves the newest `capacity` samples to the front, so pushes are amortised O(1) and every window is a
    contiguous slice.
    """

    def __init__(self, window: int, capacity: int, tolerance_s: float, reset_after_s: float = 1.0) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if capacity < window:
            raise ValueError(f"capacity ({capacity}) must be >= window ({window}) samples")
        if tolerance_s < 0:
            raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
        if reset_after_s <= 0:
            raise ValueError(f"reset_after_s must be > 0, got {reset_after_s}")
        self.window = window
        self.capacity = capacity
        self.tolerance_s = tolerance_s
        self.reset_after_s = reset_after_s  # a stamp this far behind the newest one means a clock restart, s
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

    def push(self, stamp: float, sample: np.ndarray) -> str | None:
        """Store one sample (6,); return None if kept, else why not.

        Reasons: "shape", "stamp" (zero, negative or non-finite), "nonfinite" (NaN/Inf values), "duplicate"
        (a sample with this stamp is kept), "stale" (older than every kept sample of a full buffer).
        """
        sample = np.asarray(sample, dtype=np.float32)
        if sample.shape != (IMU_DIM,):
            return "shape"
        if not (np.isfinite(stamp) and stamp > 0):
            return "stamp"
        if not np.all(np.isfinite(sample)):
            return "nonfinite"
        newest = self.newest
        if newest is not None and stamp < newest - self.reset_after_s:
            self.clear()
            self.resets += 1
        elif newest is not None and stamp <= newest:
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
        """The last `window` samples ending at the sample closest to `image_stamp` within the tolerance."""
        if not len(self):
            return ImuMatch(MatchStatus.WAIT, "no IMU samples yet")
        stamps = self._stamps[self._start : self._end]  # (n,) sorted
        if stamps[-1] < image_stamp:
            return ImuMatch(MatchStatus.WAIT, f"IMU lags the image by {image_stamp - stamps[-1]:.3f} s")
        lo, hi = image_stamp - self.tolerance_s, image_stamp + self.tolerance_s
        first = int(np.searchsorted(stamps, lo, side="left"))
        last = int(np.searchsorted(stamps, hi, side="right"))  # candidates: stamps[first:last]
        if first == last:
            return ImuMatch(
                MatchStatus.MISS,
                f"no IMU sample within {self.tolerance_s:.3f} s of image stamp {image_stamp:.6f}",
            )
        # Closest candidate; argmin keeps the earlier one on a tie.
        end = first + int(np.argmin(np.abs(stamps[first:last] - image_stamp))) + 1
        if end < self.window:
            return ImuMatch(
                MatchStatus.MISS, f"only {end} IMU samples up to the image stamp, need {self.window}"
            )
        sl = slice(self._start + end - self.window, self._start + end)
        skew = float(self._stamps[sl.stop - 1] - image_stamp)
        return ImuMatch(
            MatchStatus.OK, window=self._data[sl].copy(), stamps=self._stamps[sl].copy(), skew_s=skew
        )

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

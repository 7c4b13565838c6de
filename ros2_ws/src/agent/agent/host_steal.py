"""CPU time the hypervisor gave to someone else ("steal"): tells the host's stalls from the graph's own.

On a virtual machine the host may run other guests on our virtual CPUs; the guest kernel counts that time
as steal (the 8th value of the `cpu` line of /proc/stat). A control cycle missed while steal rose lost its
time to the host, not to the graph, and no change to the graph gets it back. `agent bench graph` reports
both. Linux only: elsewhere (or on a kernel without the column) `available` is False and nothing is counted.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

PROC_STAT = Path("/proc/stat")
HISTORY = 250_000  # samples kept (83 min at the default interval)


def read_steal_s(path: Path = PROC_STAT) -> float | None:
    """Steal time summed over all CPUs since boot, s; None where it cannot be read."""
    try:
        with path.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu" or not fields[8].isdigit():
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


class StealMonitor:
    """Samples the cumulative steal time every `interval_s` on a daemon thread.

    /proc/stat shows steal in units of 1/USER_HZ s (10 ms): a window "had steal" when the total crossed
    such a step in it, so a single steal of a few ms may or may not show, and a window is credited with the
    steal of every sample interval it overlaps. Figures over many windows (a share of them, a count of
    misses) are what it is for, not one window's amount.
    """

    def __init__(
        self,
        interval_s: float = 0.02,
        read: Callable[[], float | None] = read_steal_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s, self._read, self._clock = interval_s, read, clock
        self.available = read() is not None
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, float]] = deque(maxlen=HISTORY)  # (monotonic s, steal s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Sample from now on (nothing happens where steal is not available)."""
        if not self.available or self._thread is not None:
            return
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="steal-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def restart(self) -> None:
        """Forget the samples so far (e.g. a warm-up) and count from now on."""
        with self._lock:
            self._samples.clear()
        self.sample()

    def sample(self) -> None:
        """Take one sample now (the thread calls this every `interval_s`)."""
        with self._lock:  # read and stamped together: a sample must not be stamped after a later one
            steal, now = self._read(), self._clock()
            if steal is not None:
                self._samples.append((now, steal))

    def total_s(self) -> float | None:
        """Steal between the first and the last sample, s; None when not available."""
        if not self.available:
            return None
        with self._lock:
            return self._samples[-1][1] - self._samples[0][1] if self._samples else 0.0

    def during(self, start_s: float, end_s: float) -> float:
        """Steal credited to the monotonic window [start_s, end_s]: that of every sample interval it
        overlaps, s."""
        return self._during(self._snapshot(), start_s, end_s)

    def count_during_steal(self, times_s: Iterable[float], span_s: float) -> int:
        """How many of the windows [t, t + span_s] (monotonic) had steal."""
        times = np.asarray(list(times_s), np.float64)
        return int(self.had_steal(times, times + span_s).sum())

    def had_steal(self, starts_s: np.ndarray, ends_s: np.ndarray) -> np.ndarray:
        """Per window [starts_s[i], ends_s[i]] (monotonic), whether it had steal: (N,) bool."""
        snap = self._snapshot()
        return np.array([self._during(snap, a, b) > 0 for a, b in zip(starts_s, ends_s, strict=True)], bool)

    def share_with_steal(self, span_s: float) -> float:
        """Of the windows of `span_s` that tile the sampled time, the share that had steal: the rate to
        hold `count_during_steal` against (windows that happened to have steal anyway)."""
        times, _ = self._snapshot()
        windows = int((times[-1] - times[0]) // span_s) if times else 0
        if windows == 0:
            return 0.0
        starts = times[0] + span_s * np.arange(windows)
        return float(self.had_steal(starts, starts + span_s).mean())

    def _snapshot(self) -> tuple[list[float], list[float]]:
        with self._lock:
            return [t for t, _ in self._samples], [s for _, s in self._samples]

    @staticmethod
    def _during(snapshot: tuple[list[float], list[float]], start_s: float, end_s: float) -> float:
        times, steal = snapshot
        if len(times) < 2:
            return 0.0
        first = max(bisect.bisect_right(times, start_s) - 1, 0)  # the interval ending after start_s
        last = min(bisect.bisect_left(times, end_s), len(times) - 1)  # the interval starting before end_s
        return steal[last] - steal[first] if last > first else 0.0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

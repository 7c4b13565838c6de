"""Per-env ring buffer of time-stamped sensor samples (IMU windows, delayed sensor streams).

Each sample has a capture stamp and a `visible_at` time (when a consumer may see it: the stamp itself for
a simulator, stamp + latency for the real-robot proxy). `latest` returns the newest samples visible at a
given time, oldest first, with their stamps and arrival times: the IMU window of an observation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Window(NamedTuple):
    """Samples read from a ring, oldest first. Shapes: values (N, count, D); stamps, visible_at (N, count)."""

    values: np.ndarray
    stamps: np.ndarray  # capture stamps, s (-inf where an env has none)
    visible_at: np.ndarray  # when each sample became visible, s (-inf where an env has none)


class StampedRing:
    """Shapes: values (N, C, D), stamps and visible_at (N, C); C = capacity, D = channels."""

    def __init__(self, num_envs: int, capacity: int, dim: int, dtype: type = np.float32) -> None:
        self.num_envs, self.capacity = num_envs, capacity
        self._values = np.zeros((num_envs, capacity, dim), dtype=dtype)
        self._stamps = np.zeros((num_envs, capacity))
        self._visible = np.zeros((num_envs, capacity))
        self._total = np.zeros(num_envs, dtype=np.int64)  # samples ever pushed per env

    def clear(self, envs: np.ndarray) -> None:
        """Forget the samples of `envs` (int indices)."""
        self._total[envs] = 0

    def extend(
        self, envs: np.ndarray, stamps: np.ndarray, values: np.ndarray, visible_at: np.ndarray | None = None
    ) -> None:
        """Append S samples, in time order, to each of E envs.

        Shapes: envs (E,) distinct int; stamps and visible_at (E, S) or (S,) shared; values (E, S, D).
        """
        envs = np.atleast_1d(envs)
        stamps = np.broadcast_to(stamps, values.shape[:2])
        visible_at = stamps if visible_at is None else np.broadcast_to(visible_at, stamps.shape)
        s = stamps.shape[1]
        if s > self.capacity:  # only the newest `capacity` samples can be kept
            self._total[envs] += s - self.capacity
            keep = slice(s - self.capacity, s)
            stamps, values, visible_at = stamps[:, keep], values[:, keep], visible_at[:, keep]
            s = self.capacity
        slots = (self._total[envs, None] + np.arange(s)) % self.capacity  # (E, S)
        rows = envs[:, None]
        self._values[rows, slots] = values
        self._stamps[rows, slots] = stamps
        self._visible[rows, slots] = visible_at
        self._total[envs] += s

    def latest(self, count: int, until: np.ndarray | None = None) -> Window:
        """The newest `count` samples visible at `until` (None: all held), oldest first.

        Where fewer are visible, the oldest visible sample is repeated at the front (with its stamp), as a
        sensor at rest would read; an env with none visible gets zeros stamped (and visible at) -inf.
        Shapes: until (N,) -> Window of N envs.
        """
        held = np.minimum(self._total, self.capacity)  # (N,)
        oldest = self._total - held  # push number of the oldest held sample
        if until is None:
            visible = held
        else:  # visible_at is non-decreasing in push order: the visible samples are the oldest held ones
            in_ring = np.arange(self.capacity)[None, :] < held[:, None]  # (N, C) slots holding a sample
            visible = ((self._visible <= np.asarray(until)[:, None]) & in_ring).sum(axis=1)
        newest = oldest + visible - 1  # (N,) push number of the newest visible sample
        pushes = newest[:, None] - count + 1 + np.arange(count)[None, :]  # (N, count) push numbers to read
        pushes = np.maximum(pushes, oldest[:, None])  # repeat the oldest where too few are held
        rows, slots = np.arange(self.num_envs)[:, None], pushes % self.capacity
        values = self._values[rows, slots]  # (N, count, D)
        stamps, visible_at = self._stamps[rows, slots], self._visible[rows, slots]  # (N, count)
        none = visible == 0
        if none.any():
            values[none], stamps[none], visible_at[none] = 0, -np.inf, -np.inf
        return Window(values, stamps, visible_at)

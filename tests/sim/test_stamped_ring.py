"""The stamped ring buffer against a plain-list reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.stamped_ring import StampedRing


def reference(samples: list[tuple[float, float, float]], count: int, until: float | None) -> list[float]:
    """Stamps of the newest `count` samples visible at `until`, oldest first, padded with the oldest."""
    visible = [s for s, v, _ in samples if until is None or v <= until]
    if not visible:
        return [-np.inf] * count
    window = visible[-count:]
    return [window[0]] * (count - len(window)) + window


@settings(max_examples=80, deadline=None)
@given(
    chunks=st.lists(st.integers(1, 12), min_size=0, max_size=8),
    capacity=st.integers(1, 16),
    count=st.integers(1, 10),
    delay=st.floats(0.0, 0.05),
    until=st.one_of(st.none(), st.floats(0.0, 0.6)),
)
def test_latest_matches_a_list(
    chunks: list[int], capacity: int, count: int, delay: float, until: float | None
) -> None:
    ring = StampedRing(num_envs=2, capacity=capacity, dim=1)
    samples: list[tuple[float, float, float]] = []
    t = 0
    for size in chunks:
        stamps = 0.01 * np.arange(t, t + size)
        t += size
        ring.extend(np.array([1]), stamps, stamps[None, :, None] * 10, stamps + delay)
        samples += [(s, s + delay, s * 10) for s in stamps]
    values, stamps, visible_at = ring.latest(count, until=None if until is None else np.array([until, until]))
    held = samples[-capacity:]
    expected = np.array(reference(held, count, until))
    np.testing.assert_allclose(stamps[1], expected)
    np.testing.assert_allclose(values[1, :, 0], np.where(np.isinf(expected), 0.0, expected * 10))
    np.testing.assert_allclose(visible_at[1], expected + delay)  # -inf stays -inf
    assert np.all(np.isinf(stamps[0])) and np.all(values[0] == 0)  # env 0 never received anything
    assert np.all(np.isinf(visible_at[0]))


def test_clear_forgets_only_the_given_envs() -> None:
    ring = StampedRing(num_envs=2, capacity=4, dim=1)
    ring.extend(np.array([0, 1]), np.array([0.1, 0.2]), np.ones((2, 2, 1)))
    ring.clear(np.array([0]))
    _, stamps, _ = ring.latest(2)
    assert np.all(np.isinf(stamps[0])) and stamps[1].tolist() == [0.1, 0.2]

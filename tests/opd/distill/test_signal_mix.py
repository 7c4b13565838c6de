"""The predictor_novelty gate signal: quantile matching of the disagreement onto the error's scale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opd.distill.signal_mix import Recent, SignalMix


def filled(window: int = 1000, min_samples: int = 100, seed: int = 0) -> SignalMix:
    """A mix whose windows hold errors ~ U(0, 1) stds and disagreements ~ U(0, 0.01): unrelated scales."""
    rng = np.random.default_rng(seed)
    mix = SignalMix(window, min_samples)
    for _ in range(window // 4):
        mix(rng.uniform(0, 1, 4), rng.uniform(0, 0.01, 4))
    return mix


def test_disagreement_is_mapped_to_the_errors_quantile_of_its_rank() -> None:
    mix = filled()
    # a disagreement at the 90th percentile of its window maps to the 90th percentile of the errors
    d90 = np.quantile(mix.disagreements.values(), 0.9)
    e90 = np.quantile(mix.errors.values(), 0.9)
    assert mix.mapped(np.array([d90]))[0] == pytest.approx(e90, abs=0.01)
    # beyond every recent disagreement: the largest recent error, not more
    assert mix.mapped(np.array([1.0]))[0] == pytest.approx(mix.errors.values().max())
    assert mix.mapped(np.array([-1.0]))[0] == pytest.approx(mix.errors.values().min())


def test_gate_signal_is_the_higher_of_the_two_on_one_scale() -> None:
    mix = filled()
    # a low error with an unusual disagreement: the disagreement decides, in error units
    low_error_unusual_state = mix(np.array([0.05]), np.array([0.0099]))[0]
    assert low_error_unusual_state > 0.9
    # a high error with a usual disagreement: the error passes unchanged
    assert mix(np.array([0.97]), np.array([0.001]))[0] == pytest.approx(0.97)


def test_error_passes_alone_until_both_windows_are_filled() -> None:
    mix = SignalMix(window=100, min_samples=10)
    out = mix(np.array([0.3, np.nan]), np.array([5.0, 5.0]))
    np.testing.assert_array_equal(out, [0.3, np.nan])  # no scale yet: the huge disagreement is not read


def test_unknown_signals() -> None:
    mix = filled()
    out = mix(np.array([np.nan, 0.2, np.nan]), np.array([0.0099, np.nan, np.nan]))
    assert out[0] > 0.9  # the error unknown: the mapped disagreement alone
    assert out[1] == pytest.approx(0.2)  # the disagreement unknown: the error alone
    assert np.isnan(out[2])  # neither known: unknown, so the gate keeps the current source


def test_non_finite_values_never_enter_the_windows() -> None:
    mix = SignalMix(window=10, min_samples=1)
    mix(np.array([np.nan, np.inf, 0.5]), np.array([np.nan, 0.1, -np.inf]))
    np.testing.assert_array_equal(mix.errors.values(), [0.5])
    np.testing.assert_array_equal(mix.disagreements.values(), [0.1])


def test_shapes_must_match() -> None:
    with pytest.raises(ValueError, match="must match"):
        SignalMix(10, 1)(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="min_samples"):
        SignalMix(10, 11)


def test_state_round_trip_gives_the_same_signal() -> None:
    mix = filled(window=200, min_samples=20)
    restored = SignalMix(200, 20)
    restored.load_state_dict(mix.state_dict())
    rng = np.random.default_rng(1)
    for _ in range(30):
        e, d = rng.uniform(0, 1, 4), rng.uniform(0, 0.01, 4)
        np.testing.assert_array_equal(mix(e, d), restored(e, d))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 20),
    st.lists(st.lists(st.floats(-1e6, 1e6) | st.just(float("nan")), min_size=0, max_size=30), max_size=8),
)
def test_recent_keeps_the_newest_finite_values_in_order(size: int, pushes: list[list[float]]) -> None:
    ring = Recent(size)
    for values in pushes:
        ring.push(np.asarray(values, np.float64))
    finite = [v for values in pushes for v in values if np.isfinite(v)]
    np.testing.assert_array_equal(ring.values(), finite[-size:] if finite else [])
    assert len(ring) == min(len(finite), size)


def test_takeovers_are_counted_by_the_signal_that_set_them() -> None:
    mix = filled()
    mix(np.array([0.05, 0.97, np.nan, 0.5]), np.array([0.0099, 0.001, 0.0099, 0.001]))
    np.testing.assert_array_equal(mix.led, [True, False, True, False])
    mix.count(np.array([True, True, True, False]))  # the fourth env: no takeover
    assert mix.takeovers == {"novelty": 2, "predictor": 1}
    restored = SignalMix(1000, 100)
    restored.load_state_dict(mix.state_dict())
    assert restored.takeovers == mix.takeovers

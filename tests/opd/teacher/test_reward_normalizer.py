"""Per-term reward scaling and the reward circuit breaker."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from opd.teacher.reward_normalizer import RewardNormalizer, RewardNormConfig

NAMES = ("progress", "success")
WEIGHTS = {"progress": 5.0, "success": 10.0}


def normalizer(tmp_path: Path, **cfg: object) -> RewardNormalizer:
    config = RewardNormConfig.from_dict(
        {"breaker_warmup": 50, "pause_updates": 3, "breaker_min_std": {"success": 0.34}, **cfg}
    )
    return RewardNormalizer(NAMES, WEIGHTS, config, dump_dir=tmp_path / "breaker", periods_per_step=1)


def typical(rng: np.random.Generator, n: int = 8) -> np.ndarray:
    """Terms (n, 2) of ordinary steps: progress ~ N(0.05, 0.03) m, success 0."""
    return np.stack([rng.normal(0.05, 0.03, n), np.zeros(n)], axis=1)


def test_each_term_is_scaled_by_its_running_std_with_a_floor(tmp_path: Path) -> None:
    norm = normalizer(tmp_path, min_std=0.01)
    rng = np.random.default_rng(0)
    for step in range(100):
        norm.observe(typical(rng), step)
    np.testing.assert_allclose(norm.std[0], 0.03, rtol=0.1)
    np.testing.assert_allclose(norm.scale(), [5.0 / norm.std[0], 10.0 / 0.01])  # success: std 0 -> floor
    terms = np.array([[0.1, 1.0]])
    np.testing.assert_allclose(norm.normalised(terms), terms @ norm.scale())


def test_the_breaker_trips_on_an_out_of_range_reward_pauses_and_dumps(tmp_path: Path) -> None:
    norm = normalizer(tmp_path)
    rng = np.random.default_rng(1)
    for step in range(20):
        assert not norm.observe(typical(rng), step).any()
    first_success = typical(rng)
    first_success[2, 1] = 1.0  # an event term: within 3 x its std floor (0.34) of the window mean 0
    assert not norm.observe(first_success, 20).any() and norm.allow_update()
    norm.last_checkpoint = "runs/teacher/checkpoints/step_000000016.pt"
    spike = typical(rng)
    spike[5, 0] = 50.0
    transition = {"obs": np.arange(16.0).reshape(8, 2), "skill": np.arange(8)}
    bad = norm.observe(spike, 21, transition)
    np.testing.assert_array_equal(bad, np.arange(8) == 5)
    assert norm.trips == 1
    assert [norm.allow_update() for _ in range(4)] == [False, False, False, True]  # paused 3 updates
    report = json.loads((tmp_path / "breaker" / "breaker_000000021.json").read_text())
    assert report["offending"] == [{"env": 5, "term": "progress", "value": 50.0}]
    # Enough to reproduce it: the transition, all its terms, the window's statistics, the checkpoint.
    assert report["transitions"] == [{"env": 5, "terms": {"progress": 50.0, "success": 0.0},
                                      "obs": [10.0, 11.0], "skill": 5}]  # fmt: skip
    assert report["checkpoint"].endswith("step_000000016.pt") and report["sigmas"] == 3.0
    assert set(report["window_std"]) == set(NAMES) and report["accepted_range"]["progress"][1] < 50.0
    assert np.asarray(norm.window).max() < 50.0  # the spike did not widen the window
    nan = typical(rng)
    nan[0, 1] = np.nan
    assert norm.observe(nan, 22)[0] and norm.trips == 2


def test_the_threshold_is_k_sigma_of_the_running_window(tmp_path: Path) -> None:
    """Review defect: the margin was the window's range + 3 sigma + 4 units (~100 sigma on progress)."""
    norm = normalizer(tmp_path, breaker_window=400, breaker_refresh=1)
    rng = np.random.default_rng(3)
    for step in range(50):  # 400 rows: the window is full
        norm.observe(typical(rng), step)
    before = norm.trips  # Gaussian rows beyond 3 sigma trip too (0.27% of them): that is k = 3
    for sign in (1, -1):
        for step, factor, trips in ((50, 2.99, False), (51, 3.01, True)):
            win = np.asarray(norm.window)[:, 0]
            mean, std = win.mean(), win.std()
            row = typical(rng)
            row[3, 0] = mean + sign * factor * std  # just inside, then just outside k = 3
            row[[i for i in range(8) if i != 3], 0] = mean  # the rest cannot trip
            assert norm.observe(row, step).tolist() == [False] * 3 + [trips] + [False] * 4, (sign, factor)
    assert norm.trips == before + 2


def test_unknown_floor_terms_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown reward terms"):
        normalizer(tmp_path, breaker_min_std={"sucess": 0.34})


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    norm = normalizer(tmp_path)
    rng = np.random.default_rng(2)
    for step in range(30):
        norm.observe(typical(rng), step)
    buf = io.BytesIO()
    torch.save(norm.state_dict(), buf)
    buf.seek(0)
    other = normalizer(tmp_path)
    other.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(other.std, norm.std)
    np.testing.assert_array_equal(np.asarray(other.window), np.asarray(norm.window))
    spike = typical(rng)
    spike[0, 0] = 50.0
    assert other.observe(spike, 30)[0]  # armed from the restored window, no new warm-up

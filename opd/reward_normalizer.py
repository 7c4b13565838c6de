"""Per-term reward normalisation and the reward circuit breaker.

Each named reward term keeps running statistics (Welford). The learner's reward is
    sum_i weight_i * term_i / max(std_i, min_std)
Only the scale is normalised: subtracting a running mean would shift the reward of every step, which in an
episodic task changes what is optimal (a negative shift pays for ending episodes early). The `min_std`
floor keeps rare, sparse terms (a success bonus) from being amplified by their tiny variance, and the
statistics freeze after `freeze_after_steps` so the critic chases a stationary target.

The circuit breaker watches a sliding window of every term. A value more than `sigmas` standard deviations
beyond the range the window has seen (plus `floor` per control period the step spans, the terms' nominal
scale, so that the first success or a step that grazes a wall does not trip it), or any non-finite value,
trips it: learning pauses for `pause_updates` updates, the offending values and statistics are dumped for
inspection, and the trainer keeps the offending transitions out of the replay buffer so that they cannot
poison the critic once learning resumes. Collection continues. Trusted data (demonstrations) can fill the
window first, so that the breaker is armed with a realistic range from the first online step.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from policies.config import Config

log = logging.getLogger(__name__)


class RewardNormConfig(Config):
    """Reward normalisation and circuit breaker."""

    min_std: float = Field(1.0, gt=0)  # floor of the per-term std used for scaling, term units
    freeze_after_steps: int = Field(200_000, ge=0)  # env steps after which the statistics stop moving
    breaker_window: int = Field(20_000, ge=10)  # per-term values kept in the breaker's window, steps
    breaker_sigmas: float = Field(3.0, gt=0)  # trip distance beyond the window's range, window stds
    breaker_floor: float = Field(1.0, ge=0)  # extra margin per control period of a step, term units
    breaker_warmup: int = Field(1_000, ge=1)  # values per term before the breaker arms, steps x envs
    pause_updates: int = Field(1_000, ge=0)  # learner updates skipped after a trip, updates


class RewardNormalizer:
    """Running per-term statistics, weighted normalised reward, and the breaker."""

    def __init__(self, names: tuple[str, ...], weights: dict[str, float], cfg: RewardNormConfig,
                 dump_dir: Path | None = None, periods_per_step: int = 1) -> None:  # fmt: skip
        """Args: names of the T terms, their weights, where trips are dumped, and the control periods whose
        summed terms make one step (the env's action_repeat), which scales the breaker's floor."""
        missing = set(names) - set(weights)
        if missing:
            raise ValueError(f"reward weights missing for terms {sorted(missing)}")
        self.names, self.cfg, self.dump_dir = names, cfg, dump_dir
        self.floor = cfg.breaker_floor * periods_per_step  # term units
        self.weights = np.array([weights[n] for n in names], np.float64)
        t = len(names)
        self.count, self.mean, self.m2 = 0, np.zeros(t), np.zeros(t)
        self.window: deque[np.ndarray] = deque(maxlen=cfg.breaker_window)
        self.trips = 0
        self.paused_updates = 0
        self._bounds: tuple[np.ndarray, np.ndarray] | None = None  # breaker (lo, hi), refreshed periodically
        self._since_refresh = 0

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / max(self.count - 1, 1))

    def scale(self) -> np.ndarray:
        """Per-term multiplier: weight / max(std, min_std). Shape: (T,)."""
        return self.weights / np.maximum(self.std, self.cfg.min_std)

    def observe(self, terms: np.ndarray, step: int) -> np.ndarray:
        """Feed one step of N envs' terms (N, T); return the (N,) bool rows that tripped the breaker.

        Statistics and window take the rows that did not trip, so one outlier cannot widen the range.
        """
        terms = np.asarray(terms, np.float64)
        bad = self._check(terms, step)
        finite = terms[~bad]
        if step < self.cfg.freeze_after_steps:
            for row in finite:
                self.count += 1
                delta = row - self.mean
                self.mean += delta / self.count
                self.m2 += delta * (row - self.mean)
        self.window.extend(finite)
        return bad

    def normalised(self, terms: np.ndarray) -> np.ndarray:
        """Learner reward from raw terms. Shape: (..., T) -> (...)."""
        return np.asarray(terms, np.float64) @ self.scale()

    def allow_update(self) -> bool:
        """False while the breaker holds learning paused; counts the skipped update."""
        if self.paused_updates > 0:
            self.paused_updates -= 1
            return False
        return True

    def _refresh_bounds(self) -> None:
        """Recompute the breaker's accepted range from the window; every 100 calls keeps it cheap."""
        self._since_refresh += 1
        if len(self.window) < self.cfg.breaker_warmup or (self._bounds and self._since_refresh < 100):
            return
        win = np.asarray(self.window)
        margin = self.cfg.breaker_sigmas * win.std(0) + self.floor
        self._bounds = (win.min(0) - margin, win.max(0) + margin)
        self._since_refresh = 0

    def _check(self, terms: np.ndarray, step: int) -> np.ndarray:
        """(N,) bool: rows with a non-finite term or one outside the accepted range; trips on any."""
        bad = ~np.isfinite(terms)
        self._refresh_bounds()
        if self._bounds is not None:
            lo, hi = self._bounds
            bad |= np.isfinite(terms) & ((terms < lo) | (terms > hi))
        if not bad.any():
            return bad.any(axis=1)
        self.trips += 1
        self.paused_updates = self.cfg.pause_updates
        envs, cols = np.nonzero(bad)
        report = {
            "step": step,
            "trips": self.trips,
            "offending": [{"env": int(e), "term": self.names[c], "value": float(terms[e, c])}
                          for e, c in zip(envs, cols, strict=True)],
            "window_mean": dict(zip(self.names, np.asarray(self.window).mean(0).tolist(), strict=True))
            if self.window
            else {},
            "running_std": dict(zip(self.names, self.std.tolist(), strict=True)),
            "accepted_range": {n: [float(lo), float(hi)] for n, lo, hi in zip(self.names, *self._bounds,
                                                                              strict=True)}
            if self._bounds is not None
            else {},
            "pause_updates": self.cfg.pause_updates,
        }  # fmt: skip
        log.warning("reward circuit breaker tripped at step %d: %s; pausing learning for %d updates",
                    step, report["offending"][:3], self.cfg.pause_updates)  # fmt: skip
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / f"breaker_{step:09d}.json").write_text(json.dumps(report, indent=2, default=str))
        return bad.any(axis=1)

    def state_dict(self) -> dict:
        """Plain types and tensors only, so checkpoints load with torch.load(weights_only=True)."""
        window = np.asarray(self.window, np.float64).reshape(-1, len(self.names))  # (W, T)
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist(), "trips": self.trips,
                "paused_updates": self.paused_updates, "window": torch.from_numpy(window)}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.count, self.trips = int(state["count"]), int(state["trips"])
        self.mean, self.m2 = np.asarray(state["mean"]), np.asarray(state["m2"])
        self.paused_updates = int(state["paused_updates"])
        self.window.clear()
        self.window.extend(state["window"].numpy())
        self._bounds = None

"""Per-term reward normalisation and the reward circuit breaker.

Each named reward term keeps running statistics (Welford). The learner's reward is
    sum_i weight_i * term_i / max(std_i, min_std)
Only the scale is normalised: subtracting a running mean would shift the reward of every step, which in an
episodic task changes what is optimal (a negative shift pays for ending episodes early). The `min_std`
floor keeps rare, sparse terms (a success bonus) from being amplified by their tiny variance, and the
statistics freeze after `freeze_after_steps` so the critic chases a stationary target.

The circuit breaker (seed 000: "3 sigma of the running window") watches a sliding window of every term. A
value further than `breaker_sigmas` (k = 3) window standard deviations from the window's mean, or any
non-finite value, trips it: learning pauses for `pause_updates` updates, and everything needed to reproduce
the trip is dumped (the offending envs' terms and transition, the window's mean and std, the threshold, the
last checkpoint), and the trainer keeps the offending transitions out of the replay buffer so that they
cannot poison the critic once learning resumes. Collection continues. Event terms (success, collision) are
0 most of the time: their window std would be ~0 and their first event a trip, so each term's std has a
floor in term units per control period (`breaker_min_std`, e.g. 0.34 for a 0/1 event: 3 x 0.34 > 1). Trusted
data (demonstrations) can fill the window first, so that the breaker is armed from the first online step.
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
    breaker_window: int = Field(20_000, ge=10)  # rows (steps x envs) in the breaker's running window
    breaker_sigmas: float = Field(3.0, gt=0)  # k: trip beyond mean +- k window stds (seed 000: 3)
    # Floor of a term's window std, term units per control period (scaled by the periods of a step); terms
    # not named have none. The defaults are the marker task's (sim/marker_task.py):
    # - terms in [0, 1] per period and 0 most of the time (events, clearance): 0.34 lets any possible value
    #   through (|1 - 0| < 3 x 0.34), so only NaN/Inf and values outside physics trip;
    # - heading (rad per period) is heavy-tailed: the bearing to a marker swings as the robot passes it.
    #   0.1 rad lets through what the turn rate (1.5 rad/s x 50 ms) and that swing allow; without it, k = 3
    #   tripped on 6% of the steps of an ordinary run (agent train teacher --steps 8000, 40 demo episodes).
    # progress needs none (0 trips in that run).
    breaker_min_std: dict[str, float] = Field(
        default_factory=lambda: {
            "reached": 0.34,
            "success": 0.34,
            "collision": 0.34,
            "skill_switch": 0.34,
            "time": 0.34,
            "clearance": 0.34,
            "heading": 0.1,
        }  # fmt: skip
    )
    breaker_warmup: int = Field(1_000, ge=1)  # rows in the window before the breaker arms, steps x envs
    breaker_refresh: int = Field(100, ge=1)  # steps between recomputations of the range (keeps it cheap)
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
        unknown = set(cfg.breaker_min_std) - set(names)
        if unknown:
            raise ValueError(f"breaker_min_std names unknown reward terms {sorted(unknown)}; terms: {names}")
        self.names, self.cfg, self.dump_dir = names, cfg, dump_dir
        # (T,) std floor per term, term units per step (a step sums `periods_per_step` control periods)
        self.min_std = np.array([cfg.breaker_min_std.get(n, 0.0) for n in names]) * periods_per_step
        self.last_checkpoint = ""  # set by the trainer after each checkpoint; named in trip dumps
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

    def observe(
        self, terms: np.ndarray, step: int, transition: dict[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """Feed one step of N envs' terms (N, T); return the (N,) bool rows that tripped the breaker.

        `transition` (arrays with a leading N axis: observation, action, ...) goes into a trip's dump.
        Statistics and window take the rows that did not trip, so one outlier cannot widen the range.
        """
        terms = np.asarray(terms, np.float64)
        bad = self._check(terms, step, transition or {})
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

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The accepted range (lo, hi), each (T,): window mean -+ k * max(window std, floor); None in warm-up.

        Recomputed every `breaker_refresh` calls.
        """
        self._since_refresh += 1
        if len(self.window) < self.cfg.breaker_warmup:
            return None
        if self._bounds is None or self._since_refresh >= self.cfg.breaker_refresh:
            win = np.asarray(self.window)  # (W, T)
            margin = self.cfg.breaker_sigmas * np.maximum(win.std(0), self.min_std)
            self._bounds = (win.mean(0) - margin, win.mean(0) + margin)
            self._since_refresh = 0
        return self._bounds

    def _check(self, terms: np.ndarray, step: int, transition: dict[str, np.ndarray]) -> np.ndarray:
        """(N,) bool: rows with a non-finite term or one outside the accepted range; trips on any."""
        bad = ~np.isfinite(terms)
        bounds = self.bounds()
        if bounds is not None:
            lo, hi = bounds
            bad |= np.isfinite(terms) & ((terms < lo) | (terms > hi))
        if not bad.any():
            return bad.any(axis=1)
        self.trips += 1
        self.paused_updates = self.cfg.pause_updates
        rows = np.nonzero(bad.any(axis=1))[0]
        envs, cols = np.nonzero(bad)
        win = np.asarray(self.window) if self.window else np.zeros((0, len(self.names)))
        report = {
            "step": step,
            "trips": self.trips,
            "checkpoint": self.last_checkpoint,  # resume from here to reproduce the trip
            "sigmas": self.cfg.breaker_sigmas,
            "offending": [{"env": int(e), "term": self.names[c], "value": float(terms[e, c])}
                          for e, c in zip(envs, cols, strict=True)],
            "transitions": [{"env": int(e), "terms": dict(zip(self.names, terms[e].tolist(), strict=True)),
                             **{k: np.asarray(v)[e].tolist() for k, v in transition.items()}} for e in rows],
            "window_rows": len(win),
            "window_mean": dict(zip(self.names, win.mean(0).tolist(), strict=True)) if len(win) else {},
            "window_std": dict(zip(self.names, win.std(0).tolist(), strict=True)) if len(win) else {},
            "std_floor": dict(zip(self.names, self.min_std.tolist(), strict=True)),
            "accepted_range": {n: [float(a), float(b)] for n, a, b in zip(self.names, *bounds, strict=True)}
            if bounds is not None
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

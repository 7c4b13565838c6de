"""OPD's two uncertainties as one gate signal: the predictor's error, or the ensemble's disagreement where
that is the more unusual of the two (the `predictor_novelty` switch).

The state predictor's error says how far the student's delayed, noisy view strays from the teacher's
state; the novelty ensemble's disagreement says how unlike the training data the state is. The transfer
benchmark found neither gate ahead of the other over training runs (docs/opd_experiments.md), and each
sees failures the other cannot: a view that lags a fast turn, a layout the student never learnt. They live
on unrelated scales, so the disagreement is mapped onto the error's by quantile matching over recent
windows: a disagreement at rank r of its window becomes the r-quantile of the recent errors. The gate then
reads max(error, mapped disagreement) in prediction-error stds, so its threshold schedule, budget
calibration and logs keep their meaning, and one budget spans both signals (a state unusual by either
counts once).
"""

from __future__ import annotations

import collections

import numpy as np

from opd.distill.gate import Recent


class SignalMix:
    """(error (N,), disagreement (N,)) -> max(error, disagreement mapped onto the error's scale) (N,).

    Until both windows hold `min_samples` values the error passes alone (no scale to map onto yet). NaN
    means unknown: an env with one signal known gets that one (fmax), with neither NaN."""

    def __init__(self, window: int, min_samples: int) -> None:
        if not 1 <= min_samples <= window:
            raise ValueError(f"min_samples = {min_samples} must be in [1, window = {window}]")
        self.min_samples = min_samples
        self.errors, self.disagreements = Recent(window), Recent(window)
        self.led = np.zeros(0, bool)  # (N,) of the last call: the mapped disagreement set the signal
        # takeovers on the signal (`count`) by which of the two set it: "predictor" or "novelty" -> decisions
        self.takeovers: collections.Counter[str] = collections.Counter()

    def mapped(self, disagreement: np.ndarray) -> np.ndarray:
        """Each disagreement (N,) at its rank among the recent ones -> that quantile of the recent errors."""
        out = np.full(disagreement.shape, np.nan)
        known = np.isfinite(disagreement)
        if known.any():
            recent = np.sort(self.disagreements.kept())  # (W,)
            r = np.searchsorted(recent, disagreement[known], side="right") / recent.size  # (n,) in [0, 1]
            out[known] = np.quantile(self.errors.kept(), r)
        return out

    def __call__(self, error: np.ndarray, disagreement: np.ndarray) -> np.ndarray:
        error = np.asarray(error, np.float64)
        disagreement = np.asarray(disagreement, np.float64)
        if error.shape != disagreement.shape:
            raise ValueError(f"error {error.shape} and disagreement {disagreement.shape} must match")
        self.errors.push(error)
        self.disagreements.push(disagreement)
        if min(len(self.errors), len(self.disagreements)) < self.min_samples:
            self.led = np.zeros(error.shape, bool)
            return error.copy()
        mapped = self.mapped(disagreement)
        self.led = (mapped > error) | (np.isnan(error) & np.isfinite(mapped))
        return np.fmax(error, mapped)

    def count(self, takeover: np.ndarray) -> None:
        """Count the envs (N,) whose teacher took over on the last call's signal by the signal that set it:
        which uncertainty the gate's budget is spent on."""
        self.takeovers["novelty"] += int((takeover & self.led).sum())
        self.takeovers["predictor"] += int((takeover & ~self.led).sum())

    def state_dict(self) -> dict:
        """Plain types only (training checkpoints load with weights_only=True)."""
        return {
            "errors": self.errors.values().tolist(),
            "disagreements": self.disagreements.values().tolist(),
            "takeovers": dict(self.takeovers),
        }

    def load_state_dict(self, state: dict) -> None:
        self.errors.load(state["errors"])
        self.disagreements.load(state["disagreements"])
        self.takeovers = collections.Counter(state["takeovers"])

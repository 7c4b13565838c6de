"""Counterfactual gates in worker processes rule exactly as the same gates in-process, restarting at each
episode boundary as the replayed gate does."""

from __future__ import annotations

import numpy as np
import pytest

from opd.counterfactual import CounterfactualGates
from opd.gate import Gate, GateConfig
from opd.online_distillation import GateInputs

CONFIGS = {
    "threshold 0.3": GateConfig(schedule="constant", threshold_start=0.3, threshold_end=0.3),
    "no hysteresis": GateConfig(release_ratio=1.0, min_teacher_steps=1),
    "budget 20%": GateConfig(budget=0.2, budget_min_samples=20, budget_window=50),
}


def events(n: int, seed: int = 0) -> list[tuple]:
    """Decisions with random evidence (some errors unknown, a silent teacher now and then) and two resets."""
    rng = np.random.default_rng(seed)
    out: list[tuple] = []
    for i in range(n):
        if i in (n // 3, 2 * n // 3):
            out.append(("reset",))
        error = np.array([np.nan if rng.random() < 0.1 else rng.lognormal(-1.5, 0.8)])
        inputs = GateInputs(i, np.array([0.05 * i]), error, rng.integers(0, 3, 1), rng.integers(0, 3, 1),
                            rng.random(1) > 0.02, rng.random(1) > 0.05)  # fmt: skip
        out.append(("decide", 0.05 * i, inputs, rng.random(1) < 0.03))
    return out


def run(workers: int | None, evs: list[tuple]) -> dict:
    cf = CounterfactualGates(CONFIGS, workers=workers)
    for e in evs:
        cf.reset() if e[0] == "reset" else cf.decide(*e[1:])
    return cf.results()


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_workers_rule_as_the_gates_themselves(workers: int) -> None:
    evs = events(300)
    got = run(workers, evs)
    for name, cfg in CONFIGS.items():
        gate, want = Gate(cfg, 1), []
        for e in evs:
            if e[0] == "reset":
                gate.reset()
                continue
            _, now, inputs, no_student = e
            d = gate.decide(**vars(inputs))
            want.append((now, bool(np.where(no_student, inputs.teacher_ok, d.use_teacher)[0]), d.threshold))
        assert got[name] == want, name
    assert 0 < np.mean([u for _, u, _ in got["threshold 0.3"]]) < 1  # the evidence exercises both sources

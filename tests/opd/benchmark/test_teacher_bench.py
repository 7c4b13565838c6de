"""The teacher's step-time benchmark measures its env and its updates on the CPU and derives the rest."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from opd.benchmark.teacher_bench import run


def test_the_teacher_bench_times_the_env_and_the_updates(make_tiny: Callable) -> None:
    cfg = make_tiny(num_envs=2, updates_per_step=0.5)
    out = run(cfg, ["cpu"], updates=2, steps=2)
    cpu = out["devices"]["cpu"]
    assert out["env_ms"] > 0 and cpu["update_ms"] > 0 and out["updates_per_vector_step"] == 1.0
    ms = out["env_ms"] + cpu["update_ms"]  # one update per vector step of 2 envs
    assert cpu["env_steps_per_s"] == pytest.approx(2e3 / ms, rel=0.01)
    assert cpu["learning_share"] == pytest.approx(cpu["update_ms"] / ms, abs=0.002)

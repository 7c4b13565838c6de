"""A job of a graph an executor runs apart (`opd.benchmark.ray_jobs`); light, as every worker loads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Job:
    """One job: `run(state, *results of the jobs it comes after)` returns its result (a benchmark's job
    keeps it under OUT too); a stoppable one (a training) returns None when it was stopped (SIGINT/SIGTERM
    after a checkpoint)."""

    name: str
    run: Callable[..., Any]
    after: tuple[str, ...] = ()
    cpus: int = 1  # CPU threads it holds
    gpus: float = 0.0  # GPUs it holds
    stoppable: bool = False  # a training job: None is "stopped", not a result

"""Tiny teacher-training configs: seconds per run, the same code paths as the real job."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest

from opd.teacher.trainer import TeacherTrainConfig

TINY: dict[str, Any] = {
    "num_envs": 8,
    "total_steps": 480,  # 60 vector steps
    "learning_starts": 160,
    "actor_starts": 320,
    "updates_per_step": 0.1,
    "checkpoint_every": 240,
    "log_every": 240,
    "teacher": {"hidden": [64, 64]},
    "sac": {"batch_size": 64, "critic_hidden": [64, 64]},
    "demos": {"episodes": 16, "bc_updates": 300},
}


def tiny_config(**overrides: Any) -> TeacherTrainConfig:
    """TINY with top-level overrides (sub-configs as dicts, merged into TINY's)."""
    data = {**TINY}
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    return TeacherTrainConfig.from_dict(data)


@pytest.fixture(scope="session")
def make_tiny() -> Callable[..., TeacherTrainConfig]:
    """`tiny_config` as a fixture."""
    return tiny_config

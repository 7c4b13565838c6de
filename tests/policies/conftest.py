"""Tiny configs and contracts so policy tests run in seconds on 2 CPU cores."""

from __future__ import annotations

import pytest

from policies.skill_contract import SkillContract
from policies.student_policy import StudentConfig


@pytest.fixture(scope="session")
def contract() -> SkillContract:
    return SkillContract.from_dict({
        "robot": "test",
        "safe_skill": "stop",
        "skills": [
            {"name": "drive", "params": [
                {"name": "speed", "unit": "m/s", "low": 0.05, "high": 0.6, "default": 0.3},
                {"name": "turn_rate", "unit": "rad/s", "low": -1.5, "high": 1.5, "default": 0.0},
            ]},
            {"name": "turn", "params": [
                {"name": "rate", "unit": "rad/s", "low": -2.0, "high": 2.0, "default": 0.0},
            ]},
            {"name": "stop", "params": []},
        ],
    })  # fmt: skip


@pytest.fixture(scope="session")
def tiny_cfg() -> StudentConfig:
    return StudentConfig.from_dict({
        "encoder": {
            "image": {"backbone": "resnet18", "height": 64, "width": 64},
            "imu": {"window": 32, "conv_channels": [8, 16]},
            "fusion": {"dim": 32, "heads": 4, "queries": 2},
            "embed_dim": 32,
        },
        "head": {"hidden": [32]},
    })  # fmt: skip

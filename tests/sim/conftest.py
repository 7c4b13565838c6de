"""Shared fixtures for sim tests (the doubles themselves are in sim_doubles.py)."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest
from sim_doubles import CONTRACT, DummyRobot

from policies.skill_contract import SkillContract


@pytest.fixture(scope="session")
def contract() -> SkillContract:
    return CONTRACT


@pytest.fixture
def dummy() -> DummyRobot:
    robot = DummyRobot()
    robot.connect()
    return robot

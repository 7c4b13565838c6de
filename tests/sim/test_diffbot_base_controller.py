"""DiffBot base controller: skill -> twist mapping, acceleration limits, kinematics and odometry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.skill_contract import SkillContract
from sim.robots.diffbot import constants as C
from sim.robots.diffbot.base_controller import BaseController, integrate_odometry

CONTRACT = SkillContract.load(C.CONTRACT)


def twist(skill: str, **params: float) -> tuple[float, float]:
    k, p = CONTRACT.action(skill, **params)
    cmd = BaseController(CONTRACT, 1).twist_command(np.array([k]), p[None])
    return float(cmd.linear[0]), float(cmd.angular[0])


def test_each_skill_maps_to_its_twist() -> None:
    assert twist("drive", speed=0.4, curvature=-2.0) == pytest.approx((0.4, -0.8))
    assert twist("turn_in_place", turn_rate=1.2) == pytest.approx((0.0, 1.2))
    assert twist("stop", decel=2.0) == pytest.approx((0.0, 0.0))


@settings(max_examples=100, deadline=None)
@given(skill=st.integers(0, 2), unit=st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_twists_stay_within_the_base_limits(skill: int, unit: list[float]) -> None:
    params = CONTRACT.layout.low + np.array(unit) * (CONTRACT.layout.high - CONTRACT.layout.low)
    cmd = BaseController(CONTRACT, 1).twist_command(np.array([skill]), params[None])
    assert 0.0 <= cmd.linear[0] <= 0.5
    assert abs(cmd.angular[0]) <= 1.5
    wheels = BaseController.wheel_speeds(np.array([cmd.linear[0], cmd.angular[0]]))
    assert np.all(np.abs(wheels) <= (0.5 + 1.25 * C.TRACK_WIDTH_M / 2) / C.WHEEL_RADIUS_M + 1e-9)


def test_setpoints_ramp_at_the_allowed_acceleration() -> None:
    base = BaseController(CONTRACT, 1)
    k, p = CONTRACT.action("drive", speed=0.5)
    base.command(base.twist_command(np.array([k]), p[None]), np.array([0]))
    ramp = base.profile(10, 0.005)[0]  # (S, 2)
    np.testing.assert_allclose(np.diff(ramp[:, 0]), C.LINEAR_ACCEL_MPS2 * 0.005)
    for _ in range(20):
        ramp = base.profile(10, 0.005)[0]
    assert ramp[-1, 0] == pytest.approx(0.5)  # reached and held
    k, p = CONTRACT.action("stop", decel=2.0)
    base.command(base.twist_command(np.array([k]), p[None]), np.array([0]))
    stop = base.profile(10, 0.005)[0]
    assert stop[-1, 0] == pytest.approx(0.5 - 2.0 * 0.05)


def test_wheel_kinematics_invert() -> None:
    twists = np.random.default_rng(0).normal(size=(20, 2))
    np.testing.assert_allclose(BaseController.body_twist(BaseController.wheel_speeds(twists)), twists)


def test_odometry_integrates_a_circle() -> None:
    v, w, dt = 0.3, 0.6, 0.005
    wheels = BaseController.wheel_speeds(np.tile([v, w], (1, round(2 * np.pi / w / dt), 1)))  # one full turn
    odom = integrate_odometry(np.zeros((1, 5)), wheels, dt)
    np.testing.assert_allclose(odom[0, :3], [0.0, 0.0, 0.0], atol=2e-3)
    np.testing.assert_allclose(odom[0, 3:], [v, w])


def test_a_contract_without_the_base_skills_is_rejected() -> None:
    data = CONTRACT.model_dump()
    data["skills"][1]["name"] = "spin"
    with pytest.raises(ValueError, match="turn_in_place"):
        BaseController(SkillContract.from_dict(data), 1)

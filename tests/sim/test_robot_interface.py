"""The robot interface: batched clipping, spec checks, env selection and the context manager."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sim_doubles import CONTRACT, DummyRobot

from sim.robot_interface import Outcome, TaskStatus, clip_actions, env_indices

P = CONTRACT.num_params


@settings(max_examples=200, deadline=None)
@given(
    skill=st.integers(-2, 5),
    params=arrays(np.float64, (P,), elements=st.floats(allow_nan=True, allow_infinity=True, width=32)),
)
def test_anything_sent_becomes_a_valid_action(skill: int, params: np.ndarray) -> None:
    applied = clip_actions(CONTRACT, np.array([skill]), params[None], num_envs=1)
    k, p = int(applied.skill[0]), applied.params[0]
    assert 0 <= k < CONTRACT.num_skills
    assert np.all((p >= CONTRACT.layout.low) & (p <= CONTRACT.layout.high))
    if not (0 <= skill < CONTRACT.num_skills) or not np.all(np.isfinite(params)):
        assert k == CONTRACT.safe_skill_id and applied.clipped[0]
    else:  # only the chosen skill's slots count; the others are reset to their defaults
        sl = CONTRACT.layout.slices[skill]
        assert applied.clipped[0] == (not np.array_equal(p[sl], params[sl]))


def test_a_batch_of_the_wrong_shape_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="params must have shape"):
        clip_actions(CONTRACT, np.zeros(2, dtype=int), np.zeros((2, P + 1)), num_envs=2)
    with pytest.raises(ValueError, match="skill must have shape"):
        clip_actions(CONTRACT, np.zeros(3, dtype=int), np.zeros((2, P)), num_envs=2)


def test_env_indices() -> None:
    assert env_indices(None, 3).tolist() == [0, 1, 2]
    assert env_indices([2, 0, 2], 3).tolist() == [0, 2]
    with pytest.raises(ValueError, match="env indices"):
        env_indices([3], 3)


def test_spec_check_names_the_bad_array(dummy: DummyRobot) -> None:
    obs = dummy.reset(seed=0)
    dummy.spec.check(obs)
    with pytest.raises(ValueError, match=r"imu: expected \(2, 8, 6\) float32"):
        dummy.spec.check(dataclasses.replace(obs, imu=obs.imu[:, :3]))
    with pytest.raises(ValueError, match="image"):
        dummy.spec.check(dataclasses.replace(obs, image=None))


def test_context_manager_connects_and_closes() -> None:
    robot = DummyRobot()
    with robot as r:
        assert r is robot and robot.connected
    assert not robot.connected


def test_task_status_derived_fields() -> None:
    status = TaskStatus(
        progress=np.zeros(3, np.float32),
        step=np.zeros(3, np.int64),
        outcome=np.array([Outcome.RUNNING, Outcome.SUCCESS, Outcome.COLLISION], np.int8),
        reward=np.zeros(3, np.float32),
    )
    assert status.done.tolist() == [False, True, True]
    assert status.success.tolist() == [False, True, False]
    assert status.reasons == ["running", "success", "collision"]

"""The marker tour: layouts, progress, outcomes, reward terms and the privileged state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import RewardWeights, TaskConfig
from sim.marker_task import Layout, MarkerTask, privileged_fields
from sim.robots.diffbot import constants as C

SAFE = 2


def task(n: int = 1, **cfg: object) -> MarkerTask:
    return MarkerTask(TaskConfig.from_dict(cfg), num_envs=n, control_hz=20, safe_skill=SAFE)


def layout() -> Layout:
    return Layout(
        markers=np.array([[1.0, 0.0], [1.0, 1.0], [-1.0, 1.0]]),
        obstacles=np.array([[-1.0, -1.0], [0.0, -1.5], [1.2, -1.2]]),
        start=np.array([0.0, 0.0, 0.0]),
    )


def step(t: MarkerTask, x: float, y: float, bumped: bool = False, nan: bool = False) -> None:
    """One control step of a 1-env task ending at (x, y) with the drive skill."""
    t.update(np.array([[x, y, 0.0]]), np.array([0]), np.array([bumped]), np.array([nan]), ~t.status().done)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), obstacles=st.integers(0, 4), markers=st.integers(1, 4))
def test_every_layout_is_feasible(seed: int, obstacles: int, markers: int) -> None:
    colours = list(C.MARKER_COLOURS[:markers])
    t = task(markers=colours, num_obstacles=obstacles)
    lay = t.sample_layout(np.random.default_rng(seed))
    half = C.ARENA_HALF_SIZE_M
    assert lay.markers.shape == (markers, 2) and lay.obstacles.shape == (obstacles, 2)
    assert np.all(np.abs(lay.start[:2]) <= half - C.ROBOT_RADIUS_M - 0.1)
    assert np.all(np.abs(lay.markers) <= half - C.ROBOT_RADIUS_M)
    points = np.vstack([lay.start[:2], lay.markers])
    gaps = np.linalg.norm(points[:, None] - points[None], axis=2) + np.eye(len(points)) * 9
    assert gaps.min() >= t.cfg.marker_spacing_m
    body = C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M
    for o in lay.obstacles:
        assert np.linalg.norm(lay.markers - o, axis=1).min() >= body + t.cfg.reach_radius_m  # reachable
        assert np.linalg.norm(lay.start[:2] - o) > body  # the robot does not start in contact
        assert half - np.abs(o).max() - C.OBSTACLE_RADIUS_M >= 2 * C.ROBOT_RADIUS_M  # passable along the wall
    if obstacles > 1:
        d = np.linalg.norm(lay.obstacles[:, None] - lay.obstacles[None], axis=2) + np.eye(obstacles) * 9
        assert d.min() - 2 * C.OBSTACLE_RADIUS_M >= 2 * C.ROBOT_RADIUS_M  # passable between obstacles


def test_markers_count_in_order_and_the_tour_succeeds() -> None:
    t = task()
    t.begin(0, layout(), np.zeros(3))
    step(t, -1.0, 1.0)  # standing on the blue marker first does not count
    assert t.status().progress[0] == 0.0
    for k, (x, y) in enumerate([(1.0, 0.1), (1.0, 0.9), (-0.9, 1.0)]):
        step(t, x, y)
        assert t.status().progress[0] == pytest.approx((k + 1) / 3)
        assert t.status().reward_terms["reached"][0] == 1.0
    status = t.status()
    assert status.reasons == ["success"] and status.reward_terms["success"][0] == 1.0


@pytest.mark.parametrize(("bumped", "nan", "reason"), [(True, False, "collision"), (False, True, "nan")])
def test_failures_end_the_episode(bumped: bool, nan: bool, reason: str) -> None:
    t = task()
    t.begin(0, layout(), np.zeros(3))
    step(t, 0.1, 0.0, bumped=bumped, nan=nan)
    assert t.status().reasons == [reason] and t.status().done[0]
    assert t.status().reward_terms["collision"][0] == float(bumped)
    assert (t.status().reward[0] < -4.0) == bumped  # the collision weight dominates the step's reward


def test_timeout() -> None:
    t = task(time_limit_s=0.2)
    t.begin(0, layout(), np.zeros(3))
    for _ in range(4):
        step(t, 0.0, 0.0)
    assert t.status().reasons == ["timeout"] and t.status().step[0] == 4


def test_reward_is_the_weighted_sum_of_named_terms() -> None:
    assert set(task().reward_names) == set(RewardWeights.model_fields)
    for name in RewardWeights.model_fields:
        assert callable(getattr(MarkerTask, f"_reward_{name}"))
    t = task()
    t.begin(0, layout(), np.zeros(3))
    step(t, 0.3, 0.0)  # 0.3 m closer to the red marker
    status = t.status()
    assert status.reward_terms["progress"][0] == pytest.approx(0.3)
    assert status.reward_terms["time"][0] == 1.0 and status.reward_terms["skill_switch"][0] == 1.0
    weights = RewardWeights()
    expected = sum(getattr(weights, k) * v[0] for k, v in status.reward_terms.items())
    assert status.reward[0] == pytest.approx(expected, rel=1e-5)


def test_clearance_grows_near_hazards() -> None:
    t = task()
    t.begin(0, layout(), np.zeros(3))
    step(t, -1.0, -1.0 + C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M + 0.05)  # 5 cm from an obstacle
    assert t.status().reward_terms["clearance"][0] == pytest.approx(1 - 0.05 / 0.15, abs=1e-5)


def test_privileged_state_is_in_the_robot_frame() -> None:
    t = task()
    t.begin(0, layout(), np.zeros(3))
    pose = np.array([[0.0, 0.0, np.pi / 2]])  # facing +y: the red marker at (1, 0) is on the right
    priv = t.privileged(pose, np.array([[0.2, 0.1]]))[0]
    f = {name: priv[i] for i, name in enumerate(t.fields)}
    assert len(priv) == len(privileged_fields(3)) == len(t.fields)
    assert f["target_dx_m"] == pytest.approx(0.0, abs=1e-6) and f["target_dy_m"] == pytest.approx(-1.0)
    assert f["target_cos"] == pytest.approx(0.0, abs=1e-6) and f["target_sin"] == pytest.approx(-1.0)
    assert f["next_dx_m"] == pytest.approx(1.0) and f["next_dy_m"] == pytest.approx(-1.0)
    gaps = [f[f"obstacle{k}_gap_m"] for k in range(3)]
    assert gaps == sorted(gaps)  # nearest first
    assert f["v_mps"] == pytest.approx(0.2) and f["time_left"] == 1.0


def test_crowded_configs_fail_with_a_message_naming_the_fields() -> None:
    t = task(marker_spacing_m=5.0)
    with pytest.raises(RuntimeError, match="marker_spacing_m"):
        t.sample_layout(np.random.default_rng(0))


def test_an_episode_is_scored_per_env() -> None:
    t = task(n=2)
    for i in range(2):
        t.begin(i, layout(), np.zeros(3))
    t.update(np.zeros((2, 3)), np.array([0, 2]), np.array([True, False]), np.zeros(2, bool), np.ones(2, bool))
    assert t.status().reasons == ["collision", "running"]
    assert t.status().reward_terms["skill_switch"].tolist() == [1.0, 0.0]  # env 1 kept the safe skill


def test_turning_towards_the_marker_earns_the_heading_term() -> None:
    t = task()
    t.begin(0, layout(), np.array([0.0, 0.0, np.pi / 2]))  # the red marker at (1, 0) is 90 degrees right
    no = np.array([False])
    t.update(np.array([[0.0, 0.0, np.pi / 4]]), np.array([1]), no, no, ~no)  # turned 45 degrees towards it
    assert t.status().reward_terms["heading"][0] == pytest.approx(np.pi / 4)
    assert t.status().reward_terms["progress"][0] == pytest.approx(0.0)

"""MuJoCo backend: spec, stamps, reproducibility, clipping, faults and bad models."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import mujoco
import numpy as np
import pytest
from sim_doubles import sim_config

from sim.mujoco_backend import MjcfError, MujocoBackend, RenderError
from sim.robot_interface import DynamicsScales, Observation, Outcome
from sim.robots.diffbot import constants as C

REFERENCE = Path(__file__).parent / "data" / "mujoco_reference.npz"


def zero_action(backend: MujocoBackend) -> tuple[np.ndarray, np.ndarray]:
    n, p = backend.spec.num_envs, backend.spec.contract.num_params
    return np.zeros(n, dtype=np.int64), np.zeros((n, p))


def finite(obs: Observation) -> bool:
    arrays = [obs.time_s, obs.imu, obs.imu_stamps_s, obs.proprio, obs.privileged, obs.task.reward]
    arrays += [] if obs.image is None else [obs.image_stamp_s]
    return all(np.isfinite(a).all() for a in arrays)


@pytest.mark.parametrize("camera", [False, True])
def test_reset_and_zero_action_step_match_the_spec(camera: bool) -> None:
    with MujocoBackend(sim_config(num_envs=2, camera={"enabled": camera})) as robot:
        obs = robot.reset(seed=0)
        robot.spec.check(obs)
        applied = robot.send_action(*zero_action(robot))
        assert applied.clipped.all()  # a zero speed is below the drive skill's bound
        obs = robot.step()
        robot.spec.check(obs)
        assert finite(obs)
        assert (obs.image is not None) == camera


def test_stamps_are_honest_and_monotonic() -> None:
    with MujocoBackend(sim_config(num_envs=1)) as robot:
        obs = robot.reset(seed=1)
        times = [obs.time_s[0]]
        for _ in range(12):
            previous = obs
            robot.send_action(np.array([0]), np.array([[0.3, 0.5, 0.0, 1.0]]))
            obs = robot.step()
            times.append(obs.time_s[0])
            np.testing.assert_allclose(np.diff(obs.imu_stamps_s[0]), 1 / 200)  # one sample per IMU period
            assert obs.imu_stamps_s[0, -1] == pytest.approx(obs.time_s[0])  # measured up to now
            new = obs.imu_stamps_s[0] > previous.time_s[0]
            assert new.sum() == 10  # every sample of the period, none twice
            assert 0 <= obs.time_s[0] - obs.image_stamp_s[0] < 1 / 15  # the newest frame
        np.testing.assert_allclose(np.diff(times), 0.05)
        again = robot.reset(seed=1)
        assert again.time_s[0] > times[-1]  # the clock never rewinds
        assert again.task.step[0] == 0


def test_seeded_runs_are_reproducible() -> None:
    def run(seed: int) -> list[Observation]:
        rng = np.random.default_rng(0)
        with MujocoBackend(sim_config(num_envs=2)) as robot:
            out = [robot.reset(seed=seed)]
            for _ in range(8):
                c = robot.spec.contract
                robot.send_action(rng.integers(0, 3, 2), rng.uniform(c.layout.low, c.layout.high, (2, 4)))
                out.append(robot.step())
        return out

    a, b, c = run(7), run(7), run(8)
    for x, y in zip(a, b, strict=True):
        for name in ("time_s", "image", "image_stamp_s", "imu", "imu_stamps_s", "proprio", "privileged"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
    assert not np.array_equal(a[0].privileged, c[0].privileged)


def test_a_reset_depends_on_the_seed_only() -> None:
    with MujocoBackend(sim_config(num_envs=1)) as robot:
        first = robot.reset(seed=3)
        for _ in range(7):  # move the clock off the sensor phase of the first reset
            robot.send_action(np.array([0]), np.array([[0.5, 0.0, 0.0, 1.0]]))
            robot.step()
        second = robot.reset(seed=3)
    np.testing.assert_array_equal(first.privileged, second.privileged)
    np.testing.assert_array_equal(first.image, second.image)
    np.testing.assert_array_equal(first.imu, second.imu)
    np.testing.assert_allclose(first.time_s - first.image_stamp_s, second.time_s - second.image_stamp_s)


def test_partial_reset_leaves_other_envs_alone() -> None:
    with MujocoBackend(sim_config(num_envs=2, camera={"enabled": False})) as robot:
        robot.reset(seed=0)
        robot.send_action(np.array([0, 0]), np.array([[0.5, 0.0, 0.0, 1.0]] * 2))
        before = robot.step()
        after = robot.reset(seed=9, envs=[1])
    np.testing.assert_array_equal(after.privileged[0], before.privileged[0])
    assert after.time_s[0] == before.time_s[0] and after.time_s[1] > before.time_s[1]
    assert after.task.step.tolist() == [1, 0]


def test_send_action_clips_to_the_contract_and_the_robot_executes_the_clipped_action() -> None:
    with MujocoBackend(sim_config(num_envs=1, camera={"enabled": False}, task={"num_obstacles": 0})) as robot:
        robot.reset(seed=2)
        applied = robot.send_action(np.array([0]), np.array([[5.0, 0.0, 9.0, -3.0]]))
        assert applied.clipped[0] and applied.reasons[0] == "out of bounds"
        np.testing.assert_allclose(applied.params[0], [0.5, 0.0, 0.0, 1.0])  # other skills' slots: defaults
        v = robot.spec.privileged_fields.index("v_mps")
        for _ in range(20):
            robot.send_action(np.array([0]), np.array([[5.0, 0.0, 0.0, 1.0]]))
            obs = robot.step()
            assert obs.privileged[0, v] <= 0.5 + 0.02
        assert obs.privileged[0, v] > 0.45
        bad = robot.send_action(np.array([7]), np.array([[np.nan, 0, 0, 0]]))
        assert bad.skill[0] == robot.spec.contract.safe_skill_id


def test_a_command_to_a_closed_robot_is_refused_not_lost() -> None:
    robot = MujocoBackend(sim_config(num_envs=1, camera={"enabled": False}))
    with pytest.raises(RuntimeError, match="not connected"):  # before connect
        robot.send_action(*zero_action(robot))
    with robot:
        robot.reset(seed=0)
        robot.send_action(*zero_action(robot))
    with pytest.raises(RuntimeError, match="not connected"):  # after close
        robot.send_action(*zero_action(robot))


def test_driving_into_a_wall_is_a_collision() -> None:
    weight = sim_config().task.rewards.collision
    with MujocoBackend(sim_config(num_envs=4, camera={"enabled": False}, task={"num_obstacles": 0})) as robot:
        obs = robot.reset(seed=0)
        while not obs.task.done.all():
            running = ~obs.task.done
            robot.send_action(np.zeros(4, dtype=np.int64), np.tile([0.5, 0.0, 0.0, 1.0], (4, 1)))
            obs = robot.step()
            hit = running & (obs.task.outcome == Outcome.COLLISION)
            np.testing.assert_array_equal(obs.task.reward_terms["collision"][hit], 1.0)
            assert np.all(obs.task.reward[hit] <= weight + 1.0)
    assert (obs.task.outcome == Outcome.COLLISION).any()


def test_nan_state_ends_that_episode_as_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    with MujocoBackend(sim_config(num_envs=2, camera={"enabled": False})) as robot:
        robot.reset(seed=0)
        robot.data(0).qvel[:] = np.nan
        with caplog.at_level(logging.WARNING):
            obs = robot.step()
        assert obs.task.reasons == ["nan", "running"]
        assert "non-finite" in caplog.text and "env 0" in caplog.text
        assert finite(obs)
        held = robot.step()  # an ended episode holds until it is reset
        np.testing.assert_array_equal(held.privileged[0], obs.privileged[0])
        assert robot.reset(envs=[0]).task.reasons == ["running", "running"]


def test_dynamics_scales_apply_from_the_next_reset() -> None:
    speeds = []
    for motor in (1.0, 0.3):
        cfg = sim_config(num_envs=1, camera={"enabled": False}, task={"num_obstacles": 0})
        with MujocoBackend(cfg) as robot:
            robot.set_dynamics(DynamicsScales(np.ones(1), np.ones(1), np.full(1, motor)))
            robot.reset(seed=0)
            for _ in range(3):
                robot.send_action(np.array([0]), np.array([[0.5, 0.0, 0.0, 1.0]]))
                obs = robot.step()
            speeds.append(obs.privileged[0, robot.spec.privileged_fields.index("v_mps")])
    assert speeds[1] < 0.7 * speeds[0]


def test_invalid_mjcf_is_rejected_naming_the_element(tmp_path: Path) -> None:
    robot_xml = C.ROBOT_MJCF.read_text()
    arena_xml = C.ARENA_MJCF.read_text()
    (tmp_path / "robot.xml").write_text(robot_xml.replace('size="0.15 0.03"', 'size="0.15 oops"'))
    (tmp_path / "arena.xml").write_text(arena_xml)
    with pytest.raises(MjcfError, match="size"):
        MujocoBackend(sim_config(mujoco={"mjcf": str(tmp_path / "arena.xml")}))
    (tmp_path / "robot.xml").write_text(robot_xml.replace('<touch name="bumper" site="bumper"/>', ""))
    with pytest.raises(MjcfError, match="bumper"):
        MujocoBackend(sim_config(mujoco={"mjcf": str(tmp_path / "arena.xml")}))
    with pytest.raises(MjcfError, match=r"mujoco\.mjcf"):
        MujocoBackend(sim_config(mujoco={"mjcf": str(tmp_path / "missing.xml")}))


def test_missing_gl_backend_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_gl(*args: object, **kwargs: object) -> None:
        raise mujoco.FatalError("gladLoadGL error")

    monkeypatch.setattr(mujoco, "Renderer", no_gl)
    with pytest.raises(RenderError, match=r"MUJOCO_GL.*camera\.enabled: false"):
        MujocoBackend(sim_config()).connect()


def test_rendering_is_fast_enough_for_the_default_camera() -> None:
    """Guards the fast render settings (a shadow map alone costs ~30x); generous for loaded CI machines."""
    import time

    with MujocoBackend(sim_config(num_envs=1)) as robot:
        robot.reset(seed=0)
        start = time.perf_counter()
        for _ in range(30):
            robot.step()
        assert (time.perf_counter() - start) / 30 < 0.025


def test_numbers_match_the_stored_reference() -> None:
    """Catches numeric drift (MuJoCo upgrades, model edits). Regenerate after an intended change with
    `REGENERATE_REFERENCE=1 .venv/bin/pytest tests/sim/test_mujoco_backend.py -k reference`."""
    from sim.scripted_controller import ScriptedController

    with MujocoBackend(sim_config(num_envs=1, camera={"enabled": False})) as robot:
        obs, controller = robot.reset(seed=11), ScriptedController(robot.spec)
        privileged, imu = [obs.privileged[0]], [obs.imu[0, -1]]
        for _ in range(20):
            robot.send_action(*controller.act(obs.privileged))
            obs = robot.step()
            privileged.append(obs.privileged[0])
            imu.append(obs.imu[0, -1])
    got = {"privileged": np.array(privileged), "imu": np.array(imu)}
    if os.environ.get("REGENERATE_REFERENCE"):
        np.savez(REFERENCE, **got)
    ref = np.load(REFERENCE)
    for name, value in got.items():
        np.testing.assert_allclose(value, ref[name], atol=1e-4, err_msg=name)


def test_a_marker_two_metres_ahead_shows_in_the_students_camera() -> None:
    """Each marker carries a visual-only beacon: a floor disc alone is about one pixel tall at this range in
    the 64 px camera, so a student could not find a marker it is not almost on."""
    model = mujoco.MjModel.from_xml_path(str(C.ARENA_MJCF))
    for colour in C.MARKER_COLOURS:
        g = model.geom(f"beacon_{colour}")
        assert g.contype == 0 and g.conaffinity == 0  # never touches anything: the physics are unchanged
        assert g.size[:2] == pytest.approx([C.BEACON_RADIUS_M, C.BEACON_HEIGHT_M / 2])
    cfg = sim_config(num_envs=1, camera={"width": 64, "height": 64})
    with MujocoBackend(cfg) as robot:
        fields = list(robot.spec.privileged_fields)
        obs = robot.reset(seed=4)  # a layout with the first (red) marker ahead, in clear view
        target = dict(zip(fields, obs.privileged[0], strict=True))
        assert abs(np.arctan2(target["target_sin"], target["target_cos"])) < np.radians(10)
        assert target["target_dist_m"] > 2.5
        rgb = obs.image[0].astype(int)  # (64, 64, 3)
        red = (rgb[..., 0] > 60) & (rgb[..., 0] > 2 * rgb[..., 1]) & (rgb[..., 0] > 2 * rgb[..., 2])
        assert red.sum() >= 6, f"the red marker at {target['target_dist_m']:.2f} m shows on {red.sum()} px"

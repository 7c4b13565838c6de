"""The real-robot proxy: identity when ideal, exact latency shifts, degradations, dynamics, seeding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_doubles import DummyRobot, sim_config

from policies.config import ConfigError
from sim.mujoco_backend import MujocoBackend
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy
from sim.robot_interface import Observation, RobotInterface

PERIOD_S = 1.0 / DummyRobot.CONTROL_HZ


def ideal(**changes: dict) -> ProxyConfig:
    """A proxy config with every latency, noise and randomisation off, then `changes` per section."""
    cfg = {
        "camera": {"latency_s": 0, "jitter_s": 0, "drop_prob": 0, "hold_prob": 0, "noise_std": 0,
                   "blur_sigma_px": 0, "exposure_std": 0},
        "imu": {"latency_s": 0, "jitter_s": 0, "accel_noise_std": 0, "gyro_noise_std": 0, "accel_bias_std": 0,
                "gyro_bias_std": 0, "accel_bias_walk": 0, "gyro_bias_walk": 0},
        "odometry": {"latency_s": 0, "jitter_s": 0},
        "dynamics": {"mass_scale": [1, 1], "friction_scale": [1, 1], "motor_scale": [1, 1],
                     "action_latency_s": 0, "action_jitter_s": 0},
    }  # fmt: skip
    for section, values in changes.items():
        cfg[section].update(values)
    return ProxyConfig.from_dict(cfg)


def rollout(robot: RobotInterface, steps: int, seed: int = 0) -> tuple[list[Observation], list]:
    """Reset, then drive with seeded random actions. Returns the observations and the applied actions."""
    rng = np.random.default_rng(seed)
    c = robot.spec.contract
    observations, applied = [robot.reset(seed=seed)], []
    for _ in range(steps):
        skill = rng.integers(0, c.num_skills, robot.spec.num_envs)
        params = rng.uniform(c.layout.low, c.layout.high, (robot.spec.num_envs, c.num_params))
        applied.append(robot.send_action(skill, params))
        observations.append(robot.step())
    return observations, applied


def assert_same(a: Observation, b: Observation, arrivals: bool = True) -> None:
    """Equal observations (IMU arrival times too, unless `arrivals` is False)."""
    for f in dataclasses.fields(Observation):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "imu_arrival_s" and not arrivals:
            continue
        if f.name == "task":
            for g in dataclasses.fields(x):
                np.testing.assert_equal(getattr(x, g.name), getattr(y, g.name), err_msg=f"task.{g.name}")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f.name)


def test_ideal_proxy_is_identical_to_the_wrapped_backend() -> None:
    cfg = sim_config(num_envs=2, task={"num_obstacles": 2})
    with MujocoBackend(cfg) as plain, RealRobotProxy(MujocoBackend(cfg), ideal()) as proxy:
        (obs_a, act_a), (obs_b, act_b) = rollout(plain, 12), rollout(proxy, 12)
    for a, b in zip(obs_a, obs_b, strict=True):
        assert_same(a, b, arrivals=False)
        assert a.imu_arrival_s is None  # a simulator's samples arrive when taken; so do an ideal proxy's
        np.testing.assert_array_equal(b.imu_arrival_s, b.imu_stamps_s)
    for a, b in zip(act_a, act_b, strict=True):
        np.testing.assert_array_equal(a.params, b.params)
        np.testing.assert_array_equal(a.skill, b.skill)


@settings(max_examples=15, deadline=None)
@given(k_cam=st.integers(0, 4), k_imu=st.integers(0, 4), k_odom=st.integers(0, 4))
def test_latency_of_l_seconds_shifts_each_stream_by_l(k_cam: int, k_imu: int, k_odom: int) -> None:
    latency = {"camera": {"latency_s": k_cam * PERIOD_S}, "imu": {"latency_s": k_imu * PERIOD_S},
               "odometry": {"latency_s": k_odom * PERIOD_S}}  # fmt: skip
    ref, late = RealRobotProxy(DummyRobot(), ideal()), RealRobotProxy(DummyRobot(), ideal(**latency))
    ref.connect(), late.connect()
    (obs_ref, _), (obs_late, _) = rollout(ref, 16), rollout(late, 16)
    for t, o in enumerate(obs_late):
        # Before a stream's latency has elapsed it still shows what the reset delivered (step 0).
        cam, imu, odom = (obs_ref[max(t - k, 0)] for k in (k_cam, k_imu, k_odom))
        np.testing.assert_array_equal(o.image_stamp_s, cam.image_stamp_s)
        np.testing.assert_array_equal(o.image, cam.image)
        np.testing.assert_array_equal(o.imu_stamps_s, imu.imu_stamps_s)
        np.testing.assert_array_equal(o.imu, imu.imu)
        # Each IMU sample arrived after it was taken and by the observation; one taken after the reset
        # arrived exactly the latency later (the reset delivers what it measured by its end).
        assert np.all(o.imu_stamps_s <= o.imu_arrival_s)
        assert np.all(o.imu_arrival_s <= o.time_s[:, None] + 1e-9)
        if t > k_imu:
            np.testing.assert_allclose(o.imu_arrival_s[:, -1], o.imu_stamps_s[:, -1] + k_imu * PERIOD_S)
        np.testing.assert_array_equal(o.proprio_stamp_s, odom.proprio_stamp_s)
        np.testing.assert_array_equal(o.proprio, odom.proprio)
        # the teacher's side is never delayed
        np.testing.assert_array_equal(o.time_s, obs_ref[t].time_s)
        np.testing.assert_array_equal(o.privileged, obs_ref[t].privileged)


def test_camera_latency_shifts_mujoco_frames() -> None:
    cfg = sim_config(task={"num_obstacles": 0})
    k = 2
    with (
        RealRobotProxy(MujocoBackend(cfg), ideal()) as ref,
        RealRobotProxy(MujocoBackend(cfg), ideal(camera={"latency_s": k * 0.05})) as late,
    ):
        (obs_ref, _), (obs_late, _) = rollout(ref, 10), rollout(late, 10)
    for t in range(k, 11):
        np.testing.assert_array_equal(obs_late[t].image_stamp_s, obs_ref[t - k].image_stamp_s)
        np.testing.assert_array_equal(obs_late[t].image, obs_ref[t - k].image)
        assert obs_late[t].time_s - obs_late[t].image_stamp_s >= k * 0.05 - 1e-9


@settings(max_examples=10, deadline=None)
@given(jitter=st.floats(0.0, 0.3), seed=st.integers(0, 1000))
def test_jitter_never_reorders_deliveries(jitter: float, seed: int) -> None:
    cfg = ideal(camera={"latency_s": 0.05, "jitter_s": jitter}, imu={"latency_s": 0.01, "jitter_s": jitter})
    proxy = RealRobotProxy(DummyRobot(), cfg)
    proxy.connect()
    observations, _ = rollout(proxy, 20, seed=seed)
    stamps = np.stack([o.image_stamp_s for o in observations])  # (T, N)
    assert np.all(np.diff(stamps, axis=0) >= 0)
    for o in observations:
        assert np.all(np.diff(o.imu_stamps_s, axis=1) >= 0)
        assert np.all(o.imu_stamps_s <= o.time_s[:, None])


def test_dropped_frames_keep_the_previous_one_and_held_frames_repeat_its_image() -> None:
    dropped = RealRobotProxy(DummyRobot(), ideal(camera={"drop_prob": 1.0}))
    held = RealRobotProxy(DummyRobot(), ideal(camera={"hold_prob": 1.0}))
    dropped.connect(), held.connect()
    (obs_drop, _), (obs_hold, _) = rollout(dropped, 10), rollout(held, 10)
    assert all(np.array_equal(o.image_stamp_s, obs_drop[0].image_stamp_s) for o in obs_drop)
    assert obs_hold[-1].image_stamp_s[0] > obs_hold[0].image_stamp_s[0]  # new stamps ...
    assert all(np.array_equal(o.image, obs_hold[0].image) for o in obs_hold)  # ... on the frozen image


def test_imu_white_noise_and_bias_have_the_configured_size() -> None:
    ref = RealRobotProxy(DummyRobot(), ideal())
    noisy = RealRobotProxy(DummyRobot(), ideal(imu={"accel_noise_std": 0.2, "gyro_noise_std": 0.02}))
    biased = RealRobotProxy(DummyRobot(), ideal(imu={"accel_bias_std": 0.5}))
    for p in (ref, noisy, biased):
        p.connect()
    (a, _), (b, _), (c, _) = rollout(ref, 40), rollout(noisy, 40), rollout(biased, 40)
    noise = np.concatenate([o.imu - r.imu for o, r in zip(b, a, strict=True)], axis=1)  # (N, T*W, 6)
    np.testing.assert_allclose(noise[..., :3].std(), 0.2, rtol=0.15)
    np.testing.assert_allclose(noise[..., 3:].std(), 0.02, rtol=0.15)
    bias = np.stack([o.imu - r.imu for o, r in zip(c, a, strict=True)])  # (T, N, W, 6)
    assert np.allclose(bias[..., 3:], 0.0)  # gyro bias std is 0
    assert np.allclose(bias[..., :3], bias[:1, :, :1, :3], atol=1e-5)  # constant within an episode
    assert not np.allclose(bias[0, 0, 0, :3], bias[0, 1, 0, :3])  # and drawn per env


def test_image_noise_has_the_configured_size() -> None:
    ref = RealRobotProxy(DummyRobot(), ideal())
    noisy = RealRobotProxy(DummyRobot(), ideal(camera={"noise_std": 6.0}))
    ref.connect(), noisy.connect()
    (a, _), (b, _) = rollout(ref, 30), rollout(noisy, 30)
    diff = np.stack([o.image.astype(float) - r.image for o, r in zip(b, a, strict=True)])
    np.testing.assert_allclose(diff.std(), 6.0, rtol=0.15)


def test_dynamics_scales_are_drawn_per_env_within_their_ranges() -> None:
    robot = DummyRobot(num_envs=4)
    proxy = RealRobotProxy(robot, ideal(dynamics={"mass_scale": [0.5, 2.0], "motor_scale": [0.8, 0.9]}))
    proxy.connect()
    proxy.reset(seed=3)
    (scales,) = robot.scales
    assert np.all((scales.mass >= 0.5) & (scales.mass <= 2.0)) and len(set(scales.mass)) == 4
    assert np.all((scales.motor >= 0.8) & (scales.motor <= 0.9))
    np.testing.assert_array_equal(scales.friction, 1.0)
    nominal = DummyRobot()
    RealRobotProxy(nominal, ideal()).reset(seed=3)
    assert nominal.scales == []  # nothing to randomise: the backend is left alone


def test_randomised_dynamics_change_the_mujoco_trajectory() -> None:
    cfg = sim_config(task={"num_obstacles": 0})
    heavy = ideal(dynamics={"mass_scale": [3.0, 3.0], "motor_scale": [0.3, 0.3]})
    drive = (np.array([0]), np.array([[0.5, 0.0, 0.0, 1.0]]))
    speeds = []
    for proxy_cfg in (ideal(), heavy):
        with RealRobotProxy(MujocoBackend(cfg), proxy_cfg) as proxy:
            proxy.reset(seed=0)
            for _ in range(4):
                proxy.send_action(*drive)
                obs = proxy.step()
            speeds.append(obs.privileged[0, proxy.spec.privileged_fields.index("v_mps")])
    assert speeds[1] < 0.8 * speeds[0]


def test_action_latency_delays_execution_by_whole_control_periods() -> None:
    skills = []
    for latency in (0.0, 2 * PERIOD_S):
        proxy = RealRobotProxy(DummyRobot(num_envs=1), ideal(dynamics={"action_latency_s": latency}))
        proxy.connect()
        proxy.reset(seed=0)
        drive = proxy.spec.contract.action("drive", speed=0.3)
        seen = []
        for _ in range(5):
            applied = proxy.send_action(np.array([drive[0]]), drive[1][None])
            assert applied.skill[0] == drive[0]  # what will run, after clipping
            seen.append(int(proxy.step().skill[0]))
        skills.append(seen)
    stop, go = proxy.spec.contract.safe_skill_id, drive[0]
    assert skills[0] == [go] * 5
    assert skills[1] == [stop, stop, go, go, go]


def test_seeded_proxies_match_and_other_seeds_differ() -> None:
    cfg = ProxyConfig()  # every degradation on
    runs = []
    for seed in (5, 5, 6):
        proxy = RealRobotProxy(DummyRobot(), cfg)
        proxy.connect()
        runs.append(rollout(proxy, 15, seed=seed)[0])
    for a, b in zip(runs[0], runs[1], strict=True):
        assert_same(a, b)
    assert not all(np.array_equal(a.imu, c.imu) for a, c in zip(runs[0], runs[2], strict=True))


def test_works_without_a_camera() -> None:
    proxy = RealRobotProxy(DummyRobot(camera=False), ProxyConfig())
    proxy.connect()
    obs, _ = rollout(proxy, 3)
    assert obs[-1].image is None and obs[-1].image_stamp_s is None


def test_config_loads_from_yaml_and_names_bad_fields() -> None:
    cfg = ProxyConfig.from_yaml("sim/configs/proxy.yaml")
    assert cfg.camera.latency_s == pytest.approx(0.12)
    with pytest.raises(ConfigError, match="mass_scale"):
        ProxyConfig.from_dict({"dynamics": {"mass_scale": [1.2, 0.8]}})
    with pytest.raises(ConfigError, match=r"camera\.latency_s"):
        ProxyConfig.from_dict({"camera": {"latency_s": -0.1}})

"""The gap proxy (sim/configs/proxy_gap.yaml): each factor on alone changes its own stream and no other; the
sim's own look is untouched; bad presets are refused naming the field."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
from sim_doubles import sim_config

from policies.config import ConfigError, from_root
from sim.camera_effects import CameraEffects
from sim.gap_factors import FACTORS, IDEAL, factor_config, ideal
from sim.marker_task import privileged_fields
from sim.mujoco_backend import MujocoBackend
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy
from sim.robot_interface import Observation
from sim.robots.diffbot import constants as C
from sim.room_appearance import RoomConfig, RoomSampler

GAP = from_root("sim/configs/proxy_gap.yaml")
CAMERA = {"width": 64, "height": 32}
FIELDS = privileged_fields(sim_config().task.num_obstacles)


def run(proxy: ProxyConfig | None, steps: int = 12, seed: int = 4, envs: int = 2) -> list[Observation]:
    """Reset, then drive a curve: the observations, on the MuJoCo default with a small camera."""
    cfg = sim_config(num_envs=envs, camera=CAMERA)
    backend = MujocoBackend(cfg)
    robot = backend if proxy is None else RealRobotProxy(backend, proxy)
    with robot:
        out = [robot.reset(seed=seed)]
        skill, params = robot.spec.contract.action("drive", speed=0.4, curvature=1.0)
        for _ in range(steps):
            robot.send_action(np.full(envs, skill), np.tile(params, (envs, 1)))
            out.append(robot.step())
    return out


PRESET = ProxyConfig.from_yaml(GAP)
# The streams each factor alone must change: image, IMU, motion (the true pose). Dynamics move the robot, so
# its camera and IMU see other things too.
CHANGES = {
    "sensors": {"image", "imu", "motion"}, "action_latency": {"image", "imu", "motion"},
    "floor_slip": {"image", "imu", "motion"}, "motors": {"image", "imu", "motion"},
    "wheels": {"image", "imu", "motion"}, "imu_mount": {"imu"}, "lens": {"image"}, "room": {"image"},
}  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> list[Observation]:
    return run(ideal())


def test_the_factors_split_the_preset_without_overlap() -> None:
    assert set(CHANGES) == set(FACTORS)
    paths = [path for fields in FACTORS.values() for path in fields]
    assert len(set(paths)) == len(paths) and not any(b.startswith(a + ".") for a in paths for b in paths)
    data = ideal().model_dump()
    for name, fields in FACTORS.items():
        one = factor_config(PRESET, name).model_dump()
        for path in fields:
            *parents, leaf = path.split(".")
            src, dst = one, data
            for key in parents:
                src, dst = src[key], dst[key]
            dst[leaf] = src[leaf]
    assert data == PRESET.model_dump()  # every field the preset changes belongs to a factor


@pytest.mark.parametrize("name", list(FACTORS))
def test_each_factor_alone_changes_its_streams_and_no_other(name: str, reference: list[Observation]) -> None:
    changes = CHANGES[name]
    obs = run(factor_config(PRESET, name))
    changed = {
        "image": not all(np.array_equal(a.image, b.image) for a, b in zip(obs, reference, strict=True)),
        "imu": not all(np.allclose(a.imu, b.imu) for a, b in zip(obs, reference, strict=True)),
        "motion": not np.allclose(obs[-1].privileged, reference[-1].privileged),
    }
    assert {k for k, v in changed.items() if v} == changes


def test_the_preset_turns_every_factor_on_and_keeps_todays_sensor_effects() -> None:
    today = ProxyConfig.from_yaml(from_root("sim/configs/proxy.yaml"))
    assert PRESET.camera == today.camera and PRESET.odometry == today.odometry  # 120 ms camera latency kept
    assert PRESET.room.active and CameraEffects(PRESET.lens, 32, 64, 2.0).active and PRESET.dynamics.motors
    assert PRESET.dynamics.friction_scale[0] < 1.0 and PRESET.dynamics.wheel_radius_mismatch > 0
    assert PRESET.imu.misalignment_rad > 0 and PRESET.room.light.shadows != "none"


def test_an_env_without_a_room_renders_as_the_sim_beside_one_with_a_room() -> None:
    plain = run(None)
    cfg = sim_config(num_envs=2, camera=CAMERA)
    room = RoomSampler(PRESET.room, from_root("."), C.MARKER_COLOURS).draw(np.random.default_rng(0))
    with MujocoBackend(cfg) as backend:
        backend.set_appearance([room, None])
        first = backend.reset(seed=4)
    assert np.array_equal(first.image[1], plain[0].image[1])  # env 1: the sim's look, bit for bit
    assert not np.array_equal(first.image[0], plain[0].image[0])


def test_a_gap_run_is_seeded_and_never_touches_the_physics_of_an_ideal_one() -> None:
    a, b = run(PRESET, steps=6), run(PRESET, steps=6)
    assert all(
        np.array_equal(x.image, y.image) and np.array_equal(x.imu, y.imu) for x, y in zip(a, b, strict=True)
    )
    assert np.all(np.isfinite(a[-1].imu)) and a[-1].image.dtype == np.uint8


def test_wider_wheels_drive_farther_than_the_odometry_says() -> None:
    """A wheel radius error is what odometry cannot see: the base moves 10% more than it counts."""
    moved = []
    for scale in (1.0, 1.1):
        wheels = {**IDEAL, "dynamics": {**IDEAL["dynamics"], "wheel_radius_scale": [scale, scale]}}
        obs = run(ProxyConfig.from_dict(wheels), steps=20, envs=1)
        v = obs[-1].privileged[0, FIELDS.index("v_mps")]
        odom_v = obs[-1].proprio[0, 5]  # odom_v_mps
        moved.append((v, odom_v))
    assert moved[1][0] == pytest.approx(1.1 * moved[0][0], rel=0.05)
    assert moved[1][1] == pytest.approx(moved[0][1], rel=0.05)


def test_motors_lag_their_command_and_ignore_one_inside_the_deadband() -> None:
    from sim.motor_model import ActuatorParams, MotorModel

    params = ActuatorParams(lag_s=np.array([0.1, 0.0]), deadband_radps=np.array([0.0, 1.0]),
                            voltage=np.array([1.0, 1.0]), sag_per_s=np.array([0.0, 0.0]))  # fmt: skip
    motors = MotorModel(params)
    dt, steps = 0.005, 20  # 0.1 s: one time constant
    wheels = np.zeros((2, steps, 2))
    wheels[0] = 10.0
    wheels[1] = 0.5  # under env 1's deadband
    out = motors.apply(wheels, dt)
    assert out[0, -1, 0] == pytest.approx(10.0 * (1 - np.exp(-1.0)), rel=0.01)  # 63% after tau
    assert np.all(out[1] == 0.0)


def test_the_battery_scales_speed_and_sags_over_the_episode() -> None:
    from sim.motor_model import ActuatorParams, MotorModel

    params = ActuatorParams(lag_s=np.zeros(1), deadband_radps=np.zeros(1), voltage=np.array([0.9]),
                            sag_per_s=np.array([0.01]))  # fmt: skip
    motors = MotorModel(params)
    out = motors.apply(np.full((1, 200, 2), 10.0), 0.005)  # 1 s
    assert out[0, 0, 0] == pytest.approx(9.0, rel=1e-3) and out[0, -1, 0] == pytest.approx(8.9, rel=1e-3)
    motors.reset(np.array([0]))
    assert motors.apply(np.full((1, 1, 2), 10.0), 0.005)[0, 0, 0] == pytest.approx(9.0, rel=1e-3)


def test_printed_markers_stay_marker_coloured_and_distractors_never_are() -> None:
    cfg = PRESET.room
    sampler = RoomSampler(cfg, from_root("."), ("red", "green", "blue"))
    hues = {c: colorsys.rgb_to_hsv(*C.MARKER_RGB[c])[0] * 360 for c in ("red", "green", "blue")}
    for seed in range(30):
        room = sampler.draw(np.random.default_rng(seed))
        for colour, rgb in room.marker_rgb.items():
            h, s, v = colorsys.rgb_to_hsv(*rgb)
            assert abs((h * 360 - hues[colour] + 180) % 360 - 180) <= cfg.markers.hue_shift_deg + 1e-6
        for box in room.distractors:
            h, s, _ = colorsys.rgb_to_hsv(*box.rgb)
            if s >= 0.25:
                gaps = [abs((h * 360 - mh + 180) % 360 - 180) for mh in sampler._marker_hues]
                assert min(gaps) >= cfg.distractors.min_hue_gap_deg
        assert 4 <= len(room.distractors) <= 18 and len(room.room_walls) == 4


@pytest.mark.parametrize(
    "section, values, field",
    [
        ("room", {"light": {"elevation_deg": [0, 90]}}, "elevation_deg"),
        ("room", {"distractors": {"floor": [0, 99]}}, "distractors.floor"),
        ("room", {"light": {"shadows": "yes"}}, "shadows"),
        ("dynamics", {"motor_lag_s": [0.1, 0.0]}, "motor_lag_s"),
        ("dynamics", {"battery_voltage": [0.0, 1.0]}, "battery_voltage"),
        ("imu", {"misalignment_rad": -0.1}, "misalignment_rad"),
    ],
)
def test_bad_preset_values_are_refused_naming_the_field(section: str, values: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ProxyConfig.from_dict({section: values})


def test_a_missing_material_set_is_one_error_naming_it(tmp_path: object) -> None:
    cfg = RoomConfig(materials="sim/configs/no_such_materials.yaml")
    with pytest.raises(ConfigError, match="room.materials: material set not found: .*no_such_materials.yaml"):
        RoomSampler(cfg, from_root("."), C.MARKER_COLOURS)


def test_a_backend_that_cannot_render_a_room_says_so() -> None:
    from sim_doubles import DummyRobot

    proxy = RealRobotProxy(DummyRobot(), factor_config(PRESET, "room"))
    proxy.connect()
    with pytest.raises(NotImplementedError, match="cannot render a room"):
        proxy.reset(seed=0)


def test_envs_reset_one_at_a_time_pass_the_gap_camera() -> None:
    """Vector envs reset one env at a time: the others' frames meet the camera before their first reset."""
    cfg = sim_config(num_envs=3, camera=CAMERA)
    with RealRobotProxy(MujocoBackend(cfg), PRESET) as robot:
        for i in range(3):
            obs = robot.reset(seed=10 + i, envs=[i])
        assert obs.image.shape == (3, 32, 64, 3)


def test_domain_randomisation_never_draws_a_real_room_surface() -> None:
    """sim_only_dr trains under proxy_dr.yaml: no surface it renders is one the gap proxy's room brings."""
    from sim.room_appearance import MaterialSet

    dr = ProxyConfig.from_yaml(from_root("sim/configs/proxy_dr.yaml"))
    sim_set = MaterialSet.load(from_root(dr.room.materials))
    room_set = MaterialSet.load(from_root(PRESET.room.materials))
    assert {m.texture for m in sim_set.floors} == {"checker"}
    assert "checker" not in {m.texture for m in room_set.floors}

    def grey_range(materials: list) -> tuple[float, float]:
        assert all(max(m.rgb) - min(m.rgb) <= 0.13 for m in materials)  # greys, at most a slight tint
        return min(min(m.rgb) for m in materials), max(max(m.rgb) for m in materials)

    for role in ("walls", "obstacles"):
        low, high = grey_range(getattr(sim_set, role))
        for m in getattr(room_set, role):  # a real-room surface is no DR grey: outside its range, or coloured
            assert (
                not (low - 0.02 <= min(m.rgb) and max(m.rgb) <= high + 0.02) or max(m.rgb) - min(m.rgb) > 0.15
            ), m
    d = dr.room.distractors
    assert (d.floor, d.posters, d.furniture, d.room_walls) == ((0, 0), (0, 0), (0, 0), False)
    assert dr.lens == type(dr.lens)() and not dr.dynamics.motors and dr.room.light.shadows == "none"
    assert (
        dr.dynamics.friction_scale
        == ProxyConfig.from_yaml(from_root("sim/configs/proxy.yaml")).dynamics.friction_scale
    )


@pytest.mark.parametrize("scale", [0.95, 1.05])
def test_wheels_of_another_radius_still_carry_the_base(scale: float) -> None:
    """Smaller wheels once left the base on its casters, wheels off the floor: it could not drive."""
    wheels = {**IDEAL, "dynamics": {**IDEAL["dynamics"], "wheel_radius_scale": [scale, scale]}}
    obs = run(ProxyConfig.from_dict(wheels), steps=30, envs=1)
    v = obs[-1].privileged[0, FIELDS.index("v_mps")]
    assert v == pytest.approx(0.4 * scale, rel=0.1)  # the commanded 0.4 m/s, times the radius error

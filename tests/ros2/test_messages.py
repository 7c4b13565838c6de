"""Message conversions and their checks (no DDS): round trips, and every malformed case a clear reject."""

from __future__ import annotations

import array

import numpy as np
import pytest
from agent.base_command import TwistMapping
from agent.messages import (
    ActionCodec,
    MessageError,
    checked_stamp,
    embedding_names,
    embedding_to_msg,
    image_to_rgb,
    imu_to_sample,
    msg_to_embedding,
    msg_to_skill_state,
    rgb_to_image,
    sample_to_imu,
    sec_to_stamp,
    skill_state_to_msg,
    stamp_to_sec,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sensor_msgs.msg import Image, JointState

from policies.skill_contract import SkillContract

images = arrays(np.uint8, st.tuples(st.integers(1, 12), st.integers(1, 12), st.just(3)))


@settings(max_examples=50, deadline=None)
@given(rgb=images, encoding=st.sampled_from(["rgb8", "bgr8"]), pad=st.integers(0, 5))
def test_image_round_trip_with_any_encoding_and_row_padding(rgb: np.ndarray, encoding: str, pad: int) -> None:
    msg = rgb_to_image(rgb, 12.5, "cam", encoding)
    if pad:  # a driver may pad rows: step > 3 * width
        h, w = rgb.shape[:2]
        rows = np.frombuffer(msg.data, np.uint8).reshape(h, 3 * w)  # (H, 3W)
        padded = np.concatenate([rows, np.full((h, pad), 7, np.uint8)], axis=1)  # (H, 3W + pad)
        msg.step, msg.data = 3 * w + pad, array.array("B", padded.tobytes())
    assert np.array_equal(image_to_rgb(msg), rgb)
    assert stamp_to_sec(msg.header.stamp) == 12.5


def test_bgr8_is_converted_to_rgb() -> None:
    msg = Image(height=1, width=1, encoding="bgr8", step=3, data=bytes([10, 20, 30]))
    assert image_to_rgb(msg).tolist() == [[[30, 20, 10]]]


@pytest.mark.parametrize(
    ("msg", "reason"),
    [
        (Image(height=2, width=2, encoding="mono8", step=2, data=bytes(4)), "encoding"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(11)), "size"),
        (Image(height=2, width=2, encoding="rgb8", step=5, data=bytes(10)), "size"),
        (Image(height=0, width=2, encoding="rgb8", step=6, data=b""), "size"),
    ],
)
def test_malformed_images_are_rejected(msg: Image, reason: str) -> None:
    with pytest.raises(MessageError) as err:
        image_to_rgb(msg)
    assert err.value.reason == reason


@given(st.floats(0.001, 4e9, allow_nan=False))
def test_stamp_round_trip_is_within_a_microsecond(t: float) -> None:
    stamp = sec_to_stamp(t)
    assert 0 <= stamp.nanosec < 1_000_000_000
    assert abs(stamp_to_sec(stamp) - t) < 1e-6


def test_zero_and_malformed_stamps_are_rejected() -> None:
    with pytest.raises(MessageError, match="zero"):
        checked_stamp(sec_to_stamp(0.0))
    stamp = sec_to_stamp(1.0)
    stamp.nanosec = 1_500_000_000
    with pytest.raises(MessageError, match="nanosec"):
        checked_stamp(stamp)


def test_imu_round_trip_and_rejects() -> None:
    sample = np.array([0.1, -0.2, 9.81, 0.01, 0.02, -0.3], dtype=np.float32)
    assert np.array_equal(imu_to_sample(sample_to_imu(sample, 3.0)), sample)
    with pytest.raises(MessageError) as err:
        imu_to_sample(sample_to_imu(np.array([np.inf, 0, 0, 0, 0, 0]), 3.0))
    assert err.value.reason == "nonfinite"
    no_gyro = sample_to_imu(sample, 3.0)
    no_gyro.angular_velocity_covariance[0] = -1.0  # REP 145: not provided
    with pytest.raises(MessageError) as err:
        imu_to_sample(no_gyro)
    assert err.value.reason == "missing"


def test_embedding_layout_is_checked() -> None:
    names = embedding_names(4)
    emb = np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float32)
    msg = embedding_to_msg(emb, 2.0, "cam", names)
    assert msg.name == ["e0", "e1", "e2", "e3"] and msg.header.frame_id == "cam"
    assert np.array_equal(msg_to_embedding(msg, names), emb)
    for bad, reason in [(embedding_names(5), "layout"), (names, "nonfinite")]:
        broken = embedding_to_msg(np.full(len(bad), np.nan if reason == "nonfinite" else 0.0), 2.0, "c", bad)
        with pytest.raises(MessageError) as err:
            msg_to_embedding(broken, names)
        assert err.value.reason == reason
    short = JointState(name=names, position=[0.0, 1.0])
    with pytest.raises(MessageError, match="2 positions for 4 names"):
        msg_to_embedding(short, names)


@pytest.fixture
def codec(contract: SkillContract) -> ActionCodec:
    return ActionCodec(contract)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_any_action_within_the_contract_round_trips(contract: SkillContract, data: st.DataObject) -> None:
    codec = ActionCodec(contract)
    layout = contract.layout
    skill = data.draw(st.integers(0, contract.num_skills - 1))
    params = np.array([data.draw(st.floats(lo, hi)) for lo, hi in zip(layout.low, layout.high, strict=True)])
    decoded_skill, decoded = codec.from_msg(codec.to_msg(skill, params, 5.0))
    assert decoded_skill == skill and np.array_equal(decoded, params)


def test_action_names_follow_the_contract(codec: ActionCodec) -> None:
    assert codec.names == ["skill", "drive.speed", "drive.curvature", "turn_in_place.turn_rate", "stop.decel"]


@pytest.mark.parametrize(
    ("skill", "change", "reason"),
    [
        (7, None, "skill"),
        (0.5, None, "skill"),
        (-1, None, "skill"),
        (0, (0, 99.0), "bounds"),
        (0, (1, np.nan), "nonfinite"),
    ],
)
def test_malformed_actions_are_rejected(codec: ActionCodec, skill: float, change: tuple, reason: str) -> None:
    params = codec.contract.layout.defaults.copy()
    if change:
        params[change[0]] = change[1]
    msg = codec.to_msg(0, params, 1.0)
    msg.position[0] = float(skill)
    with pytest.raises(MessageError) as err:
        codec.from_msg(msg)
    assert err.value.reason == reason


def test_action_from_another_contract_is_rejected(codec: ActionCodec) -> None:
    msg = codec.to_msg(0, codec.contract.layout.defaults, 1.0)
    msg.name[1] = "drive.velocity"
    with pytest.raises(MessageError, match="do not match") as err:
        codec.from_msg(msg)
    assert err.value.reason == "layout"


def test_skill_state_round_trip_and_ranges(contract: SkillContract) -> None:
    k = contract.num_skills
    assert msg_to_skill_state(skill_state_to_msg(1, 0.5, 12.0, 3.0), k) == (1, 0.5, 12.0)
    bad = [(k, 0.5, 1.0, "skill"), (0, 1.5, 1.0, "range"), (0, 0.5, -1.0, "range")]
    for skill, progress, step, reason in bad:
        with pytest.raises(MessageError) as err:
            msg_to_skill_state(skill_state_to_msg(skill, progress, step, 3.0), k)
        assert err.value.reason == reason


def test_twist_follows_the_robots_base_controller(contract: SkillContract) -> None:
    mapping = TwistMapping(contract)
    _, drive = contract.action("drive", speed=0.4, curvature=-2.0)
    assert mapping.velocity(contract.skill_id("drive"), drive) == pytest.approx((0.4, -0.8))
    _, turn = contract.action("turn_in_place", turn_rate=1.2)
    twist = mapping.twist(contract.skill_id("turn_in_place"), turn)
    assert (twist.linear.x, twist.angular.z) == pytest.approx((0.0, 1.2))
    assert mapping.velocity(contract.safe_skill_id, contract.layout.defaults) == (0.0, 0.0)


def test_twist_mapping_needs_the_robots_controller(contract: SkillContract) -> None:
    other = contract.model_copy(update={"robot": "quadruped"})
    with pytest.raises(ValueError, match="robot 'quadruped' has no Twist mapping"):
        TwistMapping(other)

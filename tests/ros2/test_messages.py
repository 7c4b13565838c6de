"""Message conversions and their checks (no DDS): round trips, and every malformed case a clear reject."""

from __future__ import annotations

import array

import numpy as np
import pytest
from agent.base_command import TwistMapping
from agent.messages import (
    SOURCES,
    ActionCodec,
    MessageError,
    action_source,
    checked_stamp,
    embedding_to_msg,
    image_to_rgb,
    imu_to_sample,
    msg_to_embedding,
    msg_to_gate,
    msg_to_privileged,
    msg_to_skill_state,
    param_names,
    privileged_names,
    privileged_to_msg,
    rgb_to_image,
    sample_to_imu,
    sec_to_stamp,
    skill_state_to_msg,
    stamp_to_sec,
)
from agent_interfaces.msg import GateState, HybridAction
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image

from opd.replay.bags.reader import typestore
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
    with pytest.raises(MessageError) as err:  # finite as float64, Inf as float32
        imu_to_sample(sample_to_imu(np.array([0, 0, 9.81, 1e39, 0, 0]), 3.0))
    assert err.value.reason == "range"
    no_gyro = sample_to_imu(sample, 3.0)
    no_gyro.angular_velocity_covariance[0] = -1.0  # REP 145: not provided
    with pytest.raises(MessageError) as err:
        imu_to_sample(no_gyro)
    assert err.value.reason == "missing"


def test_privileged_state_round_trip_and_a_value_past_float32_rejected() -> None:
    names = privileged_names(["a", "b"])
    msg = privileged_to_msg(np.array([0.5, -2.0]), 1, 7, 3.0, names)
    skill, step, state = msg_to_privileged(msg, names, 2)
    assert (skill, step) == (1, 7) and state.dtype == np.float32 and np.array_equal(state, [0.5, -2.0])
    with pytest.raises(MessageError) as err:  # finite as float64, Inf as float32
        msg_to_privileged(privileged_to_msg(np.array([0.5, -1e39]), 1, 7, 3.0, names), names, 2)
    assert err.value.reason == "range"


HASH = "ab" * 32  # an encoder's SHA-256


def test_embedding_names_its_encoder_and_is_checked() -> None:
    emb = np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float32)
    msg = embedding_to_msg(emb, 2.0, "cam", HASH, (1, 0.25, 7))
    assert (msg.encoder_hash, msg.skill, msg.progress, msg.step) == (HASH, 1, 0.25, 7)
    assert msg.header.frame_id == "cam" and stamp_to_sec(msg.header.stamp) == 2.0
    assert np.array_equal(msg_to_embedding(msg, 4, HASH), emb)
    cases = [(emb, 5, HASH, "size"), (np.full(4, np.nan), 4, HASH, "nonfinite"),
             (emb, 4, "cd" * 32, "encoder")]  # fmt: skip
    for values, dim, expected_hash, reason in cases:
        with pytest.raises(MessageError) as err:
            msg_to_embedding(embedding_to_msg(values, 2.0, "c", HASH, (0, 0.0, 0)), dim, expected_hash)
        assert err.value.reason == reason
    with pytest.raises(MessageError, match="encoder abababababab..., this node's artifact has encoder cdcd"):
        msg_to_embedding(msg, 4, "cd" * 32)


def test_source_names_are_the_generated_constants() -> None:
    assert [getattr(HybridAction, f"SOURCE_{s.upper()}") for s in SOURCES] == list(range(len(SOURCES)))


def test_bags_decode_what_rclpy_serialises() -> None:
    """The recorder stores rclpy's CDR bytes and replay decodes them with the `rosbags` typestore built
    from the same .msg files: every field must come back."""
    ts = typestore()
    msg = embedding_to_msg(np.arange(3, dtype=np.float32), 4.5, "cam", HASH, (2, 0.5, 9))
    back = ts.deserialize_cdr(serialize_message(msg), "agent_interfaces/msg/StateEmbedding")
    assert (back.encoder_hash, back.skill, back.progress, back.step) == (HASH, 2, 0.5, 9)
    assert back.data.tolist() == [0.0, 1.0, 2.0] and back.header.stamp.sec == 4
    gate = GateState(source=1, reason="error", error=0.25, threshold=0.15, decided_at=5.5,
                     teacher_upto=float("nan"))  # fmt: skip
    gate.header.stamp = sec_to_stamp(5.0)
    decoded = msg_to_gate(ts.deserialize_cdr(serialize_message(gate), "agent_interfaces/msg/GateState"))
    assert decoded["source"] == "teacher" and decoded["stamp"] == 5.0 and decoded["decided_at"] == 5.5
    assert np.isnan(decoded["teacher_upto"])


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
    source = data.draw(st.sampled_from(SOURCES))
    msg = codec.to_msg(skill, params, 5.0, source)
    assert msg.skill_name == contract.names[skill] and action_source(msg) == source
    decoded_skill, decoded = codec.from_msg(msg)
    assert decoded_skill == skill and np.array_equal(decoded, params)


def test_action_params_follow_the_contract(codec: ActionCodec) -> None:
    assert param_names(codec.contract) == ["drive.speed", "drive.curvature", "turn_in_place.turn_rate",
                                           "stop.decel"]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"skill": 7}, "skill"),
        ({"skill_name": "turn_in_place"}, "skill"),  # id 0 is drive
        ({"source": 3}, "source"),
        ({"params": [0.1, 0.2]}, "size"),
        ({"params": [99.0, 0.0, 0.0, 1.0]}, "bounds"),
        ({"params": [0.1, float("nan"), 0.0, 1.0]}, "nonfinite"),
        ({"contract": "0123456789abcdef"}, "contract"),
    ],
)
def test_malformed_actions_are_rejected(codec: ActionCodec, change: dict, reason: str) -> None:
    msg = codec.to_msg(0, codec.contract.layout.defaults, 1.0, "student")
    for field, value in change.items():
        setattr(msg, field, value)
    with pytest.raises(MessageError) as err:
        codec.from_msg(msg)
    assert err.value.reason == reason


def test_action_of_another_contract_is_rejected(codec: ActionCodec) -> None:
    """Same skills, one bound changed: the fingerprint differs, so the slots are not trusted."""
    data = codec.contract.model_dump()
    data["skills"][0]["params"][0]["high"] = 2.0
    other = SkillContract.from_dict(data)
    assert other.fingerprint != codec.contract.fingerprint
    msg = ActionCodec(other).to_msg(0, codec.contract.layout.defaults, 1.0, "teacher")
    with pytest.raises(MessageError, match="written in contract") as err:
        codec.from_msg(msg)
    assert err.value.reason == "contract"


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


def test_the_embedding_message_is_a_quarter_of_the_joint_state_layout_it_replaced() -> None:
    """`agent bench messages` (sizes only here; its timings are figures, not asserted)."""
    from agent.message_bench import bench_messages

    layouts = bench_messages(dim=256, iters=3)["layouts"]  # asserts each carries the embedding exactly
    ours = layouts["agent_interfaces/StateEmbedding"]["bytes"]
    floor = layouts["std_msgs/Float32MultiArray"]["bytes"]
    assert ours < layouts["sensor_msgs/JointState (e0..e{E-1})"]["bytes"] / 4
    assert ours - floor < 120  # header + encoder hash + skill state over the bare array


@pytest.mark.parametrize("name", ["StateEmbedding", "HybridAction", "GateState"])
def test_bags_record_the_type_hashes_rosidl_generated(name: str) -> None:
    """The recorder's typestore (from the .msg files) hashes each type as rosidl did for the installed
    package (RIHS01), so `ros2 bag play` of a recording offers the types the nodes use."""
    import json
    import sys
    from pathlib import Path

    generated = Path(sys.prefix) / "share" / "agent_interfaces" / "msg" / f"{name}.json"
    if not generated.is_file():
        pytest.skip(f"{generated} not found: agent_interfaces is not installed into this environment")
    hashes = {h["type_name"]: h["hash_string"] for h in json.loads(generated.read_text())["type_hashes"]}
    msgtype = f"agent_interfaces/msg/{name}"
    assert typestore().hash_rihs01(msgtype) == hashes[msgtype]


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height (its pixels are not there)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def _encoded(image_format: str) -> bytes:
    import io

    from PIL import Image as PilImage

    out = io.BytesIO()
    PilImage.new("RGB", (4, 3), (200, 100, 50)).save(out, format=image_format)
    return out.getvalue()


@pytest.mark.parametrize(
    "data, reason",
    [(_png_header(30000, 30000), "decode"), (_png_header(9000, 9000), "size"), (b"TIFF", "decode")],
    ids=["decompression bomb", "larger than any camera", "not an image"],
)
def test_a_compressed_image_with_a_hostile_header_is_refused_before_decoding(
    data: bytes, reason: str
) -> None:
    """Pillow's DecompressionBombError used to escape the decoder's error list and end a replay."""
    from types import SimpleNamespace

    from policies.message_fields import compressed_to_rgb

    with pytest.raises(MessageError) as err:
        compressed_to_rgb(SimpleNamespace(format="png", data=data))
    assert err.value.reason == reason


def test_a_compressed_image_must_be_jpeg_or_png_whatever_pillow_could_read() -> None:
    from types import SimpleNamespace

    from policies.message_fields import compressed_to_rgb

    assert compressed_to_rgb(SimpleNamespace(format="png", data=_encoded("PNG"))).shape == (3, 4, 3)
    with pytest.raises(MessageError, match="does not decode"):  # a TIFF or BMP named "jpeg"
        compressed_to_rgb(SimpleNamespace(format="jpeg", data=_encoded("TIFF")))
    with pytest.raises(MessageError, match="does not decode"):
        compressed_to_rgb(SimpleNamespace(format="jpeg", data=_encoded("BMP")))


def test_a_gate_decision_of_the_safe_action_reads_back_as_safe() -> None:
    """The opd node says `safe` when neither the student nor the teacher could act; replay used to refuse
    such a /opd/gate record, and so decided nothing for those frames."""
    from policies.message_fields import msg_to_gate

    msg = GateState(source=SOURCES.index("safe"), reason="no_input_safe_action", error=float("nan"),
                    threshold=0.1, decided_at=3.0, teacher_upto=float("nan"))  # fmt: skip
    msg.header.stamp.sec = 2
    assert msg_to_gate(msg)["source"] == "safe"
    msg.source = len(SOURCES)
    with pytest.raises(MessageError, match="none of"):
        msg_to_gate(msg)

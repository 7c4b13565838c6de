"""Encoder node over real DDS: alignment on the image stamp, bad input counted and rejected, staleness."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import numpy as np
import pytest
from agent.executors import MultiThreadedExecutor, stop_executor
from agent.messages import (
    camera_info_msg,
    camera_info_to_model,
    msg_to_embedding,
    sample_to_imu,
    skill_state_to_msg,
    stamp_to_sec,
)
from agent.nodes.encoder import GATES, EncoderNode
from rclpy.context import Context
from rclpy.parameter import Parameter
from ros_harness import FAKE_ENCODER, FakeRuntime, Probe, SensorFeed, spin_for, spin_until
from sensor_msgs.msg import Image

from policies.camera_model import CameraModel

Rig = tuple[EncoderNode, Probe, MultiThreadedExecutor, FakeRuntime]


@pytest.fixture
def encoder(
    request: pytest.FixtureRequest, ros_context: Context, fake_loader: Callable[..., FakeRuntime]
) -> Iterator[Rig]:
    """An active encoder node with the fake model, a recording probe and their executor; parameters beyond
    the defaults come from indirect parametrization (a dict; its "camera" is the artifact's camera model)."""
    overrides = {"artifact_dir": "fake", "input_timeout_s": 0.3, **getattr(request, "param", {})}
    camera = overrides.pop("camera", None)
    fake_loader.runtime.artifact = SimpleNamespace(encoder_hash=FAKE_ENCODER, camera=camera)
    params = [Parameter(name, value=value) for name, value in {"autostart": True, **overrides}.items()]
    node = EncoderNode(runtime_loader=fake_loader, context=ros_context, parameter_overrides=params)
    probe = Probe(ros_context)
    probe.record("/agent/state", "/diagnostics")
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(probe.node)
    assert spin_until(executor, lambda: node.lifecycle_state == "active"), node.fault
    inputs = ("/camera/image_raw", "/imu/data", "/agent/active_skill")
    probe.advertise(*inputs)
    assert spin_until(executor, lambda: probe.matched(*inputs, by=node))
    yield node, probe, executor, fake_loader.runtime
    stop_executor(executor)
    node.destroy_node()
    probe.node.destroy_node()


# max_latency_s well above the test's own waits: a loaded CI host once delivered an image 1.8 s late, and a
# late drop is not what this test is about.
@pytest.mark.parametrize("encoder", [{"max_latency_s": 5.0}], indirect=True)
def test_embedding_is_stamped_with_the_image_and_uses_the_imu_window_ending_there(encoder: Rig) -> None:
    node, probe, executor, runtime = encoder
    t0 = time.time()
    feed = SensorFeed(probe, t0)
    probe.publish("/agent/active_skill", skill_state_to_msg(1, 0.25, 7.0, t0))
    spin_for(executor, 0.1)  # let the skill state arrive
    stamps = []
    for i in range(5):
        t = time.time()
        feed.step(t, value=10 * i)
        stamps.append(t)
        spin_for(executor, 0.05)
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) >= 3)
    for msg in probe.received["/agent/state"]:
        stamp = stamp_to_sec(msg.header.stamp)
        i = int(np.argmin(np.abs(np.array(stamps) - stamp)))
        assert stamp == pytest.approx(stamps[i], abs=1e-6)  # stamped with its image
        assert msg.header.frame_id == "camera"
        emb = msg_to_embedding(msg, runtime.embed_dim, FAKE_ENCODER)  # names the runtime's encoder
        assert emb[0] == pytest.approx(10 * i / 255.0)  # and computed from it
    for call in runtime.encoded:
        window = call["imu"]  # (8, 6); accel.x holds each sample's offset from t0
        assert window.shape == (runtime.imu_window, 6)
        assert np.all(np.diff(window[:, 0]) > 0)  # oldest first
        image_offset = call["image"].mean() / 10  # frame i was stamped stamps[i]
        last = stamps[int(round(image_offset))] - t0
        # The last sample at or before the exposure, never one after it (float32 offsets: 1e-5 s slack).
        assert -node.imu_buffer.tolerance_s - 1e-4 <= window[-1, 0] - last <= 1e-5
    assert runtime.encoded[-1]["skill"] == 1 and runtime.encoded[-1]["progress"] == 0.25
    assert runtime.encoded[-1]["step"] == 7.0
    last = probe.received["/agent/state"][-1]
    assert (last.skill, last.progress, last.step) == (1, 0.25, 7)  # the skill state it was encoded with


# max_latency_s well above the test's own waits: a loaded machine must not turn the wait into a late drop.
@pytest.mark.parametrize("encoder", [{"max_latency_s": 5.0}], indirect=True)
def test_an_image_ahead_of_its_imu_waits_and_is_encoded_when_the_imu_reaches_its_stamp(encoder: Rig) -> None:
    node, probe, executor, runtime = encoder
    t0 = time.time()
    feed = SensorFeed(probe, t0)
    feed.imu_until(t0 - 0.05)  # the IMU lags the frame by 50 ms
    feed.image(t0, value=30)
    spin_for(executor, 0.15)
    assert probe.received["/agent/state"] == [] and len(node.waiting) == 1  # waiting, not dropped
    feed.imu_until(t0)
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) == 1)
    assert stamp_to_sec(probe.received["/agent/state"][0].header.stamp) == pytest.approx(t0, abs=1e-6)
    window = runtime.encoded[-1]["imu"]  # accel.x holds each sample's offset from t0
    assert abs(window[-1, 0]) <= node.imu_buffer.tolerance_s + 1e-4  # the window ends at the image stamp


@pytest.mark.parametrize("encoder", [{"max_latency_s": 5.0}], indirect=True)  # as above: no late drops
def test_a_future_imu_stamp_is_refused_without_losing_the_history_and_gaps_are_counted(encoder: Rig) -> None:
    """Review defects: one IMU sample stamped > 1 s ahead cleared the buffer (0.5 s without a window), and
    a window with a gap went to the model silently."""
    node, probe, executor, runtime = encoder
    t0 = time.time()
    feed = SensorFeed(probe, t0)
    feed.imu_until(t0 - 0.02)
    probe.publish("/imu/data", sample_to_imu(np.zeros(6), t0 + 2.0))  # a bad clock, 2 s ahead
    assert spin_until(executor, lambda: node.losses()["imu.future"] == 1)
    # an image from a bad clock too: refused before its stamp is recorded (it used to be, and the good
    # frames after it were "backwards" until the clock caught up)
    feed.image(t0 + 0.9)
    assert spin_until(executor, lambda: node.camera.rejected["stamp"] == 1) and not node.waiting
    feed.step(t0)  # the good samples go on, and the frame gets its window at once
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) == 1)
    assert node.imu_buffer.resets == 0 and node.windows_with_gap == 0
    # Drop 4 samples (20 ms) before the next frame: its window has a gap, flagged and still encoded.
    t1 = t0 + 0.05
    feed.last_imu += 4
    feed.step(t1)
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) == 2)
    assert node.windows_with_gap == 1


def test_an_image_whose_imu_comes_after_max_latency_is_dropped_as_late(encoder: Rig) -> None:
    node, probe, executor, runtime = encoder
    t0 = time.time()
    feed = SensorFeed(probe, t0)
    feed.imu_until(t0 - 0.05)
    feed.image(t0)
    spin_for(executor, node.max_latency_s + 0.1)  # nothing reaches the stamp in time
    feed.imu_until(t0)
    assert spin_until(executor, lambda: node.losses()["camera.imu_late"] == 1)
    spin_for(executor, 0.1)
    assert probe.received["/agent/state"] == [] and runtime.encoded == [] and not node.waiting


def test_malformed_messages_are_counted_and_rejected_and_the_node_keeps_running(encoder: Rig) -> None:
    node, probe, executor, runtime = encoder
    t0 = time.time()
    feed = SensorFeed(probe, t0)
    feed.step(t0)
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) == 1)
    bad = Image(height=32, width=32, encoding="mono8", step=32, data=bytes(32 * 32))
    bad.header.stamp.sec = int(t0)
    probe.publish("/camera/image_raw", bad)  # wrong encoding
    short = Image(height=32, width=32, encoding="rgb8", step=96, data=bytes(100))
    short.header.stamp.sec = int(t0)
    probe.publish("/camera/image_raw", short)  # wrong size
    feed.image(0.0)  # zero stamp
    feed.image(t0 - 0.05)  # older than the last accepted image
    nan = sample_to_imu(np.array([np.nan, 0, 9.81, 0, 0, 0]), t0 + 0.001)
    probe.publish("/imu/data", nan)
    probe.publish("/agent/active_skill", skill_state_to_msg(7, 0.5, 1.0, t0))  # no skill 7 in the contract

    def counted() -> bool:
        with node.lock:
            camera, skill = sum(node.camera.rejected.values()), node.skill.rejected["skill"]
            seen = camera, node.imu.rejected["nonfinite"], skill
        return seen >= (4, 1, 1)

    assert spin_until(executor, counted)
    with node.lock:
        assert node.camera.rejected == {"encoding": 1, "size": 1, "stamp": 2}
        assert node.imu.rejected["nonfinite"] == 1
        assert node.skill.rejected["skill"] == 1
    before = len(probe.received["/agent/state"])
    t1 = time.time()
    feed.step(t1)
    assert spin_until(executor, lambda: len(probe.received["/agent/state"]) > before)  # still running
    assert spin_until(executor, lambda: "encoder: camera" in probe.diagnostics("encoder: "), timeout_s=3.0)
    camera = {kv.key: kv.value for kv in probe.diagnostics("encoder: ")["encoder: camera"].values}
    assert (camera["rejected.encoding"], camera["rejected.size"], camera["rejected.stamp"]) == ("1", "1", "2")


def test_stale_camera_is_a_diagnostic_error(encoder: Rig) -> None:
    node, probe, executor, _ = encoder
    feed = SensorFeed(probe, time.time())
    for _ in range(3):
        feed.step(time.time())
        spin_for(executor, 0.05)
    feed.imu_until(time.time())
    spin_for(executor, 0.4)  # > input_timeout_s of 0.3 s without a camera image
    probe.received["/diagnostics"].clear()
    assert spin_until(executor, lambda: "encoder: camera" in probe.diagnostics("encoder: "), timeout_s=3.0)
    status = probe.diagnostics("encoder: ")
    assert status["encoder: camera"].level == b"\x02"  # ERROR
    assert status["encoder: node"].level == b"\x02"


def test_gate_names_follow_the_fusion_modalities() -> None:
    from policies.fusion import MODALITIES

    assert GATES == MODALITIES


TRAINED_CAMERA = CameraModel.from_vfov(128, 64, 75.0)  # the committed student's: 113.8 x 75 deg


def camera_model_entry(node: EncoderNode, probe: Probe, executor: object, info: object | None) -> object:
    """The encoder's camera_model diagnostic once it reports `info` (published until it does), or at once."""
    want = None if info is None else camera_info_to_model(info).describe()

    def reported() -> bool:
        if info is not None:
            probe.publish("/camera/camera_info", info)  # best effort: again until one arrives
        entry = probe.diagnostics("encoder: ").get("encoder: camera_model")
        return entry is not None and (want is None or {kv.key: kv.value for kv in entry.values}.get(
            "camera_info") == want)  # fmt: skip

    probe.received["/diagnostics"].clear()
    assert spin_until(executor, reported, timeout_s=5.0)
    return probe.diagnostics("encoder: ")["encoder: camera_model"]


@pytest.mark.parametrize("encoder", [{"camera": TRAINED_CAMERA}], indirect=True)
def test_camera_info_is_checked_against_the_camera_the_student_was_trained_with(encoder: Rig) -> None:
    node, probe, executor, _ = encoder
    probe.advertise("/camera/camera_info")
    assert spin_until(executor, lambda: probe.matched("/camera/camera_info", by=node))
    # The same field of view at 5x the resolution: the encoder resizes it, so it matches.
    scaled = TRAINED_CAMERA.model_copy(update={"width": 640, "height": 320, "fx": TRAINED_CAMERA.fx * 5,
                                               "fy": TRAINED_CAMERA.fy * 5})  # fmt: skip
    ok = camera_model_entry(node, probe, executor, camera_info_msg(scaled, time.time()))
    assert ok.level == b"\x00" and "matches" in ok.message
    # A 90 deg camera: WARN naming both fields of view.
    narrow = CameraModel(width=640, height=480, fx=320.0, fy=320.0, cx=319.5, cy=239.5)
    warn = camera_model_entry(node, probe, executor, camera_info_msg(narrow, time.time()))
    assert warn.level == b"\x01"
    assert "horizontal field of view 90.0 deg, trained with 113.8 deg" in warn.message
    assert "vertical" not in warn.message  # 73.7 deg: within the tolerance of 75 deg
    values = {kv.key: kv.value for kv in warn.values}
    assert values["trained"] == TRAINED_CAMERA.describe() and values["camera_info"] == narrow.describe()
    # An uncalibrated camera (K all zero) is counted and rejected, and the last check stands.
    blank = camera_info_msg(narrow, time.time())
    blank.k = [0.0] * 9

    def rejected() -> bool:
        probe.publish("/camera/camera_info", blank)
        return node.camera_info.rejected["uncalibrated"] >= 1

    assert spin_until(executor, rejected)
    assert node.camera_check.level == warn.level[0]


def test_an_artifact_without_a_camera_model_is_said_so_and_not_checked(encoder: Rig) -> None:
    node, probe, executor, _ = encoder
    entry = camera_model_entry(node, probe, executor, None)
    assert (
        entry.level == b"\x00" and entry.message == "no camera model in the artifact: CameraInfo not checked"
    )

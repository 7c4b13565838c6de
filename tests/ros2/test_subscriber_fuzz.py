"""Every subscriber of the graph fuzzed through real rclpy: hypothesis-generated messages (wrong sizes and
names, odd encodings, NaN/Inf and float32-overflowing values, extreme, zero and backwards stamps).

Each node runs alone with the probe as the only publisher of the fuzzed topic. Per message: the node's
callback runs in this thread's executor (an exception in it fails the test: a crash), and the message must
be counted by the stream that receives it (accepted, rejected or dropped, with a reason). FUZZ_EXAMPLES
messages per subscriber; the README quotes the total.
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from agent.executors import stop_executor
from agent.messages import SKILL_STATE_NAMES, param_names, privileged_names, sec_to_stamp
from agent_interfaces.msg import HybridAction, StateEmbedding
from builtin_interfaces.msg import Time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from ros_harness import Probe, spin_until
from sensor_msgs.msg import Image, Imu, JointState

from policies.artifact import Artifact

pytestmark = pytest.mark.slow
FUZZ_EXAMPLES = 40  # messages per subscriber
SUBSCRIBERS = [  # (node, topic, stream attribute that counts the topic's messages)
    ("encoder", "/camera/image_raw", "camera"),
    ("encoder", "/imu/data", "imu"),
    ("encoder", "/agent/active_skill", "skill"),
    ("policy", "/agent/state", "state_in"),
    ("opd", "/agent/state", "state"),
    ("opd", "/agent/action", "student"),
    ("opd", "/teacher/action", "teacher"),
    ("opd", "/sim/privileged_state", "privileged"),
    ("teacher", "/sim/privileged_state", "state_in"),
    ("sim_bridge", "/opd/action", "commands"),
]

# Floats that break things: NaN, infinities, float32 overflow, subnormals, and ordinary values.
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, 3.5e38, 1e-310, 0.0, -0.0]),
    st.floats(-10, 10),
)
# A stamp: relative to now (future, past, backwards), or raw extremes of builtin_interfaces/Time.
STAMPS = st.one_of(
    st.tuples(st.just("offset"), st.floats(-1e4, 1e4, allow_nan=False)),
    st.tuples(st.just("raw"), st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**32 - 1)),
)


def stamp_of(spec: tuple) -> Time:
    if spec[0] == "offset":
        return sec_to_stamp(max(time.time() + spec[1], 0.0))
    return Time(sec=spec[1], nanosec=spec[2])


@st.composite
def images(draw: st.DrawFn) -> Image:
    h, w = draw(st.integers(0, 40)), draw(st.integers(0, 40))
    encoding = draw(
        st.one_of(st.sampled_from(["rgb8", "bgr8", "mono8", "rgba8", "16UC1", ""]), st.text(max_size=6))
    )
    consistent = draw(st.booleans())  # sizes that agree, so the pixel path runs too
    step = 3 * w if consistent else draw(st.integers(0, 200))
    size = step * h if consistent else draw(st.integers(0, 5000))
    data = draw(st.binary(min_size=size, max_size=size))
    msg = Image(height=h, width=w, encoding=encoding, step=step, data=bytes(data))
    msg.header.stamp = stamp_of(draw(STAMPS))
    return msg


@st.composite
def imus(draw: st.DrawFn) -> Imu:
    msg = Imu()
    msg.header.stamp = stamp_of(draw(STAMPS))
    for vec in (msg.linear_acceleration, msg.angular_velocity):
        vec.x, vec.y, vec.z = draw(FLOATS), draw(FLOATS), draw(FLOATS)
    msg.linear_acceleration_covariance[0] = draw(st.sampled_from([0.0, -1.0]))
    return msg


def joint_states(names: list[str]) -> st.SearchStrategy[JointState]:
    """Messages with the topic's own layout (random values) or a wrong one (names, sizes)."""

    @st.composite
    def build(draw: st.DrawFn) -> JointState:
        good = draw(st.booleans())
        n = len(names)
        wrong = st.one_of(st.lists(st.text(max_size=4), max_size=n + 2), st.just(names[:-1]),
                          st.just(names + ["extra"]))  # fmt: skip
        layout = names if good else draw(wrong)
        values = draw(st.lists(FLOATS, min_size=len(layout), max_size=len(layout)) if draw(st.booleans())
                      else st.lists(FLOATS, max_size=n + 3))  # fmt: skip
        if good and values:
            values[0] = float(draw(st.integers(-3, 8)))  # skill ids in and out of range
        msg = JointState(name=list(layout), position=[float(v) for v in values])
        msg.header.stamp = stamp_of(draw(STAMPS))
        return msg

    return build()


@st.composite
def embeddings(draw: st.DrawFn, encoder_hash: str, dim: int) -> StateEmbedding:
    """The encoder's hash or another, any number of values (float32: overflow arrives as Inf)."""
    values = draw(st.lists(FLOATS, max_size=dim + 3) if draw(st.booleans()) else
                  st.lists(FLOATS, min_size=dim, max_size=dim))  # fmt: skip
    with np.errstate(over="ignore"):
        data = array.array("f", np.array(values, dtype=np.float32).tobytes())
    msg = StateEmbedding(encoder_hash=draw(st.sampled_from([encoder_hash, "", "ab" * 32])), data=data,
                         skill=draw(st.integers(0, 255)), step=draw(st.integers(0, 2**32 - 1)))  # fmt: skip
    msg.header.stamp = stamp_of(draw(STAMPS))
    return msg


@st.composite
def actions(draw: st.DrawFn, artifact: Artifact) -> HybridAction:
    """Hybrid actions in and out of the contract: its fingerprint or another, any source, skill id and name,
    any number of parameters."""
    contract = artifact.contract
    n = len(param_names(contract))
    params = draw(st.lists(FLOATS, min_size=n, max_size=n) if draw(st.booleans()) else
                  st.lists(FLOATS, max_size=n + 3))  # fmt: skip
    skill = draw(st.integers(0, contract.num_skills + 1) | st.integers(0, 255))
    name = draw(st.sampled_from(contract.names) | st.text(max_size=6))
    msg = HybridAction(source=draw(st.integers(0, 255)), skill=skill, skill_name=name,
                       contract=draw(st.sampled_from([contract.fingerprint, "", "0" * 16])),
                       params=[float(v) for v in params])  # fmt: skip
    msg.header.stamp = stamp_of(draw(STAMPS))
    return msg


@pytest.fixture
def start_node(
    ros_context: Context, tiny_artifact: Path, tiny_teacher: Path, tmp_path: Path
) -> Iterator[Callable]:
    made: list[tuple[Any, Probe, SingleThreadedExecutor]] = []

    def start(name: str) -> tuple[Any, Probe, SingleThreadedExecutor]:
        params: dict[str, Any] = {"autostart": True}
        if name in ("encoder", "policy"):
            params |= {"artifact_dir": str(tiny_artifact), "inference_threads": 1}
        if name == "opd":
            cfg = tmp_path / "opd.yaml"
            cfg.write_text(yaml.safe_dump({"opd": {"teacher_timeout_s": 60.0, "align": {"max_age_s": 60.0}}}))
            params |= {"artifact_dir": str(tiny_artifact), "drive": "opd", "opd_config": str(cfg)}
        if name == "teacher":
            params |= {"checkpoint": str(tiny_teacher)}
        if name == "sim_bridge":
            params |= {"drive": "student", "camera_width": 32, "camera_height": 32}
        module = __import__(f"agent.nodes.{name}", fromlist=["x"])
        cls = {"encoder": "EncoderNode", "policy": "PolicyNode", "opd": "OpdNode", "teacher": "TeacherNode",
               "sim_bridge": "SimBridgeNode"}[name]  # fmt: skip
        overrides = [Parameter(k, value=v) for k, v in params.items()]
        node = getattr(module, cls)(context=ros_context, parameter_overrides=overrides)
        probe = Probe(ros_context)
        executor = SingleThreadedExecutor(context=ros_context)
        executor.add_node(node)
        executor.add_node(probe.node)
        made.append((node, probe, executor))
        assert spin_until(executor, lambda: node.lifecycle_state == "active", timeout_s=60.0), node.fault
        return node, probe, executor

    yield start
    for node, probe, executor in made:
        stop_executor(executor)
        node.finalize()
        node.destroy_node()
        probe.node.destroy_node()


def strategy_for(topic: str, artifact: Artifact) -> st.SearchStrategy:
    if topic == "/camera/image_raw":
        return images()
    if topic == "/imu/data":
        return imus()
    if topic == "/agent/active_skill":
        return joint_states(list(SKILL_STATE_NAMES))
    if topic == "/agent/state":
        dim = artifact.manifest["config"]["student"]["encoder"]["embed_dim"]
        return embeddings(artifact.encoder_hash, dim)
    if topic == "/sim/privileged_state":
        return joint_states(privileged_names(artifact.model("predictor")["fields"]))
    return actions(artifact)


@pytest.mark.parametrize(
    ("name", "topic", "stream"), SUBSCRIBERS, ids=[f"{n}:{t}" for n, t, _ in SUBSCRIBERS]
)
def test_fuzzed_messages_never_crash_a_node_and_are_all_counted(
    start_node: Callable, tiny_artifact: Path, name: str, topic: str, stream: str
) -> None:
    node, probe, executor = start_node(name)
    probe.advertise(topic)
    assert spin_until(executor, lambda: probe.matched(topic))
    sent: list[int] = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
    @given(msg=strategy_for(topic, Artifact.load(tiny_artifact)))
    def one(msg: Any) -> None:
        counts = getattr(node, stream)
        before = counts.handled
        probe.publish(topic, msg)
        sent.append(1)
        # Counted (or the node crashed: its callback raises into this executor and fails the test).
        assert spin_until(executor, lambda: counts.handled > before, timeout_s=3.0), (topic, msg)
        assert node.lifecycle_state == "active"

    one()
    assert len(sent) >= FUZZ_EXAMPLES

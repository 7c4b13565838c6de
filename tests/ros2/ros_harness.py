"""Helpers for the ROS 2 tests: a model double, a probe node, a sensor feed and spin helpers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np

from policies.preprocessing import check_image, check_imu, check_scalar, check_skill
from policies.skill_contract import SkillContract

FAKE_ENCODER = "fe" * 32  # the encoder hash FakeRuntime's embeddings name


class FakeRuntime:
    """Stands in for policies.runtime.StudentRuntime: same attributes and input checks, tiny shapes.

    The embedding is the mean image intensity in every slot, so a test can tell frames apart; `act`
    returns a fixed action (possibly out of bounds, to exercise clipping). Every encode call is recorded.
    """

    backend = "fake"
    precision = "fp32"
    image_hw = (32, 32)
    imu_window = 8
    imu_rate_hz = 200.0
    embed_dim = 16
    memory = 1  # a head without memory: acts on the newest embedding
    artifact = SimpleNamespace(encoder_hash=FAKE_ENCODER, camera=None)

    def __init__(self, contract: SkillContract, skill: int = 0, params: np.ndarray | None = None) -> None:
        self.contract = contract
        self.skill = skill
        self.params = np.asarray(contract.layout.defaults if params is None else params, dtype=np.float32)
        self.encoded: list[dict] = []

    def encode(
        self, image: np.ndarray, imu: np.ndarray, skill: int, progress: float, step: float
    ) -> tuple[np.ndarray, np.ndarray]:
        check_image(image, *self.image_hw)
        window = check_imu(imu, self.imu_window)[0]
        check_skill(skill, self.contract.num_skills)
        check_scalar("progress", progress, 0.0, 1.0)
        self.encoded.append(dict(image=image, imu=window, skill=skill, progress=progress, step=step))
        embedding = np.full(self.embed_dim, image.mean() / 255.0, dtype=np.float32)  # (E,)
        return embedding, np.full(4, 0.5, dtype=np.float32)

    def act(self, embedding: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
        emb = np.asarray(embedding, dtype=np.float32)
        if emb.shape != (self.embed_dim,) or not np.all(np.isfinite(emb)):
            raise ValueError(f"embedding: bad shape {emb.shape} or non-finite")
        logits = np.zeros(self.contract.num_skills, dtype=np.float32)
        logits[self.skill] = 1.0
        return logits, self.skill, self.params.copy()

    def act_window(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A head without memory: windows (B, 1, E) -> the newest frame's action, batched."""
        frames = np.asarray(frames, dtype=np.float32)
        if frames.ndim != 3 or frames.shape[1] != self.memory:
            raise ValueError(f"embedding window: bad shape {frames.shape}")
        outs = [self.act(f[-1]) for f in frames]
        return np.stack([o[0] for o in outs]), np.array([o[1] for o in outs]), np.stack([o[2] for o in outs])


def spin_until(executor: object, condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Spin `executor` until `condition()` holds or `timeout_s` passes; return whether it held. The
    default is generous: it only bounds a failure, and a loaded 2-core CI host has stalled for 3 s (an
    answer that took 3.2 s failed a 5 s wait whose other steps had used the rest)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.02)
    return condition()


def record_sent(node: object) -> None:
    """Log every action the node sends, (skill, stamp s) in order, as `node.sent`: the probe has them all
    once it received as many (one reliable writer delivers in order). Tests then wait for what was sent
    instead of guessing how long delivery takes."""
    from agent.messages import stamp_to_sec

    node.sent = []
    send = node.publish

    def publish(skill: int, params: np.ndarray, stamp: object, *rest: object) -> None:
        node.sent.append((skill, stamp_to_sec(stamp)))
        send(skill, params, stamp, *rest)

    node.publish = publish


def tick_while_an_action_executes(node: object) -> None:
    """Run `node.watchdog()` on a thread while this one holds `node.lock` and executes a source action at a
    later time (`node.fallback.on_action`, what executing one does under the lock). The node's clock is the
    test's and stands still but for that step, so the tick's verdict depends only on when it read the clock:
    read before the lock, the action looks 0.05 s in its future: a clock gone back, by SafeFallback's rule."""
    t = [time.time()]
    read = threading.Event()

    def now_s() -> float:
        read.set()
        return t[0]

    original, node.now_s = node.now_s, now_s
    try:
        with node.lock:
            tick = threading.Thread(target=node.watchdog)
            tick.start()
            read.wait(0.5)  # read before the lock, or waiting for it (then it reads the clock after this)
            t[0] += 0.05
            node.fallback.on_action(node.now_s())
        tick.join(5.0)
        assert not tick.is_alive()
    finally:
        node.now_s = original


def spin_for(executor: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.02)


class Probe:
    """The test's own node: publishes the stack's inputs and records its outputs, with the graph's QoS.

    Recording subscriptions keep up to 1000 messages (depth 100) so a test sees every message sent.
    """

    def __init__(self, context: object, name: str = "probe", namespace: str | None = None) -> None:
        """With a `namespace`, the probe uses the graph's relative names in it, as a robot's tools do."""
        from rclpy.node import Node

        self.node = Node(name, namespace=namespace, context=context)
        self.relative = namespace is not None
        self.received: dict[str, list] = {}
        self._pubs: dict[str, object] = {}
        self._subs: dict[str, object] = {}

    def advertise(self, *topics: str) -> None:
        """Create publishers now, so that discovery is under way before the first message."""
        from agent.graph import TOPICS
        from agent.ros_io import msg_class, qos_profile

        for topic in topics:
            if topic not in self._pubs:
                cls, qos = msg_class(TOPICS[topic].msg_type), qos_profile(TOPICS[topic].qos)
                self._pubs[topic] = self.node.create_publisher(cls, self._name(TOPICS[topic]), qos)

    def matched(self, *topics: str, by: object | None = None) -> bool:
        """Every named publisher has found a subscriber (best-effort messages sent before that are lost).

        With `by` (the node under test), its own subscriptions to them have found a publisher too:
        discovery runs both ways, and a reader drops data from a writer it has not matched yet.
        """
        if not all(self._pubs[t].get_subscription_count() > 0 for t in topics):
            return False
        if by is None:
            return True
        names = {self._pubs[t].topic_name for t in topics}
        subs = [sub for sub in by.subscriptions if sub.topic_name in names]
        return {sub.topic_name for sub in subs if sub.get_publisher_count() > 0} == names

    def hears(self, *topics: str) -> bool:
        """Every named recording subscription has found a publisher (messages sent before that are lost)."""
        return all(self._subs[t].get_publisher_count() > 0 for t in topics)

    def publish(self, topic: str, msg: object) -> None:
        self.advertise(topic)
        self._pubs[topic].publish(msg)

    def record(self, *topics: str) -> None:
        from agent.graph import TOPICS
        from agent.ros_io import msg_class, qos_profile

        for topic in topics:
            t = TOPICS[topic]
            qos = qos_profile(t.qos.with_depth(100))
            self.received[topic] = []
            self._subs[topic] = self.node.create_subscription(
                msg_class(t.msg_type), self._name(t), self.received[topic].append, qos
            )

    def _name(self, topic: object) -> str:
        return topic.ros_name if self.relative else topic.name

    def diagnostics(self, prefix: str) -> dict[str, object]:
        """Latest DiagnosticStatus per name starting with `prefix` (e.g. "policy: ")."""
        latest: dict[str, object] = {}
        for array in self.received.get("/diagnostics", []):
            for status in array.status:
                if status.name.startswith(prefix):
                    latest[status.name] = status
        return latest


class SensorFeed:
    """Publishes IMU samples every `imu_period_s` up to a stamp, then a camera image at that stamp.

    Each IMU sample carries its offset from `t0` in accel.x, so a test can read which samples the
    encoder's window held.
    """

    def __init__(self, probe: Probe, t0: float, hw: tuple[int, int] = (32, 32), imu_period_s: float = 0.005):
        self.probe, self.t0, self.hw, self.period = probe, t0, hw, imu_period_s
        self.last_imu: int | None = None  # grid index of the last IMU sample sent

    def imu_until(self, t: float) -> None:
        """IMU samples on the grid t0 + k * period, from the last one sent up to the first at or after t."""
        from agent.messages import sample_to_imu

        first = -20 if self.last_imu is None else self.last_imu + 1
        last = int(np.ceil((t - self.t0) / self.period - 1e-9))
        for k in range(first, last + 1):
            ts = self.t0 + k * self.period
            sample = np.array([ts - self.t0, 0.0, 9.81, 0.0, 0.0, 0.1])
            self.probe.publish("/imu/data", sample_to_imu(sample, ts))
        self.last_imu = last

    def image(self, t: float, value: int = 100, encoding: str = "rgb8") -> None:
        from agent.messages import rgb_to_image

        rgb = np.full((*self.hw, 3), value, dtype=np.uint8)
        self.probe.publish("/camera/image_raw", rgb_to_image(rgb, t, "camera", encoding))

    def step(self, t: float, value: int = 100) -> None:
        self.imu_until(t)
        self.image(t, value)

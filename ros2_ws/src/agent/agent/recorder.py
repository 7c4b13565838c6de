"""Record graph topics into a rosbag2 bag with the `rosbags` library, counting every message lost.

rosbag2 is not on PyPI, so `ros2 bag record` cannot run here; `rosbags` writes the same format: rosbag2
metadata version 9 with MCAP storage (the default storage of `ros2 bag` since Iron), which `ros2 bag info`
and `ros2 bag play` read. Messages are stored as received (serialized CDR, never decoded), stamped with
their reception time, and each topic's offered QoS comes from the graph, so `ros2 bag play` republishes
with the same QoS.

Where a message could be lost, and how it is counted (`RecordingReport.lost`):
- before or on the way to the recorder (not yet matched, a best-effort sample dropped, a reader history
  overflow): gaps in each publisher's sequence numbers (`agent.sequence_gaps`), a first number above 1
  included, count the missing ones;
- between reception and disk: nothing is dropped; the writer thread drains an unbounded queue, also on
  close;
- on a disk that fills: the bag is still finalised (`agent.bag_writer`), and the messages of the chunk
  that could not be written and every later one are counted per topic as not stored
  (`RecordingReport.not_stored`, and the bag's metadata.yaml). The recording has then stopped (`failure`):
  `agent run` stops the robot, since it runs on to keep a record (`SimSession.spin`).
The recorder runs on an executor and a thread of its own, apart from the graph's executor, with deep
reader histories (`DEPTH`), so a busy graph delays recording instead of overwriting it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, ShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rosbags.interfaces import Qos as BagQos
from rosbags.interfaces import QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

from agent.bag_writer import BagWriter
from agent.graph import Qos, Topic
from agent.ros_io import drain, msg_class, qos_profile
from agent.sequence_gaps import SequenceGaps
from opd.replay.bags.reader import typestore

log = logging.getLogger(__name__)

DEPTH = 1000  # reader history per topic: 5 s of the 200 Hz IMU
QUIET_S = 0.3  # on stop: wait until nothing arrived for this long (at most STOP_TIMEOUT_S) before closing
STOP_TIMEOUT_S = 5.0
STORE = "kilted"  # message definitions (with agent_interfaces') and type hashes (RIHS01) written into the bag
_NO_TIME = QosTime(0, 0)  # QoS durations left at their default (infinite)


@dataclass
class RecordingReport:
    """What a recording holds: messages written and messages lost, per topic."""

    path: Path
    written: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)  # sequence gaps: published, never received
    unchecked: Counter[str] = field(default_factory=Counter)  # messages without a sequence number
    not_stored: Counter[str] = field(default_factory=Counter)  # received, not in the bag: the disk failed
    failure: str = ""  # why recording stopped before the end; "" if it did not

    def summary(self) -> str:
        """One line, naming every topic that lost messages."""
        total, lost = sum(self.written.values()), sum(self.lost.values())
        line = f"recorded {total} messages on {len(+self.written)} topics to {self.path} (rosbag2, MCAP)"
        if sum(self.unchecked.values()):
            line += f"; {sum(self.unchecked.values())} could not be checked for losses (no sequence numbers)"
        if sum(self.not_stored.values()):
            topics = ", ".join(f"{t} {n}" for t, n in sorted(self.not_stored.items()) if n)
            line += (f"; RECORDING STOPPED ({self.failure}): {sum(self.not_stored.values())} messages "
                     f"received but not stored: {topics}")  # fmt: skip
        if not lost:
            return f"{line}; none lost"
        topics = ", ".join(f"{t} {n}" for t, n in sorted(self.lost.items()) if n)
        return f"{line}; LOST {lost} messages (published but never received): {topics}"


class RecordingStopped(RuntimeError):
    """The recording failed (a full disk): a run that records stops, the robot on the safe action."""


class BagRecorder:
    """Records `topics` into a new bag directory `out` until `stop()`.

    Args:
        out: bag directory to create (must not exist).
        topics: graph topics to record (type and QoS from the graph).
        context: rclpy context of the graph.
        metadata: strings stored in the bag's custom_data (e.g. the resolved parameters).
    """

    def __init__(
        self, out: Path, topics: Iterable[Topic], context: Context | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.report = RecordingReport(Path(out))
        self._writer = BagWriter(Path(out), metadata)
        store = typestore(STORE)
        self._queue: queue.SimpleQueue[tuple[Any, int, bytes] | None] = queue.SimpleQueue()
        self._gaps: dict[str, SequenceGaps] = {}
        self._last_arrival = time.monotonic()
        self.node = Node("recorder", context=context, start_parameter_services=False)
        for t in topics:
            conn = self._writer.add_connection(
                t.name, t.msg_type, typestore=store, offered_qos_profiles=[_bag_qos(t.qos)]
            )
            self._gaps[t.name] = SequenceGaps()
            self.report.written[t.name] = 0
            self._subscribe(t, conn)
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self._spinner = threading.Thread(target=self._spin, name="recorder-spin", daemon=True)
        self._disk = threading.Thread(target=self._write, name="recorder-write", daemon=True)
        self._spinner.start()
        self._disk.start()

    def _subscribe(self, topic: Topic, conn: Any) -> None:
        """A raw subscription that queues each message, and the rest of a burst with it (`drain`)."""
        gaps = self._gaps[topic.name]

        def keep(data: bytes, info: dict) -> None:
            gaps.see(info)
            self._queue.put((conn, info["received_timestamp"], data))

        def on_message(data: bytes, info: dict) -> None:
            keep(data, info)
            for more, more_info in drain(sub):
                keep(more, more_info)
            self._last_arrival = time.monotonic()

        sub = self.node.create_subscription(msg_class(topic.msg_type), topic.name, on_message,
                                            qos_profile(topic.qos.with_depth(DEPTH)), raw=True)  # fmt: skip

    def _spin(self) -> None:
        try:
            self._executor.spin()  # until `stop` shuts the executor down
        except (ExternalShutdownException, ShutdownException):
            pass  # ROS shut down first (SIGTERM, an error): `stop` still writes what arrived

    def _write(self) -> None:
        while (item := self._queue.get()) is not None:
            conn, stamp_ns, data = item
            if self._writer.write(conn, stamp_ns, data):
                self.report.written[conn.topic] += 1

    @property
    def failure(self) -> str:
        """Why recording stopped (a full disk, say); "" while it records."""
        return "" if self._writer.error is None else str(self._writer.error)

    def lost(self) -> Counter[str]:
        """Messages lost so far, by topic."""
        return Counter({topic: gaps.missing for topic, gaps in self._gaps.items()})

    def not_stored(self) -> Counter[str]:
        """Messages received but not stored so far (the disk failed), by topic."""
        return +self._writer.not_stored

    def stop(self) -> RecordingReport:
        """Take what is still in flight, then close the bag; returns what it holds and what was lost."""
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() - self._last_arrival < QUIET_S and time.monotonic() < deadline:
            time.sleep(0.05)
        self._executor.shutdown()
        self._spinner.join()
        self.node.destroy_node()
        self._queue.put(None)
        self._disk.join()
        self._writer.close()
        self.report.written = self._writer.stored()
        self.report.not_stored, self.report.failure = +self._writer.not_stored, self.failure
        self.report.lost = self.lost()
        self.report.unchecked = Counter({topic: gaps.unnumbered for topic, gaps in self._gaps.items()})
        if sum(self.report.lost.values()) or self.report.failure:
            log.warning(self.report.summary())
        return self.report


def _bag_qos(qos: Qos) -> BagQos:
    """Graph QoS -> the offered QoS profile stored with a topic in the bag's metadata: the profile the nodes
    use (`qos_profile`), its policies renumbered as rosbags' (both number them as rmw does)."""
    profile = qos_profile(qos)
    return BagQos(
        history=QosHistory(profile.history.value),
        depth=profile.depth,
        reliability=QosReliability(profile.reliability.value),
        durability=QosDurability(profile.durability.value),
        deadline=_NO_TIME,
        lifespan=_NO_TIME,
        liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=_NO_TIME,
        avoid_ros_namespace_conventions=False,
    )

"""Recorded runs in: rosbag2 bags read with `rosbags`, by topic role, in log-time order, every skip counted.

rosbag2 itself is not on PyPI, and its player replays neither deterministically (ros2/rosbag2#1254) nor in
order at high rates (#2091), so replay reads bags in-process. `rosbags` reads rosbag2 with MCAP or sqlite3
storage, split bags (several files in one bag directory) and bags with or without embedded message
definitions; without them the types come from the typestore of the distro named in `BagTopics.distro`.

Topics are mapped to roles through config (`BagTopics`): a robot's `/camera/color/image_raw` is not ours.
Messages come in log-time order (the recorder's reception time), decoded; what cannot be read is never
fatal while the rest can: each skipped message is counted by (topic, reason) with the log times of the
first and last (`Skips`). A recording cut short (no MCAP footer: the recorder died) is read up to the cut
(`opd.replay.bags.recovery`), the cut a skip with its time. A bag that cannot be opened at all, or where no
mapped topic is present, is one `BagError` naming the file or the topics. Bags are opened read-only; nothing
is written to them.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from opd.replay.bags.recovery import RecoveredMcap
from policies.config import Config

ROLES = ("camera", "imu", "active_skill", "privileged", "teacher_action", "state", "executed", "gate")
TYPES = {  # message types each role accepts
    "camera": ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"),
    "imu": ("sensor_msgs/msg/Imu",),
    "active_skill": ("sensor_msgs/msg/JointState",),
    "privileged": ("sensor_msgs/msg/JointState",),
    "teacher_action": ("agent_interfaces/msg/HybridAction",),
    "state": ("agent_interfaces/msg/StateEmbedding",),
    "executed": ("agent_interfaces/msg/HybridAction",),
    "gate": ("agent_interfaces/msg/GateState",),
}
STORES = {"humble": "ros2_humble", "jazzy": "ros2_jazzy", "kilted": "ros2_kilted"}
INTERFACES = "agent_interfaces"  # the stack's own messages (ros2_ws/src/agent_interfaces)
_SOURCE_MSG_DIR = Path(__file__).resolve().parents[3] / "ros2_ws" / "src" / INTERFACES / "msg"


def interface_msg_dir() -> Path:
    """Where the agent_interfaces .msg files are: this source tree, else an installed ROS prefix."""
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    for d in [_SOURCE_MSG_DIR, *(Path(p) / "share" / INTERFACES / "msg" for p in prefixes)]:
        if any(d.glob("*.msg")):
            return d
    raise FileNotFoundError(f"no {INTERFACES} message definitions in {_SOURCE_MSG_DIR} or a ROS prefix")


def typestore(distro: str = "kilted") -> Any:
    """A `rosbags` typestore: the distro's standard messages and agent_interfaces, so bags of the stack's
    messages are written with their definitions and read without them (a recorder that leaves them out)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores(STORES[distro]))
    types: dict[str, Any] = {}
    for path in sorted(interface_msg_dir().glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"{INTERFACES}/msg/{path.stem}"))
    store.register(types)
    return store


class BagError(RuntimeError):
    """The bag cannot be replayed at all (unreadable, or none of the mapped topics in it)."""


class BagTopics(Config):
    """Which recorded topic plays which role. Empty = not used. The defaults are the graph's own names."""

    camera: str = "/camera/image_raw"  # sensor_msgs/Image (rgb8, bgr8, mono8) or CompressedImage (jpeg, png)
    imu: str = "/imu/data"  # sensor_msgs/Imu
    active_skill: str = "/agent/active_skill"  # the task layer's skill, progress and step (the encoder's)
    privileged: str = "/sim/privileged_state"  # the sim twin's true state: the teacher's input
    teacher_action: str = "/teacher/action"  # the teacher's recorded actions (agreement is also from above)
    state: str = "/agent/state"  # recorded state embeddings (--reuse-state; the live encoder's frames)
    executed: str = "/opd/action"  # the executed actions the live graph published
    gate: str = "/opd/gate"  # the live gate's decisions with their context
    version: str = "/agent/student_version"  # versions learnt live, each with the frame it first acted on
    distro: Literal["humble", "jazzy", "kilted"] = "kilted"  # types of bags without embedded definitions
    namespace: str = Field("", pattern=r"^(/[A-Za-z_][A-Za-z0-9_]*)*$")  # prefixed to relative names

    def name(self, role: str) -> str:
        """The bag topic of `role` ("" = unused); relative names take the namespace (e.g. /robot1)."""
        topic = getattr(self, role)
        if topic and not topic.startswith("/"):
            return f"{self.namespace}/{topic}"
        return topic


@dataclass
class Skips:
    """Messages not used, by (topic, reason): how many, and the log times of the first and last, s."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    span: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    detail: dict[tuple[str, str], str] = field(default_factory=dict)  # the first message of each

    def add(self, topic: str, reason: str, time_s: float, detail: str = "", count: int = 1) -> None:
        key = (topic, reason)
        self.counts[key] += count
        first_last = self.span.setdefault(key, [time_s, time_s])
        first_last[1] = time_s
        self.detail.setdefault(key, detail)

    def raise_to(self, topic: str, reason: str, time_s: float, detail: str, count: int) -> None:
        """At least `count` of (topic, reason): a loss that several reads of the bag each meet counts once."""
        if (extra := count - self.counts[(topic, reason)]) > 0:
            self.add(topic, reason, time_s, detail, count=extra)

    def rows(self) -> list[dict[str, Any]]:
        """One row per (topic, reason), sorted: the report's "skipped" table."""
        return [
            {"topic": t, "reason": r, "count": n, "first_s": self.span[(t, r)][0],
             "last_s": self.span[(t, r)][1], "detail": self.detail[(t, r)]}
            for (t, r), n in sorted(self.counts.items())
        ]  # fmt: skip


@dataclass(frozen=True)
class RawStamp:
    """A header stamp read from raw bytes (builtin_interfaces/Time's fields)."""

    sec: int
    nanosec: int


@dataclass(frozen=True)
class BagMessage:
    """One decoded message of a mapped topic."""

    role: str
    topic: str
    log_s: float  # reception time at the recorder, s
    msg: Any  # rosbags' dataclass of the message; None when only the stamp was read
    stamp: RawStamp | None = None  # header stamp read from the raw bytes, for stamp-only roles


class BagInput:
    """An open bag: `messages(roles)` yields the mapped topics' messages in log-time order.

    Args:
        path: the bag directory (metadata.yaml and its storage files).
        topics: role -> topic mapping.
    """

    def __init__(self, path: str | Path, topics: BagTopics) -> None:
        from rosbags.highlevel import AnyReader

        self.path, self.topics = Path(path), topics
        self.skips = Skips()
        if not self.path.exists():
            raise BagError(f"{self.path}: no such bag")
        self.custom = recorded_custom_data(self.path)
        try:
            self.reader = AnyReader([self.path], default_typestore=typestore(topics.distro))
            self.reader.open()
        except Exception as err:  # rosbags raises its own error types per storage; all mean "unreadable"
            self.reader = self._recover(f"{type(err).__name__}: {err}")
        self.connections: dict[str, list[Any]] = {}
        for conn in self.reader.connections:
            role = next((r for r in ROLES if topics.name(r) == conn.topic), None)
            if role is None:
                continue
            if conn.msgtype not in TYPES[role]:
                self.skips.add(conn.topic, "unexpected_type", 0.0, f"{conn.msgtype}, expected {TYPES[role]}")
                continue
            self.connections.setdefault(role, []).append(conn)
        if not self.connections:
            present = sorted({c.topic for c in self.reader.connections})
            wanted = {r: topics.name(r) for r in ROLES if topics.name(r)}
            raise BagError(f"{self.path}: none of the mapped topics {wanted} is in the bag (it has "
                           f"{present}); map the robot's topics in the replay config's topics")  # fmt: skip

    def _recover(self, why: str) -> RecoveredMcap:
        """A bag rosbags cannot open: its MCAP files read record by record up to where they were cut short
        (`opd.replay.bags.recovery`); each cut is a skip of "<bag>" at the last intact log time. sqlite3
        storage and bags with nothing readable are one error naming the bag."""
        if self.path.is_file():  # a bare .mcap, as a recorder killed mid-write leaves it
            files = [self.path]
        else:
            files = sorted(self.path.glob("*.mcap"), key=lambda p: (len(p.name), p.name))  # _9 before _10
        if not files:
            raise BagError(f"{self.path}: cannot open the bag: {why}")
        reader = RecoveredMcap(files, typestore(self.topics.distro))
        if not reader.connections:
            raise BagError(f"{self.path}: cannot open the bag ({why}), and no record of it is readable")
        for name, count in listed_files(self.path).items():  # a split bag missing a file: its part is gone
            if not (self.path / name).is_file():
                detail = (f"{name} is listed in metadata.yaml but not in the bag: its messages are not "
                          f"replayed (rosbags: {why})")  # fmt: skip
                self.skips.add("<bag>", "missing_file", 0.0, detail, count=max(count, 1))
        for cut in reader.cuts:
            detail = (f"{cut.path.name} ends in the middle of a record ({cut.error}): read its "
                      f"{cut.messages} messages before the cut (rosbags: {why})")  # fmt: skip
            self.skips.add("<bag>", "truncated", cut.last_log_s, detail)
        if reader.cuts:
            self._count_past_cuts(reader, max(c.last_log_s for c in reader.cuts))
        return reader

    def _count_past_cuts(self, reader: RecoveredMcap, cut_s: float) -> None:
        """The messages a cut took: per topic, those metadata.yaml lists beyond those read, as `unread`;
        without a metadata.yaml (a bare file, a recorder killed before writing it) that number is unknown,
        and the report says so rather than nothing."""
        listed = listed_topics(self.path)
        if not listed:
            detail = ("no metadata.yaml lists what was recorded (a bare .mcap, or a recorder killed before "
                      "writing it): how many messages followed the cut is unknown")  # fmt: skip
            self.skips.add("<bag>", "unread_unknown", cut_s, detail, count=0)
            return
        read: Counter[str] = Counter()
        for conn in reader.connections:
            read[conn.topic] += conn.msgcount
        for topic, count in sorted(listed.items()):
            if (lost := count - read[topic]) > 0:
                detail = f"{lost} of the {count} messages metadata.yaml lists are past the cut: not replayed"
                self.skips.add(topic, "unread", cut_s, detail, count=lost)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> BagInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def start_s(self) -> float:
        return self.reader.start_time * 1e-9

    @property
    def duration_s(self) -> float:
        return max(self.reader.end_time - self.reader.start_time, 0) * 1e-9

    def missing(self) -> dict[str, str]:
        """Mapped roles whose topic the bag does not hold (or holds with another type): role -> topic."""
        return {r: self.topics.name(r) for r in ROLES if self.topics.name(r) and r not in self.connections}

    def message_count(self, role: str) -> int:
        """Messages of `role` the bag's index lists (0 for an unmapped role)."""
        return sum(c.msgcount for c in self.connections.get(role, []))

    def has(self, role: str) -> bool:
        return role in self.connections

    def launch_args(self) -> dict[str, str]:
        """The recorded run's launch arguments (artifact_dir, backend, drive, precision), {} when none."""
        return recorded_launch_args(self.custom)

    def _count_unread(self, conns: list[Any], read: Counter[int], last: float, why: str) -> None:
        """Each connection's messages the bag lists but a read did not give (`read`: per connection), as
        `unread`, counted once however many reads of the bag meet them."""
        for c in conns:
            lost = c.msgcount - read[id(c)]
            detail = f"{lost} of its {c.msgcount} messages of type {c.msgtype}: {why}"
            self.skips.raise_to(c.topic, "unread", last, detail, lost)

    def node_params(self, node: str) -> dict[str, Any]:
        """The `ros__parameters` of `node` in the recorded run (`agent run --record`), {} when not stored
        or not a parameter file's shape (metadata.yaml is the recorder's to write, not ours to trust)."""
        text = self.custom.get("agent.params")
        try:
            params = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            return {}
        entry = params.get(node) if isinstance(params, dict) else None
        values = entry.get("ros__parameters") if isinstance(entry, dict) else None
        return values if isinstance(values, dict) else {}

    def messages(self, roles: tuple[str, ...], stamps_only: tuple[str, ...] = ()) -> Iterator[BagMessage]:
        """Decoded messages of `roles` in log-time order. Undecodable ones are skipped and counted; a read
        error (a truncated or corrupt file) ends the iteration, counted under the topic "<bag>". Messages of
        `stamps_only` roles are not decoded: only their header stamp is read from the raw CDR (every mapped
        type starts with a std_msgs/Header), which is ~50x cheaper, for their statistics."""
        roles = (*roles, *stamps_only)
        conns = [c for r in roles for c in self.connections.get(r, [])]
        if not conns:
            return
        role_of = {id(c): r for r in roles for c in self.connections.get(r, [])}
        it = self.reader.messages(connections=conns)
        last = self.start_s
        read: Counter[int] = Counter()  # messages read per connection
        while True:
            try:
                conn, t_ns, raw = next(it)
            except StopIteration:  # fewer than listed: metadata.yaml names a type the file does not hold
                self._count_unread(conns, read, last, "not found as that type (is it the file's?)")
                return
            except Exception as err:  # storage-level corruption: keep what was read
                why = f"{type(err).__name__}: {err}"
                self.skips.raise_to("<bag>", "read_error", last, f"{why}; reading stopped", 1)
                self._count_unread(conns, read, last, f"past a read error ({why})")
                return
            read[id(conn)] += 1
            last = t_ns * 1e-9
            role = role_of[id(conn)]
            if role in stamps_only:
                if len(raw) >= 12:
                    order = "<" if raw[1] & 1 else ">"  # CDR encapsulation: little or big endian
                    sec, nanosec = struct.unpack_from(f"{order}iI", raw, 4)
                    yield BagMessage(role, conn.topic, last, None, RawStamp(sec, nanosec))
                else:
                    self.skips.add(conn.topic, "undecodable", last, f"{len(raw)} bytes: no header")
                continue
            try:
                msg = self.reader.deserialize(raw, conn.msgtype)
            except Exception as err:  # a message that does not decode as its type
                self.skips.add(conn.topic, "undecodable", last, f"{type(err).__name__}: {err}")
                continue
            yield BagMessage(role, conn.topic, last, msg)


def bag_info(bag: Path) -> dict[str, Any]:
    """metadata.yaml's `rosbag2_bagfile_information`, {} when missing, unreadable or not a mapping (the
    recorder's to write, not ours to trust: every field read from it is checked for its type)."""
    try:
        meta = yaml.safe_load((Path(bag) / "metadata.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    info = meta.get("rosbag2_bagfile_information") if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else {}


def recorded_custom_data(bag: Path) -> dict[str, str]:
    """A bag's custom_data (rosbag2 metadata version >= 6; `rosbags` does not expose it, so it is read from
    metadata.yaml without opening the storage), {} when there is none."""
    custom = bag_info(bag).get("custom_data")
    return {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}


def listed_files(bag: Path) -> dict[str, int]:
    """The storage files metadata.yaml lists, with the messages it says each holds (0: not said)."""
    info = bag_info(bag)
    files = info.get("files") if isinstance(info.get("files"), list) else []
    counts = {str(f.get("path")): f.get("message_count") for f in files if isinstance(f, dict)}
    paths = info.get("relative_file_paths")
    names = [str(n) for n in paths] if isinstance(paths, list) else list(counts)
    return {n: counts.get(n) if isinstance(counts.get(n), int) else 0 for n in names}


def listed_topics(bag: Path) -> dict[str, int]:
    """Per topic, the messages metadata.yaml says were recorded ({} when it lists none)."""
    entries = bag_info(bag).get("topics_with_message_count")
    out: dict[str, int] = {}
    for e in entries if isinstance(entries, list) else []:
        meta = e.get("topic_metadata") if isinstance(e, dict) else None
        name, count = (meta or {}).get("name") if isinstance(meta, dict) else None, e.get("message_count")
        if isinstance(name, str) and isinstance(count, int):
            out[name] = out.get(name, 0) + count
    return out


def recorded_launch_args(custom: dict[str, str]) -> dict[str, str]:
    """The launch arguments `agent run --record` stores in custom_data, {} when none."""
    try:
        args = json.loads(custom.get("agent.launch_args", "{}"))
    except json.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in args.items()} if isinstance(args, dict) else {}


def stamp_ns(stamp: float) -> int:
    """A stamp as integer ns: the key the streams' stamps are matched by."""
    return round(stamp * 1e9)


def dumps(data: Any) -> str:
    """Replay JSON: sorted keys and no NaN (null instead), so two runs give the same bytes."""
    return json.dumps(_clean(data), sort_keys=True, indent=1)


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x
